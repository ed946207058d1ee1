"""Dependencies point inward: the core is pure, the library never imports the store or the app."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "vllm", "gradio", "sqlalchemy", "trl", "pandas", "numpy", "datasets", "peft")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__" and node.args:
            if isinstance(node.args[0], ast.Constant):
                names.add(str(node.args[0].value))
    return names


def test_library_never_imports_app_or_db():
    offenders = {
        str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] in ("app", "db"))
        for p in (ROOT / "reflectrm").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_core_imports_only_stdlib_and_itself():
    allowed_prefixes = ("reflectrm.core", "reflectrm.errors", "__future__")
    bad = {}
    for p in (ROOT / "reflectrm" / "core").rglob("*.py"):
        for name in _imports(p):
            top = name.split(".")[0]
            if name.startswith(allowed_prefixes) or top in sys.stdlib_module_names:
                continue
            bad.setdefault(p.name, []).append(name)
    assert bad == {}


def test_db_imports_no_app():
    for p in (ROOT / "db").rglob("*.py"):
        assert not [n for n in _imports(p) if n.split(".")[0] == "app"], p


def test_importing_the_library_loads_no_heavy_module():
    code = (
        "import sys, json, reflectrm, reflectrm.core, reflectrm.pipeline, reflectrm.backends;"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == []
