"""Dependencies point inward: the core is pure, the library never imports the store or the app.

Inside the library the modules form declared layers (`LAYERS`, lowest first): a module imports only
its own layer and those below, and no chain of imports, lazy ones inside functions included, leads
back to where it started.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "vllm", "gradio", "sqlalchemy", "trl", "pandas", "numpy", "datasets", "peft")


LAYERS: tuple[tuple[str, ...], ...] = (
    ("reflectrm.errors",),
    ("reflectrm.core",),  # pure: prompts, parsing, Eq. 5-9
    # bounded reading of user-named files (no FIFO, no unbounded line); judgment files a rerun resumes
    ("reflectrm.inputs", "reflectrm.outputs"),
    ("reflectrm.defaults",),  # the default model's path and its CPU thread count, nothing else
    ("reflectrm.backends",),
    ("reflectrm.pipeline",),  # core meets a backend
    ("reflectrm.training",),  # data recipe, rewards convention, GRPO, run folders
    ("reflectrm.demo",),  # a task domain, a reward plugin and a build tool over training, never under it
    ("reflectrm.eval",),  # benchmarks, metrics and the evaluation runner (the demo domain is one benchmark)
    ("reflectrm.render", "reflectrm.audit"),  # a judgment's anatomy and audit figures, with eval's intervals
    ("reflectrm.serving",),  # the judge as a reward: pairwise group rewards, the HTTP service and its clients
    ("reflectrm.cli", "reflectrm.flags", "reflectrm.training.cli"),  # the command-line shells, flags from configs
)
"""The library's layers, lowest first. A new module belongs to the longest declared prefix of its name."""

FACADE = "reflectrm"
"""`reflectrm/__init__.py` re-exports the public API: the top layer, matched by its exact name only."""

DB_MAY_IMPORT = ("reflectrm.core", "reflectrm.errors", "reflectrm.training.recipe", "reflectrm.eval.readers", "reflectrm.eval.labels",
                 "reflectrm.backends.engine", "reflectrm.defaults",
                 "reflectrm.eval.scoring")
"""The store reads the library's types, calls its one training-data recipe and its one labelled-file reader, and
keeps evaluation items (`reflectrm.eval.scoring`'s types), validates engine options with their config type
(`reflectrm.backends.engine.EngineConfig`), and takes the default judge's thread count from `reflectrm.defaults`;
nothing else (no backend, pipeline or runner)."""


def _imports(path: Path, *, package: str = "") -> set[str]:
    """Every module `path` imports (top-level and lazy ones); relative imports resolved against `package`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)  # `from pkg import module`
        elif isinstance(node, ast.ImportFrom) and package:
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
            names.add(f"{base}.{node.module}" if node.module else base)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__" and node.args:
            if isinstance(node.args[0], ast.Constant):
                names.add(str(node.args[0].value))
    return names


def test_library_never_imports_app_or_db():
    offenders = {
        str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] in ("reflectrm_app", "reflectrm_db", "app", "db"))
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
        assert not [n for n in _imports(p) if n.split(".")[0] in ("reflectrm_app", "app")], p


def test_importing_the_library_loads_no_heavy_module():
    code = (
        "import sys, json, reflectrm, reflectrm.core, reflectrm.pipeline, reflectrm.backends;"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == []


# --- layering inside the library --------------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _library_graph() -> dict[str, set[str]]:
    """Module -> the library modules it imports (names that are not modules, like classes, dropped)."""
    paths = {_module_name(p): p for p in (ROOT / "reflectrm").rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m in _imports(path, package=package) if m in paths and m != name}
    return graph


def _layer(module: str) -> int | None:
    if module == FACADE:
        return len(LAYERS) - 1
    best = max(((len(prefix), i) for i, layer in enumerate(LAYERS) for prefix in layer
                if module == prefix or module.startswith(prefix + ".")), default=None)
    return None if best is None else best[1]


def test_every_library_module_has_a_declared_layer():
    undeclared = sorted(m for m in _library_graph() if _layer(m) is None)
    assert undeclared == [], "add these modules' package to LAYERS in tests/test_architecture.py"


def test_no_library_module_imports_a_higher_layer():
    upward = sorted(
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in _library_graph().items() for target in targets
        if _layer(target) is not None and _layer(module) is not None and _layer(target) > _layer(module)
    )
    assert upward == []


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (as a path that returns to its start), or [] when there is none."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return []


def test_the_library_has_no_import_cycle():
    assert _cycle(_library_graph()) == []


@pytest.mark.parametrize("graph, has_cycle", [
    pytest.param({"a": {"b"}, "b": {"c"}, "c": set()}, False, id="chain"),
    pytest.param({"a": {"b", "c"}, "b": {"c"}, "c": set()}, False, id="diamond"),  # trap: a node seen twice
    pytest.param({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True, id="three-cycle"),
    pytest.param({"a": {"b"}, "b": {"b2"}, "b2": {"b"}}, True, id="cycle-below-start"),
])
def test_cycle_finder(graph, has_cycle):
    assert bool(_cycle(graph)) is has_cycle


def test_layer_lookup_takes_the_longest_prefix():
    assert _layer("reflectrm.training.cli") == len(LAYERS) - 1  # not training's layer
    assert _layer("reflectrm.training.grpo") == _layer("reflectrm.training")
    assert _layer("reflectrm.core.parsing") == 1
    assert _layer("reflectrm.corex") is None  # a prefix must end at a dot


def test_db_imports_only_the_library_types_and_recipe():
    bad = {
        str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] == "reflectrm"
                                         and not n.startswith(DB_MAY_IMPORT))
        for p in (ROOT / "db").rglob("*.py")
    }
    assert {k: v for k, v in bad.items() if v} == {}
