"""ReflectRM's settings: one `Settings` object in sections, read from the environment, validated at start-up.

    section      what                                              example
    store        where the store lives, how it waits on locks      REFLECTRM_STORE__DATABASE_URL=postgresql://h/db
    judge        the library's `JudgeConfig`, field for field      REFLECTRM_JUDGE__N=4
    generation   which model, on which backend and device          REFLECTRM_GENERATION__DEVICE=cuda
    app          how the workbench is served                       REFLECTRM_APP__PORT=8080

Every field has a nested name (`REFLECTRM_<SECTION>__<FIELD>`) and, because field names are unique
across sections, a short one (`REFLECTRM_<FIELD>`: `REFLECTRM_DATABASE_URL`, `REFLECTRM_AUTH`, ...);
the nested name wins when both are set. `REFLECTRM_MAX_NEW_TOKENS` sets stage 1 and stage 2 alike.
Keyword arguments take the same short names (`load_settings(port=8080, n=4)`) and win over the
environment. The judge section is `JudgeConfig` itself, so its defaults and rules are stated once.

It lives with the store, the lowest layer that has pydantic-settings (`pip install 'reflectrm[store]'`);
the app builds on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from reflectrm.core.config import JudgeConfig
from reflectrm.errors import ConfigError

ENV_PREFIX = "REFLECTRM_"
DEFAULT_DATABASE_URL = "sqlite:///reflectrm.db"
"""A SQLite file `reflectrm.db` in the working directory."""

SUPPORTED_SCHEMES = ("sqlite", "postgresql")


class StoreSettings(BaseModel):
    """Where the store lives and how it waits for a busy database."""

    model_config = ConfigDict(frozen=True)

    database_url: str = DEFAULT_DATABASE_URL  # SQLAlchemy URL, or a plain path to a SQLite file
    sqlite_busy_timeout_s: float = Field(30.0, gt=0)  # how long SQLite waits on a lock before it answers "busy"
    # WAL + NORMAL: a process crash loses nothing committed; power loss may lose the last commits
    sqlite_synchronous: str = "NORMAL"
    lock_retry_s: float = Field(60.0, ge=0)  # a transaction that still meets "database is locked" is retried this long
    # how long to wait for a database server to answer a new connection (a server that accepts and never
    # answers hung `export` for ever); libpq counts whole seconds, at least 2
    connect_timeout_s: int = Field(10, ge=2, le=3600)

    @field_validator("database_url")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        return normalise_url(value)

    @field_validator("sqlite_synchronous")
    @classmethod
    def _known_sync(cls, value: str) -> str:
        if value.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"sqlite_synchronous must be OFF, NORMAL, FULL or EXTRA, got {value!r}")
        return value.upper()


class GenerationSettings(BaseModel):
    """Which model judges, on which backend and device."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())

    model: str | None = None  # Hugging Face id or local path; None = the bundled demo judge
    backend: str = "transformers"  # generation backend (`reflectrm.backends.BACKENDS`)
    device: str = "auto"  # cpu, cuda, cuda:1 ...
    engine: dict[str, Any] = {}  # vllm/openai backend options (`EngineConfig` fields, e.g. {"base_urls": [...]})
    # torch CPU threads. None: `reflectrm.defaults.default_threads` (1 for the bundled demo judge on a CPU unless
    # OMP_NUM_THREADS is set: on a busy 2-core machine two threads wait on each other), torch's default otherwise
    cpu_threads: int | None = Field(None, ge=1)
    warm_up: bool = True  # load the model in the background at start, so the first judgment is quick

    @field_validator("engine")
    @classmethod
    def _engine_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        from reflectrm.backends.engine import EngineConfig  # a config type: stdlib only

        EngineConfig.from_kwargs(dict(value))  # ConfigError (a ValueError) names the bad option
        return value

    @field_validator("cpu_threads")
    @classmethod
    def _thread_count(cls, value: int | None) -> int | None:
        from reflectrm.defaults import check_threads

        return None if value is None else check_threads(value, name="cpu_threads")

    def torch_threads(self) -> int | None:
        """The torch CPU thread count to set (None: leave torch's default)."""
        from reflectrm.defaults import default_threads

        return self.cpu_threads if self.cpu_threads is not None else default_threads(self.model, self.device)


