"""The app's settings: one `AppSettings` class, environment prefix `REFLECTRM_`, validated at start-up.

    REFLECTRM_AUTH="ana:secret,ben:hunter2"      # optional login
    REFLECTRM_DATABASE_URL=sqlite:///reflectrm.db
    REFLECTRM_MAX_NEW_TOKENS=96                   # the demo judge writes ~45 tokens
    REFLECTRM_RUNS_DIR=/data/runs                 # where the Train tab's runs live

Command-line options (`reflectrm app --port ...`) override the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reflectrm.core.config import JudgeConfig
from reflectrm.core.strategies import STRATEGIES
from reflectrm.errors import ConfigError


class AppSettings(BaseSettings):
    """How the app is served and how it judges."""

    model_config = SettingsConfigDict(env_prefix="REFLECTRM_", extra="ignore")

    host: str = "127.0.0.1"  # interface to bind; 0.0.0.0 exposes the app to the network
    port: int = Field(7860, ge=0, le=65535)  # 0 = any free port
    database_url: str | None = None  # None: the store's default (REFLECTRM_DATABASE_URL, else ./reflectrm.db)
    auth: str = ""  # "user:pass,user2:pass2"; empty = no login
    model: str | None = None  # Hugging Face id or local path; None = the bundled demo judge
    backend: str = "transformers"  # generation backend (`reflectrm.backends.BACKENDS`)
    device: str = "auto"  # cpu, cuda, cuda:1 ...
    engine: dict[str, Any] = {}  # vllm/openai backend options (`EngineConfig` fields, e.g. {"base_urls": [...]})
    strategy: str = "reflectrm"  # the Judge tab's default strategy
    n: int = Field(8, ge=2)  # stage-1 samples N
    seed: int = 0  # default seed: same seed, same judgment
    max_new_tokens: int = Field(1024, ge=1)  # per analysis and per reflection (paper: 1024)
    audit_batch_size: int = Field(4, ge=1)  # pairs generated together in a batch audit (the cancel granularity)
    author: str = "reviewer"  # correction author when nobody is logged in and no name is typed
    warm_up: bool = True  # load the model in the background at start, so the first judgment is quick
    # torch CPU threads. None: 1 for the bundled demo judge (3.3 M parameters: a second thread barely helps, and
    # on a busy 2-core machine two threads spin-wait each other into minutes per judgment), torch's default otherwise
    cpu_threads: int | None = Field(None, ge=1)
    runs_dir: Path | None = None  # training run folders (Train tab); None: runs/ beside a SQLite store, else ./runs

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        if value not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {value!r}")
        return value

    @field_validator("engine")
    @classmethod
    def _engine_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        from reflectrm.backends.engine import EngineConfig

        EngineConfig.from_kwargs(dict(value))  # ConfigError (a ValueError) names the bad option
        return value

    @field_validator("auth")
    @classmethod
    def _auth_pairs(cls, value: str) -> str:
        parse_auth(value)
        return value

    def credentials(self) -> list[tuple[str, str]]:
        """The `auth` setting as (user, password) pairs; [] when login is off."""
        return parse_auth(self.auth)

    def torch_threads(self) -> int | None:
        """The torch CPU thread count to set (None: leave torch's default)."""
        if self.cpu_threads is not None:
            return self.cpu_threads
        return 1 if self.model is None and self.device in ("auto", "cpu") else None

    def judge_config(self, **changes: Any) -> JudgeConfig:
        """The library config these settings give (plus `changes`)."""
        base = JudgeConfig(strategy=self.strategy, n=self.n, seed=self.seed, max_new_tokens=self.max_new_tokens,
                           reflection_max_new_tokens=self.max_new_tokens)
        return base.with_(**changes) if changes else base


def parse_auth(value: str) -> list[tuple[str, str]]:
    """Parse "user:pass,user2:pass2" (passwords may contain ':'; users may not)."""
    pairs = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        user, sep, password = item.partition(":")
        if not sep or not user or not password:
            raise ValueError(f"auth entry {item.split(':')[0]!r}... must be user:password (entries separated by commas)")
        pairs.append((user, password))
    return pairs


def load_settings(**overrides: Any) -> AppSettings:
    """Settings from the environment, with `overrides` (None values ignored) on top; validated."""
    try:
        return AppSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "settings"
        raise ConfigError(f"setting {where} (REFLECTRM_{where.upper()}): {first['msg']}") from exc
