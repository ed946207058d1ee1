"""The app's settings: one `Settings` object in sections, read from the environment, validated at start-up.

    section      what                                              example
    store        where the store lives, how it waits on locks      REFLECTRM_STORE__DATABASE_URL=postgresql://h/db
    judge        the library's `JudgeConfig`, field for field      REFLECTRM_JUDGE__N=4
    generation   the library's `BackendConfig`: model, backend,    REFLECTRM_GENERATION__DEVICE=cuda
                 device and CPU threads
    engine       the library's `EngineConfig` (vllm and openai)    REFLECTRM_ENGINE__MAX_MODEL_LEN=8192
    app          how the workbench is served                       REFLECTRM_APP__PORT=8080

    REFLECTRM_MODEL=/models/judge                 # generation section; unset: the bundled demo judge
    REFLECTRM_BACKEND=vllm                        # generation section: transformers, vllm or openai
    REFLECTRM_DEVICE=cpu                          # generation section
    REFLECTRM_THREADS=2                           # generation section: torch CPU threads, or auto (as --threads)
    REFLECTRM_AUTH="ana:secret,ben:hunter2"      # optional login (app section)
    REFLECTRM_DATABASE_URL=sqlite:///reflectrm.db # store section
    REFLECTRM_MAX_NEW_TOKENS=192                  # judge section, stage 1 and 2 (a demo judge writes 40-170 tokens)
    REFLECTRM_RUNS_DIR=/data/runs                 # where the Train tab's runs live (app section)
    REFLECTRM_DATA_ROOT=/data/benchmarks          # the only folder the app reads files from on a user's behalf (app)
    REFLECTRM_ALLOWED_HOSTS=lab.example.com       # a name the app is reached by, beyond localhost and IPs (app)

Every field has a nested name (`REFLECTRM_<SECTION>__<FIELD>`) and, because field names are unique
across sections, a short one (`REFLECTRM_<FIELD>`: `REFLECTRM_DATABASE_URL`, `REFLECTRM_AUTH`, ...);
the nested name wins when both are set. `REFLECTRM_MAX_NEW_TOKENS` sets stage 1 and stage 2 alike.
Keyword arguments take the same short names (`load_settings(port=8080, n=4)`) and win over the
environment; command-line options (`reflectrm app --port ...`) override the environment. A variable an
older version read (`REFLECTRM_CPU_THREADS`) is refused at start-up with its new name (`RENAMED_VARIABLES`).

No field is restated: the store section is the store's `StoreSettings` and the environment is read by its
`SectionedSettings` (`reflectrm_db.settings`, which also reads the store section alone for `reflectrm db`);
the judge, generation and engine sections are the library's `JudgeConfig`, `BackendConfig` and
`EngineConfig` themselves, so their defaults and rules are stated once, for the commands and the app alike.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from reflectrm_db.settings import ENV_PREFIX, SectionedSettings, StoreSettings
from reflectrm.backends.config import BackendConfig
from reflectrm.backends.engine import ENGINE_BACKENDS, EngineConfig
from reflectrm.core.config import JudgeConfig
from reflectrm.display import printable
from reflectrm.errors import ConfigError
from reflectrm.serving.hosts import AccessConfig


class ServeSettings(BaseModel):
    """How the workbench is served."""

    model_config = ConfigDict(frozen=True)

    host: str = "127.0.0.1"  # interface to bind (0.0.0.0 exposes the app to the network)
    port: int = Field(7860, ge=0, le=65535)  # port (0: any free port)
    auth: str = ""  # "user:pass,user2:pass2"; empty = no login
    author: str = "reviewer"  # correction author when nobody is logged in and no name is typed
    audit_batch_size: int = Field(4, ge=1)  # pairs generated together in a batch audit
    runs_dir: Path | None = None  # the Train tab's run folders (unset: runs/ beside a SQLite store, else ./runs)
    # the only folder whose files users may name in the app (the Evaluate tab's local file or folder, the Train tab's
    # base model folder): nothing outside it, links out of it included, is read for them (unset: data/ beside a
    # SQLite store, else ./data)
    data_root: Path | None = None
    # proxies whose X-Forwarded-For names the client (IPs or networks, comma-separated, e.g. 127.0.0.1,10.0.0.0/8);
    # empty: none, the peer's own address is the client's (else anyone could rotate the header past the login throttle)
    trusted_proxies: str = ""
    # names the app is reached by beyond localhost and IP addresses, comma-separated (".example.com": with its
    # subdomains; "*": any); any other Host is refused, as a DNS-rebinding page sends its own (`AccessConfig`)
    allowed_hosts: str = ""
    # origins (scheme://host[:port], comma-separated; "*": any) whose pages may post to the app besides its own
    allowed_origins: str = ""
    # Gradio's upload folder as a whole (uploads and the files the app hands back); an upload past it gets 413
    upload_folder_max_mb: int = Field(1024, ge=1)
    warm_up: bool = True  # load the model in the background at start, so the first judgment is quick

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

    @field_validator("allowed_hosts", "allowed_origins")
    @classmethod
    def _access_entries(cls, value: str, info: Any) -> str:
        AccessConfig(**{info.field_name: parse_list(value)})  # ConfigError (a ValueError) names the bad entry
        return value

    def credentials(self) -> list[tuple[str, str]]:
        """The `auth` setting as (user, password) pairs; [] when login is off."""
        return parse_auth(self.auth)

    def access(self) -> AccessConfig:
        """The hosts and origins the app answers (its own bind name included)."""
        return AccessConfig(allowed_hosts=parse_list(self.allowed_hosts),
                            allowed_origins=parse_list(self.allowed_origins)).serving(self.host)


class Settings(SectionedSettings):
    """Every setting of the store, the judge, the model and the app, in sections."""

    store: StoreSettings = StoreSettings()
    judge: JudgeConfig = JudgeConfig()
    generation: BackendConfig = BackendConfig()
    engine: EngineConfig = EngineConfig()
    app: ServeSettings = ServeSettings()

    # a short `max_new_tokens` also sets stage 2's budget (as the app's one setting did), unless that is given
    tied: ClassVar[Mapping[str, str]] = MappingProxyType({"max_new_tokens": "reflection_max_new_tokens"})

    def judge_config(self, **changes: Any) -> JudgeConfig:
        """The judge section (plus `changes`, validated again)."""
        return self.judge.with_(**changes) if changes else self.judge

    def backend_configs(self, *, model: str | None = None) -> tuple[BackendConfig, EngineConfig | None]:
        """`load_backend`'s arguments: the generation section (another `model` if given) and, for the vllm and
        openai backends, the engine section."""
        generation = self.generation if model is None else replace(self.generation, model=model)
        return generation, (self.engine if generation.backend in ENGINE_BACKENDS else None)


AppSettings = Settings
"""The name the app's modules use for the one settings object."""

