"""Store settings: one `Settings` class, environment prefix `REFLECTRM_`, validated at start-up."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reflectrm.errors import ConfigError

DEFAULT_DATABASE_URL = "sqlite:///reflectrm.db"
"""A SQLite file `reflectrm.db` in the working directory."""

SUPPORTED_SCHEMES = ("sqlite", "postgresql")


class Settings(BaseSettings):
    """Where the store lives and how it waits for a busy database.

    Every field can be set from the environment: `REFLECTRM_DATABASE_URL=postgresql+psycopg://...`.
    """

    model_config = SettingsConfigDict(env_prefix="REFLECTRM_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL  # SQLAlchemy URL, or a plain path to a SQLite file
    sqlite_busy_timeout_s: float = Field(30.0, gt=0)  # how long SQLite waits on a lock before it answers "busy"
    sqlite_synchronous: str = (
        "NORMAL"  # WAL + NORMAL: a process crash loses nothing committed; power loss may lose the last commits
    )
    lock_retry_s: float = Field(60.0, ge=0)  # a transaction that still meets "database is locked" is retried this long

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
    return f"{scheme}://{rest}"
