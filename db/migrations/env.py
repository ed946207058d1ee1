"""Alembic environment: run by `reflectrm_db.schema` (no alembic.ini: the config is built in code).

`config.attributes["connection"]` is the connection to migrate; the offline mode is not supported.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy.types import TypeDecorator

from reflectrm_db.models import Base

config = context.config


def render_item(kind: str, obj: Any, autogen_context: Any) -> str | bool:
    """Render the store's Python-side column types as their database type, so a migration never
    imports `reflectrm_db.types` (its behaviour may change; a migration must not)."""
    if kind == "type" and isinstance(obj, TypeDecorator):
        return f"sa.{obj.impl!r}"
    return False


def run_migrations_online() -> None:
    connection = config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things: batch mode copies the table
        compare_type=True,
        render_item=render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported: run `reflectrm db upgrade --db URL`")
run_migrations_online()