SECTIONS: Mapping[str, Any] = MappingProxyType(Settings.sections())
"""Section name -> its type: store, judge, generation, engine, app."""

SHORT_NAMES: Mapping[str, str] = MappingProxyType(Settings.short_names())
"""Each field's short name -> its section (field names are unique across sections; a test keeps them so)."""


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with `overrides` by short name (None values ignored) on top; validated.

    Raises:
        ConfigError: a setting is invalid; the message names it, its environment variable and the problem.
    """
    return Settings.load(**overrides)


def parse_auth(value: str) -> list[tuple[str, str]]:
    """Parse "user:pass,user2:pass2" (passwords may contain ':'; users may not).

    Refused, naming the user and never a password: an entry without both parts, a blank user or password, a user
    with spaces around the name, and a user named twice (in any case: "Ana" and "ana" would share a login name
    to a person, while the first one listed would silently win)."""
    pairs: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        user, sep, password = item.partition(":")
        shown = printable(user[:40])
        if not sep or not user.strip() or not password.strip():
            raise ValueError(f"auth entry {shown!r}... must be user:password with neither part blank "
                             "(entries separated by commas)")
        if user != user.strip():
            raise ValueError(f"auth user {shown!r} has spaces around the name: remove them")
        if (key := user.casefold()) in seen:
            raise ValueError(f"auth user {shown!r} is listed twice (as {printable(seen[key][:40])!r} before): "
                             "give each user one entry")
        seen[key] = user
        pairs.append((user, password))
    return pairs


OTHER_VARIABLES = ("REFLECTRM_SERVE_TOKEN", "REFLECTRM_REWARD_URL", "REFLECTRM_OPENAI_API_KEY")
"""The `REFLECTRM_` variables read outside the settings: the reward service's token (`serve`, and the client that
calls it), the client's service URL, and the OpenAI-compatible backend's key."""


RENAMED_VARIABLES: Mapping[str, str] = MappingProxyType({
    "REFLECTRM_CPU_THREADS": "REFLECTRM_THREADS",
    "REFLECTRM_GENERATION__CPU_THREADS": "REFLECTRM_GENERATION__THREADS",
    "REFLECTRM_GENERATION__WARM_UP": "REFLECTRM_APP__WARM_UP",
    "REFLECTRM_GENERATION__ENGINE": "REFLECTRM_ENGINE",
})
"""Variables an older version read, by the name that now sets the same thing: refused at start-up, naming the new
one, so that nobody's setting silently stops applying."""


