"""research/ holds experiments beside the package: documented, never installed, never imported by the product."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.research

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "research").glob("*.py"))


def test_the_readme_says_what_each_script_is_and_how_to_run_it():
    readme = (ROOT / "research" / "README.md").read_text(encoding="utf-8")
    assert SCRIPTS
    for script in SCRIPTS:
        assert f"`{script.name}`" in readme and f"python research/{script.name}" in readme, script.name


@pytest.fixture
def installed_packages(monkeypatch) -> list[str]:
    """setup.py's package list, without running setup()."""
    namespace: dict = {}
    monkeypatch.chdir(ROOT)
    exec(compile((ROOT / "setup.py").read_text(encoding="utf-8").split("\nsetup(")[0], "setup.py", "exec"), namespace)
    return namespace["packages"]()


def test_research_is_not_installed_and_nothing_shipped_imports_it(installed_packages):
    assert "reflectrm" in installed_packages and not [p for p in installed_packages if p.split(".")[0] == "research"]
    importers = []
    for folder in ("reflectrm", "app", "db", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n.split(".")[0] == "research" for n in names):
                    importers.append(str(path.relative_to(ROOT)))
    assert importers == []
