"""The store's settings, and how ReflectRM reads settings in sections from the environment.

    section      what                                              example
    store        where the store lives, how it waits on locks      REFLECTRM_STORE__DATABASE_URL=postgresql://h/db

Every field of a section has a nested name (`REFLECTRM_<SECTION>__<FIELD>`) and, because field names are
unique across sections, a short one (`REFLECTRM_<FIELD>`: `REFLECTRM_DATABASE_URL`, ...); the nested name
wins when both are set, and a section may be given whole as JSON (`REFLECTRM_STORE='{...}'`). Keyword
arguments take the same short names (`load_store_settings(database_url="x.db")`) and win over the environment.

`SectionedSettings` is that reading, for any set of sections: the store reads its own section with it
(`load_store_settings`: what `reflectrm db`, `import` and `export` need), and the app composes its sections
(store, judge, generation, app) from it in `reflectrm_app.settings`. It lives with the store, the lowest
layer that has pydantic-settings (`pip install 'reflectrm[store]'`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from reflectrm.errors import ConfigError

ENV_PREFIX = "REFLECTRM_"
DEFAULT_DATABASE_URL = "sqlite:///reflectrm.db"
"""A SQLite file `reflectrm.db` in the working directory."""

SUPPORTED_SCHEMES = ("sqlite", "postgresql")
SQLITE_MODES = ("ro", "rw", "rwc")
SQLITE_URL_HELP = "SQLite URLs take ?timeout=SECONDS and ?mode=ro|rw|rwc"


@dataclass(frozen=True, slots=True)
class SqliteOptions:
    """The query parameters a SQLite URL may carry (`sqlite:///store.db?timeout=5&mode=ro`), validated."""

    timeout_s: float | None = None  # ?timeout=: seconds to wait on a lock; overrides sqlite_busy_timeout_s
    mode: str = "rwc"  # ?mode=: ro opens read-only (a command that writes is refused), rw never creates the file


def sqlite_options(url: str) -> SqliteOptions:
    """The validated query parameters of a SQLite URL (the defaults for any other URL).

    Raises:
        ConfigError: a parameter the store does not support, or a value it cannot use; the message names it.
    """
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return SqliteOptions()
    if (parsed.database or "").startswith("file:") or "uri" in parsed.query:
        raise ConfigError("SQLite URI filenames (file:...?uri=true) are not supported: write sqlite:///PATH and "
                          f"add the options the store supports ({SQLITE_URL_HELP})")
    for key, value in parsed.query.items():
        if key not in ("timeout", "mode"):
            raise ConfigError(f"the database URL parameter {key!r} is not supported: remove it ({SQLITE_URL_HELP})")
        if not isinstance(value, str):
            raise ConfigError(f"the database URL parameter {key!r} is given {len(value)} times: give it once")
    timeout = parsed.query.get("timeout")
    mode = parsed.query.get("mode", "rwc")
    if mode not in SQLITE_MODES:
        raise ConfigError(f"the database URL parameter mode={str(mode)[:40]!r} is not supported: use mode=ro "
                          "(read-only), mode=rw (never create the file) or mode=rwc (the default)")
    return SqliteOptions(timeout_s=None if timeout is None else _timeout_s(str(timeout)), mode=str(mode))


def _timeout_s(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds <= 86400):  # NaN and inf fail too
        raise ConfigError(f"the database URL parameter timeout={value[:40]!r} is not a number of seconds between 0 "
                          "and 86400: write e.g. ?timeout=30")
    return seconds


def without_query(url: str) -> str:
    """`url` without its query string (the store applies a SQLite URL's options itself)."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(query={}).render_as_string(hide_password=False)


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


def section_fields(kind: Any) -> list[str]:
    """The field names of a section's type (a pydantic model or a dataclass)."""
    return [f.name for f in fields(kind)] if is_dataclass(kind) else list(kind.model_fields)


class SectionedSettings(BaseSettings):
    """Settings in sections, read from the environment: a subclass declares each section as a field.

    Every field of every section is read by its nested name, its short name, or its section's JSON (see the
    module); `load` validates and turns any problem into one `ConfigError` line naming the variable."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore", frozen=True)

    tied: ClassVar[Mapping[str, str]] = MappingProxyType({})
    """A short name that also sets a second field of its section, unless that one is given."""

    @classmethod
    def sections(cls) -> dict[str, Any]:
        """Section name -> its type."""
        return {name: f.annotation for name, f in cls.model_fields.items()}

    @classmethod
    def short_names(cls) -> dict[str, str]:
        """Each field's short name -> its section (field names are unique across sections; a test keeps them so)."""
        return {name: section for section, kind in cls.sections().items() for name in section_fields(kind)}

    @model_validator(mode="before")
    @classmethod
    def _route_short_names(cls, data: Any) -> Any:
        """Keyword arguments by short name (`port=8080`) go to their section, over what the environment gave."""
        return _routed(data, cls.short_names(), cls.tied) if isinstance(data, dict) else data

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Earlier sources win: keyword arguments, then nested names, then short names.
        return init_settings, env_settings, _ShortEnvSource(settings_cls), dotenv_settings, file_secret_settings

    @classmethod
    def load(cls, **overrides: Any) -> Self:
        """Settings from the environment, with `overrides` by short name (None values ignored) on top; validated.

        Raises:
            ConfigError: a setting is invalid; the message names it, its environment variable and the problem.
        """
        try:
            return cls(**{k: v for k, v in overrides.items() if v is not None})
        except SettingsError as exc:  # a section given as JSON that does not parse (REFLECTRM_STORE='{bad')
            raise ConfigError(_settings_error_line(exc, cls.sections())) from exc
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = [str(part) for part in first["loc"]]
            given = first.get("input")
            if len(loc) == 1 and loc[0] in cls.sections() and isinstance(given, dict):
                # a section's own check (a dataclass's __post_init__) names no field: the one given that fails alone
                failing = [name for name, value in given.items() if _fails_alone(cls.sections()[loc[0]], name, value)]
                loc += failing[:1] if len(failing) == 1 else []
            message = first["msg"].removeprefix("Value error, ")
            raise ConfigError(f"setting {'.'.join(loc) or 'settings'}{_env_names(loc)}: {message}") from exc


def _fails_alone(kind: Any, name: str, value: Any) -> bool:
    """Whether the section type `kind` refuses `name=value` with every other field at its default."""
    from pydantic import TypeAdapter

    try:
        TypeAdapter(kind).validate_python({name: value})
    except (ValidationError, ValueError, TypeError):
        return True
    return False


class _ShortEnvSource(PydanticBaseSettingsSource):
    """`REFLECTRM_<FIELD>` for every field of every section, returned nested by section."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # unused: __call__ does it all
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        env = {k.upper(): v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)}
        short = self.settings_cls.short_names()  # type: ignore[attr-defined]
        names = {name: f"{ENV_PREFIX}{name.upper()}" for name in short}
        return _routed({name: env[var] for name, var in names.items() if var in env}, short,
                       self.settings_cls.tied)  # type: ignore[attr-defined]


def _routed(data: dict[str, Any], short: Mapping[str, str], tied: Mapping[str, str]) -> dict[str, Any]:
    """`data` with its short names moved into their sections (a short name overrides the section's value)."""
    out = {k: v for k, v in data.items() if k not in short}
    for section, value in out.items():  # as dicts (copies), so that short names can be laid over them
        if is_dataclass(value) or isinstance(value, (BaseModel, dict)):
            out[section] = (asdict(value) if is_dataclass(value)
                            else value.model_dump() if isinstance(value, BaseModel) else dict(value))
    for name, value in data.items():
        if name in short and value is not None:
            section = out.setdefault(short[name], {})
            section[name] = value
            if name in tied and tied[name] not in data:
                section[tied[name]] = value
    return out


def _settings_error_line(exc: SettingsError, sections: Mapping[str, Any]) -> str:
    """ "REFLECTRM_STORE is not a JSON object ..." for pydantic-settings' 'error parsing value for field "store"'."""
    text = str(exc)
    section = next((name for name in sections if f'"{name}"' in text), None)
    if section is None:
        return f"a REFLECTRM_ setting could not be read ({' '.join(text.split())}): fix it or unset it"
    return (f"{ENV_PREFIX}{section.upper()} is not valid JSON: give a JSON object (e.g. "
            f"{ENV_PREFIX}{section.upper()}='{{\"{section_fields(sections[section])[0]}\": ...}}') or set single "
            f"fields as {ENV_PREFIX}{section.upper()}__FIELD")


def _env_names(loc: list[str]) -> str:
    """ " (REFLECTRM_APP__PORT or REFLECTRM_PORT)" for a section's field; "" otherwise."""
    if len(loc) != 2:
        return ""
    return f" ({ENV_PREFIX}{loc[0].upper()}__{loc[1].upper()} or {ENV_PREFIX}{loc[1].upper()})"


class StoreEnvironment(SectionedSettings):
    """The store's section alone, as the store's own commands read it (no other section is read or checked)."""

    store: StoreSettings = StoreSettings()


def load_store_settings(**overrides: Any) -> StoreSettings:
    """The store's settings from the environment (`REFLECTRM_DATABASE_URL`, ...), `overrides` by field name on top.

    Raises:
        ConfigError: a store setting is invalid; the message names it and its environment variables.
    """
    return StoreEnvironment.load(**overrides).store


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
    sqlite_options(normal)
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
