"""db/README.md keeps up with the code: every table, public service, setting and export kind is named."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from reflectrm_db.formats import EXPORT_KINDS, IMPORT_FIELDS
from reflectrm_db.models import Base
from reflectrm_db.services import JudgmentStore
from reflectrm_db.settings import StoreSettings

README = (Path(__file__).resolve().parents[2] / "db" / "README.md").read_text(encoding="utf-8")
SERVICES = [n for n, f in inspect.getmembers(JudgmentStore) if callable(f) and not n.startswith("_")]


@pytest.mark.parametrize("table", sorted(Base.metadata.tables))
def test_every_table_is_described(table: str) -> None:
    assert f"| `{table}` |" in README


@pytest.mark.parametrize("method", SERVICES)
def test_every_service_is_listed(method: str) -> None:
    assert f"`{method}(" in README or f"/ `{method}(" in README


@pytest.mark.parametrize("setting", sorted(StoreSettings.model_fields))
def test_every_setting_is_documented(setting: str) -> None:
    assert f"`REFLECTRM_{setting.upper()}`" in README


@pytest.mark.parametrize("kind", EXPORT_KINDS)
def test_every_export_kind_is_named(kind: str) -> None:
    assert f"`{kind}`" in README


def test_the_import_fields_are_listed() -> None:
    assert f"`{', '.join(IMPORT_FIELDS)}`" in README