def known_variables() -> set[str]:
    """Every `REFLECTRM_` environment variable ReflectRM reads: settings by section, nested and short name, and more."""
    names = {f"{ENV_PREFIX}{section.upper()}" for section in SECTIONS}
    names |= {f"{ENV_PREFIX}{section.upper()}__{field.upper()}" for field, section in SHORT_NAMES.items()}
    names |= {f"{ENV_PREFIX}{field.upper()}" for field in SHORT_NAMES}
    return names | set(OTHER_VARIABLES)


def check_environment(*, also: tuple[str, ...] = ()) -> None:
    """Refuse a `REFLECTRM_` environment variable nothing reads, naming the nearest known one (a start-up check).

    A misspelt setting is otherwise ignored and its default silently used: `REFLECTRM_TOKEN` for
    `REFLECTRM_SERVE_TOKEN` would leave the reward service open, `REFLECTRM_AUTHS` the app without a login.
    `also` adds names a command reads besides (`serve --token-env NAME`)."""
    renamed = sorted(name for name in os.environ if name.upper() in RENAMED_VARIABLES)
    if renamed:
        raise ConfigError(f"environment variable {renamed[0]} was renamed: set {RENAMED_VARIABLES[renamed[0].upper()]} "
                          "instead (same value) and unset it")
    known = known_variables() | {name.upper() for name in also}
    unknown = sorted(name for name in os.environ if name.upper().startswith(ENV_PREFIX) and name.upper() not in known
                     and name not in known)
    if unknown:
        name = unknown[0]
        near = nearest_variable(name, known)
        raise ConfigError(f"environment variable {printable(name[:60])} is not a ReflectRM setting"
                          f"{f' (did you mean {near}?)' if near else ''}: rename it or unset it")


def nearest_variable(name: str, known: set[str]) -> str | None:
    """The known name `name` most likely meant: one holding every word of it (TOKEN -> SERVE_TOKEN), else the
    closest spelling (AUTHS -> AUTH); None when nothing is close."""
    import difflib

    words = set(name.upper().removeprefix(ENV_PREFIX).split("_")) - {""}
    holding = sorted(k for k in known if words <= set(k.removeprefix(ENV_PREFIX).split("_")))
    close = difflib.get_close_matches(name.upper(), holding or sorted(known), n=1, cutoff=0.0 if holding else 0.6)
    return close[0] if close else None


def parse_list(value: str) -> tuple[str, ...]:
    """ "a, b," -> ("a", "b"): a comma-separated setting's entries."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


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


__all__ = ("OTHER_VARIABLES", "RENAMED_VARIABLES", "SECTIONS", "SHORT_NAMES", "AppSettings", "ServeSettings",
           "Settings", "check_environment", "known_variables", "load_settings", "parse_auth", "parse_list",
           "parse_proxies")