class ServeSettings(BaseModel):
    """How the workbench is served."""

    model_config = ConfigDict(frozen=True)

    host: str = "127.0.0.1"  # interface to bind; 0.0.0.0 exposes the app to the network
    port: int = Field(7860, ge=0, le=65535)  # 0 = any free port
    auth: str = ""  # "user:pass,user2:pass2"; empty = no login
    author: str = "reviewer"  # correction author when nobody is logged in and no name is typed
    audit_batch_size: int = Field(4, ge=1)  # pairs generated together in a batch audit
    runs_dir: Path | None = None  # training run folders (Train tab); None: runs/ beside a SQLite store, else ./runs
    # proxies whose X-Forwarded-For names the client (IPs or networks, comma-separated, e.g. 127.0.0.1,10.0.0.0/8);
    # empty: none, the peer's own address is the client's (else anyone could rotate the header past the login throttle)
    trusted_proxies: str = ""

    @field_validator("auth")
    @classmethod
    def _auth_pairs(cls, value: str) -> str:
        parse_auth(value)
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, value: str) -> str:
        parse_proxies(value)
        return value

    def credentials(self) -> list[tuple[str, str]]:
        """The `auth` setting as (user, password) pairs; [] when login is off."""
        return parse_auth(self.auth)


SECTIONS: Mapping[str, Any] = MappingProxyType({"store": StoreSettings, "judge": JudgeConfig,
                                               "generation": GenerationSettings, "app": ServeSettings})


def _section_fields(kind: Any) -> list[str]:
    return [f.name for f in fields(kind)] if is_dataclass(kind) else list(kind.model_fields)


SHORT_NAMES: Mapping[str, str] = MappingProxyType(
    {name: section for section, kind in SECTIONS.items() for name in _section_fields(kind)})
"""Each field's short name -> its section (field names are unique across sections; a test keeps them so)."""

TIED: Mapping[str, str] = MappingProxyType({"max_new_tokens": "reflection_max_new_tokens"})
"""A short `max_new_tokens` also sets stage 2's budget (as the app's one setting did), unless that is given."""


class Settings(BaseSettings):
    """Every setting of the store, the judge, the model and the app, in sections."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore", frozen=True)

    store: StoreSettings = StoreSettings()
    judge: JudgeConfig = JudgeConfig()
    generation: GenerationSettings = GenerationSettings()
    app: ServeSettings = ServeSettings()

    @model_validator(mode="before")
    @classmethod
    def _route_short_names(cls, data: Any) -> Any:
        """Keyword arguments by short name (`port=8080`) go to their section, over what the environment gave."""
        return _routed(data) if isinstance(data, dict) else data

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Earlier sources win: keyword arguments, then nested names, then short names.
        return init_settings, env_settings, _ShortEnvSource(settings_cls), dotenv_settings, file_secret_settings

    def judge_config(self, **changes: Any) -> JudgeConfig:
        """The judge section (plus `changes`, validated again)."""
        return self.judge.with_(**changes) if changes else self.judge


class _ShortEnvSource(PydanticBaseSettingsSource):
    """`REFLECTRM_<FIELD>` for every field of every section, returned nested by section."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # unused: __call__ does it all
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        env = {k.upper(): v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)}
        names = {name: f"{ENV_PREFIX}{name.upper()}" for name in SHORT_NAMES}
        return _routed({name: env[var] for name, var in names.items() if var in env})


def _routed(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its short names moved into their sections (a short name overrides the section's value)."""
    out = {k: v for k, v in data.items() if k not in SHORT_NAMES}
    for section, value in out.items():  # as dicts (copies), so that short names can be laid over them
        if is_dataclass(value) or isinstance(value, (BaseModel, dict)):
            out[section] = (asdict(value) if is_dataclass(value)
                            else value.model_dump() if isinstance(value, BaseModel) else dict(value))
    for name, value in data.items():
        if name in SHORT_NAMES and value is not None:
            section = out.setdefault(SHORT_NAMES[name], {})
            section[name] = value
            if name in TIED and TIED[name] not in data:
                section[TIED[name]] = value
    return out


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with `overrides` by short name (None values ignored) on top; validated.

    Raises:
        ConfigError: a setting is invalid; the message names it, its environment variable and the problem.
    """
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:  # a section given as JSON that does not parse (REFLECTRM_STORE='{bad')
        raise ConfigError(_settings_error_line(exc)) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [str(part) for part in first["loc"]]
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"setting {'.'.join(loc) or 'settings'}{_env_names(loc)}: {message}") from exc


def _settings_error_line(exc: SettingsError) -> str:
    """ "REFLECTRM_STORE is not a JSON object ..." for pydantic-settings' 'error parsing value for field "store"'."""
    text = str(exc)
    section = next((name for name in SECTIONS if f'"{name}"' in text), None)
    if section is None:
        return f"a REFLECTRM_ setting could not be read ({' '.join(text.split())}): fix it or unset it"
    return (f"{ENV_PREFIX}{section.upper()} is not valid JSON: give a JSON object (e.g. "
            f"{ENV_PREFIX}{section.upper()}='{{\"{_section_fields(SECTIONS[section])[0]}\": ...}}') or set single "
            f"fields as {ENV_PREFIX}{section.upper()}__FIELD")


def _env_names(loc: list[str]) -> str:
    """ " (REFLECTRM_APP__PORT or REFLECTRM_PORT)" for a section's field; "" otherwise."""
    if len(loc) != 2:
        return ""
    return f" ({ENV_PREFIX}{loc[0].upper()}__{loc[1].upper()} or {ENV_PREFIX}{loc[1].upper()})"


def parse_auth(value: str) -> list[tuple[str, str]]:
    """Parse "user:pass,user2:pass2" (passwords may contain ':'; users may not)."""
    pairs = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        user, sep, password = item.partition(":")
        if not sep or not user or not password:
            raise ValueError(f"auth entry {item.split(':')[0]!r}... must be user:password "
                             "(entries separated by commas)")
        pairs.append((user, password))
    return pairs


def parse_proxies(value: str) -> list[str]:
    """Parse "127.0.0.1,10.0.0.0/8" (IP addresses or networks); "" is no proxy. "*" is refused: it trusts everyone."""
    import ipaddress

    entries = [part.strip() for part in value.split(",") if part.strip()]
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(f"trusted proxy {entry[:60]!r} is not an IP address or network (e.g. 127.0.0.1 or "
                             "10.0.0.0/8); list only the proxies in front of the app") from None
    return entries


def normalise_url(url: str) -> str:
    """A SQLAlchemy URL for `url`: a plain path becomes a SQLite URL, `postgresql://` uses psycopg 3.

    Raises:
        ConfigError: the URL names a database the store does not support.
    """
    url = url.strip()
    if not url:
        raise ConfigError("the database URL is empty: pass sqlite:///FILE.db or postgresql+psycopg://HOST/DB")
    if "://" not in url:
        return f"sqlite:///{Path(url)}"
    scheme, rest = url.split("://", 1)
    dialect = scheme.split("+", 1)[0]
    if dialect == "postgres":
        dialect = scheme = "postgresql"
    if dialect not in SUPPORTED_SCHEMES:
        raise ConfigError(
            f"database URL scheme {scheme!r} is not supported: use sqlite:///FILE.db or postgresql+psycopg://HOST/DB"
        )
    if scheme == "postgresql":  # SQLAlchemy's default driver is psycopg2; the store ships with psycopg 3
        scheme = "postgresql+psycopg"
    if dialect == "postgresql" and scheme != "postgresql+psycopg":
        raise ConfigError(f"database URL driver {scheme!r} is not supported: the store talks to PostgreSQL through "
                          "psycopg 3: write postgresql://HOST/DB or postgresql+psycopg://HOST/DB")
    if dialect == "sqlite" and scheme not in ("sqlite", "sqlite+pysqlite"):
        raise ConfigError(f"database URL driver {scheme!r} is not supported: write sqlite:///FILE.db")
    normal = f"{scheme}://{rest}"
    _check_parses(normal)
    return normal


def _check_parses(url: str) -> None:
    """Refuse a URL SQLAlchemy cannot read (a bad port, an unclosed [host]) with one line, the password hidden."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018 - make_url reads the port lazily on some versions
    except (ArgumentError, ValueError) as exc:
        shown = url.split("://", 1)[0] + "://..."
        raise ConfigError(f"the database URL {shown} is malformed ({' '.join(str(exc).split())[:120]}): "
                          "write sqlite:///FILE.db or postgresql://USER@HOST:PORT/DB") from None
