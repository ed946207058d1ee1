"""Dependencies point inward: the core is pure, the library never imports the store or the app.

Inside the library the modules form declared layers (`LAYERS`, lowest first): a module imports only
its own layer and those below, and no chain of imports, lazy ones inside functions included, leads
back to where it started.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "vllm", "gradio", "sqlalchemy", "trl", "pandas", "numpy", "datasets", "peft")


LAYERS: tuple[tuple[str, ...], ...] = (
    ("reflectrm.errors",),
    ("reflectrm.core",),  # pure: prompts, parsing, Eq. 5-9
    ("reflectrm.agreement",),  # reviewers' agreement: kappas, alpha, bootstrap intervals (numpy; nothing else of ours)
    # the files users name: bounded reads (no FIFO, no unbounded line), the labelled-file reader, judgment files a
    # rerun resumes, one writer per output (a lock); text from data made safe for a terminal or a Markdown report
    ("reflectrm.files", "reflectrm.display"),
    ("reflectrm.defaults",),  # the default model's path and its CPU thread count, nothing else
    ("reflectrm.backends",),
    ("reflectrm.pipeline",),  # core meets a backend
    ("reflectrm.training",),  # data recipe, rewards convention, GRPO, run folders
    ("reflectrm.demo",),  # a task domain, a reward plugin and a build tool over training, never under it
    ("reflectrm.eval",),  # benchmarks, metrics and the evaluation runner (the demo domain is one benchmark)
    ("reflectrm.render", "reflectrm.audit"),  # a judgment's anatomy and audit figures, with eval's intervals
    ("reflectrm.serving",),  # the judge as a reward: pairwise group rewards, the HTTP service and its clients
    ("reflectrm.flags",),  # command-line flags derived from the config classes (the commands are the app's)
)
"""The library's layers, lowest first. A new module belongs to the longest declared prefix of its name."""

FACADE = "reflectrm"
"""`reflectrm/__init__.py` re-exports the public API: the top layer, matched by its exact name only."""

DB_MAY_IMPORT = ("reflectrm.core", "reflectrm.errors", "reflectrm.training.recipe", "reflectrm.files",
                 "reflectrm.eval.scoring", "reflectrm.display", "reflectrm.agreement")
"""The store reads the library's types, calls its one training-data recipe and its one labelled-file reader, settles a
review round's item by the library's one agreement rule (`reflectrm.agreement`, in the transaction of its last answer),
and
keeps evaluation items (`reflectrm.eval.scoring`'s types), prints through the library's one escaping function and
locks its outputs with its one lock; nothing else (no backend, pipeline or runner). The settings of the model and engine are the app's (`reflectrm_app.settings`), not the store's."""


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
    assert _layer("reflectrm.flags") == len(LAYERS) - 1
    assert _layer("reflectrm.training.runs") == _layer("reflectrm.training") < _layer("reflectrm.flags")
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


# --- the packages: library < store < services < UI ------------------------------------------------------------------

FOLDERS = {"reflectrm": "reflectrm", "db": "reflectrm_db", "app": "reflectrm_app"}
"""Repository folder -> the package it installs as (`setup.py` maps them)."""

PACKAGE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("reflectrm.errors", "reflectrm.core"), ("reflectrm",), ("reflectrm_db",), ("reflectrm_app",),
    ("reflectrm_app.commands", "reflectrm_app.cli"), ("reflectrm_app.ui",))
"""Lowest first: the errors and the pure core, the library, the store, the headless service layer (judging, evaluation,
training, curation, settings), the commands (one module each, over the services; `cli.py` assembles them), the Gradio UI
that draws and calls the services."""

UI = "reflectrm_app.ui"
UI_ONLY = ("gradio",)
"""What only the UI loads: a headless command (`judge`, `eval`, `serve`, `db`, ...) runs without Gradio."""

STARTS_THE_UI = "reflectrm_app.commands.workbench"
"""`reflectrm app`: the one headless module that imports the UI, inside its command function (lazily)."""


def _package_module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[0] = FOLDERS[parts[0]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _product_files() -> dict[str, Path]:
    return {_package_module(p): p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
            if "migrations" not in p.parts}


def _package_layer(module: str) -> int | None:
    best = max(((len(prefix), i) for i, layer in enumerate(PACKAGE_LAYERS) for prefix in layer
                if module == prefix or module.startswith(prefix + ".")), default=None)
    return None if best is None else best[1]


def _module_level_imports(path: Path) -> set[str]:
    """The modules `path` imports when it is imported (not those imported inside functions)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_package_imports_a_higher_layer():
    upward = sorted(
        f"{module} imports {name}"
        for module, path in _product_files().items() for name in _imports(path)
        if (target := _package_layer(name)) is not None and target > _package_layer(module)
        and not (module == STARTS_THE_UI and name.startswith(UI + "."))
    )
    assert upward == []


def test_headless_modules_never_import_the_ui_or_gradio():
    bad = sorted(
        f"{module} imports {name}"
        for module, path in _product_files().items() if not module.startswith(UI)
        for name in _imports(path)
        if name.split(".")[0] in UI_ONLY or (name.startswith(UI) and module != STARTS_THE_UI)
    )
    assert bad == []


def test_only_the_app_command_imports_the_ui_and_only_lazily():
    starts = _product_files()[STARTS_THE_UI]
    assert f"{UI}.blocks" in _imports(starts)  # trap: a check that passes because the module moved
    assert not [n for n in _module_level_imports(starts) if n.startswith(UI)]


def test_the_ui_reads_the_store_only_through_its_record_types():
    # the UI draws and calls services: no session, model, repository or SQL of its own
    bad = sorted(f"{module} imports {name}" for module, path in _product_files().items() if module.startswith(UI)
                 for name in _imports(path)
                 if name.split(".")[0] == "sqlalchemy"
                 or (name.startswith("reflectrm_db") and not name.startswith("reflectrm_db.records")))
    assert bad == []


def test_every_product_module_has_a_package_layer():
    assert [m for m in _product_files() if _package_layer(m) is None] == []


def test_nothing_imports_the_benchmarks():
    bad = sorted(module for module, path in _product_files().items()
                 if any(n.split(".")[0] == "bench" for n in _imports(path)))
    assert bad == []


def test_the_service_layer_has_no_import_cycle():
    files = {m: p for m, p in _product_files().items() if m.startswith("reflectrm_app") and not m.startswith(UI)}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m in _imports(path, package=package) if m in files and m != name}
    assert _cycle(graph) == []


# --- private names stay in their package ----------------------------------------------------------------------------


def _owner(module: str) -> str:
    """The package a module belongs to for the private-name rule: the UI counts apart from the services."""
    return UI if module == UI or module.startswith(UI + ".") else module.split(".")[0]


def _private_imports(path: Path, importer: str) -> list[str]:
    """`from other_package.mod import _name` in `path`: a private name taken across a package boundary."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _owner(node.module) != importer:
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")
                      and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_across_packages():
    # the product's packages and the benchmarks (bench/ is a package of its own); tests may reach inside
    files = {m: p for m, p in _product_files().items()}
    files.update({f"bench.{p.stem}": p for p in (ROOT / "bench").glob("*.py")})
    bad = {f"{module}: {name}" for module, path in files.items() for name in _private_imports(path, _owner(module))}
    assert sorted(bad) == []


@pytest.mark.parametrize("source, importer, want", [
    pytest.param("from reflectrm.pipeline import _Work", "bench", ["reflectrm.pipeline._Work"], id="bench-into-library"),
    pytest.param("from reflectrm_app.cli import _x", UI, ["reflectrm_app.cli._x"], id="ui-into-services"),
    pytest.param("from reflectrm.pipeline import judge, __version__", "bench", [], id="public-and-dunder"),
    pytest.param("from reflectrm.pipeline import _Work", "reflectrm", [], id="inside-its-package"),
    pytest.param("def f():\n    from reflectrm_db.x import _y", "reflectrm_app", ["reflectrm_db.x._y"], id="lazy"),
])
def test_the_private_import_check_finds_each_kind(tmp_path, source, importer, want):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert _private_imports(path, importer) == want


# --- headless commands run without gradio ---------------------------------------------------------------------------

HEADLESS_COMMANDS = [
    # each runs its command function far enough to import what it needs, then stops on bad input or finishes
    pytest.param(["judge", "--input", "{tmp}/missing.jsonl"], id="judge"),
    pytest.param(["import", "{tmp}/missing.jsonl", "--db", "{tmp}/s.db"], id="import"),
    pytest.param(["export", "judgments", "--out", "{tmp}/out.jsonl", "--db", "{tmp}/s.db"], id="export"),
    pytest.param(["db", "upgrade", "--db", "{tmp}/s.db"], id="db-upgrade"),
    pytest.param(["eval", "--benchmark", "file", "--data", "{tmp}/missing.csv", "--db", "{tmp}/s.db"], id="eval"),
    pytest.param(["compare", "1", "2", "--db", "{tmp}/s.db"], id="compare"),
    pytest.param(["serve", "--port", "70000"], id="serve"),
    pytest.param(["train-status", "{tmp}/no-run"], id="train-status"),
]

_REPORT_GRADIO = ("import atexit, json, sys\n"
                  f"atexit.register(lambda: print('LOADED ' + json.dumps([m for m in {UI_ONLY!r} + ('{UI}',) "
                  "if m in sys.modules]), file=sys.stderr))\n")


@pytest.mark.parametrize("argv", HEADLESS_COMMANDS)
def test_a_headless_command_never_loads_gradio(tmp_path, argv):
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = _REPORT_GRADIO + f"from reflectrm_app.cli import main\nsys.exit(main({args!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    loaded = [line for line in done.stderr.splitlines() if line.startswith("LOADED ")]
    assert loaded == ["LOADED []"], done.stderr[-2000:]


def test_the_gradio_probe_sees_the_ui(tmp_path):
    # trap: a probe that never reports gradio would pass every case above
    code = _REPORT_GRADIO + "import reflectrm_app.ui.blocks"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert "gradio" in done.stderr.splitlines()[-1]


# --- the app's rooms: one service per tab over one runtime; UI functions that read as a page -------------------------

ROOMS = "reflectrm_app.services"
RUNTIME = f"{ROOMS}.runtime"
"""What every room shares (store, settings, model, generation lock, exports, data root). The facade
(`reflectrm_app.services.Services`) is the one module that imports every room; no room imports another, with
no exception: evaluation reaches the judge and training the data root through the runtime, not through a room."""


def _room_imports(path: Path, room: str) -> list[str]:
    """The other rooms (and the facade) that `path`, the service module `room`, imports."""
    return sorted(name for name in _imports(path)
                  if (name == ROOMS or name.startswith(ROOMS + ".")) and name.split(".")[:3] != room.split(".")[:3]
                  and not (name == RUNTIME or name.startswith(RUNTIME + ".")))


def test_each_room_imports_only_the_runtime_not_another_room():
    rooms = {m: p for m, p in _product_files().items() if m.startswith(ROOMS + ".") and m != RUNTIME}
    assert {"judging", "audit", "review", "curation", "history", "training", "evaluation"} <= {
        m.rsplit(".", 1)[1] for m in rooms}  # trap: a check that passes because the rooms moved
    assert {m: _room_imports(p, m) for m, p in rooms.items() if _room_imports(p, m)} == {}


@pytest.mark.parametrize("source, want", [
    pytest.param("from reflectrm_app.services.judging import JudgingService", [
        "reflectrm_app.services.judging", "reflectrm_app.services.judging.JudgingService"], id="another-room"),
    pytest.param("from reflectrm_app.services import Services", [
        "reflectrm_app.services", "reflectrm_app.services.Services"], id="the-facade"),
    pytest.param("def f():\n    import reflectrm_app.services.review", ["reflectrm_app.services.review"], id="lazy"),
    pytest.param("from reflectrm_app.services.runtime import Runtime", [], id="the-runtime"),
    pytest.param("from reflectrm_app.services.audit import _flipped_item", [], id="its-own-module"),
    pytest.param("from reflectrm_app.records import AuditResult\nfrom reflectrm_db.services import JudgmentStore", [],
                 id="records-and-store"),
])
def test_the_room_check_finds_each_kind(tmp_path, source, want):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert _room_imports(path, "reflectrm_app.services.audit") == want


UI_FUNCTION_LINES = 80
"""A UI function reads as a page: layout parts and handler groups, each under this many lines (docstring included)."""


def _long_functions(path: Path, *, limit: int = UI_FUNCTION_LINES) -> list[str]:
    return [f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


def test_no_ui_function_is_over_80_lines():
    files = sorted((ROOT / "app" / "ui").rglob("*.py"))
    assert any(p.name == "train.py" for p in files)  # trap: the UI moved and nothing is checked
    assert [f for p in files for f in _long_functions(p)] == []


@pytest.mark.parametrize("lines, nested, want", [
    pytest.param(80, False, [], id="at-the-limit"),
    pytest.param(81, False, ["m.py:f (81 lines)"], id="one-over"),
    # a handler defined inside a builder counts with it: the builder is what reads as one page
    pytest.param(81, True, ["m.py:f (81 lines)"], id="nested-handlers-count-with-their-builder"),
])
def test_the_length_check_counts_each_kind(tmp_path, lines, nested, want):
    body = ["    def g():", "        return 1"] if nested else []
    path = tmp_path / "m.py"
    path.write_text("\n".join(["def f():", *body, *["    x = 1"] * (lines - 1 - len(body))]) + "\n")
    assert _long_functions(path) == want


# --- the architecture page's tree is the code's ---------------------------------------------------------------------

LISTED_WHOLE = ("reflectrm", "app", "app/services")
"""Folders whose every module and package is a line of its own in the page's tree."""
NAMED_IN_PROSE = ("reflectrm/files", "app/commands", "app/ui")
"""Folders whose modules the tree's line for the folder names in its description."""


def _page_tree() -> dict[str, str]:
    """The architecture page's tree: each entry's path (folders end in '/') -> its description, continuations joined."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("```\n", 2)[1]
    entries: dict[str, str] = {}
    stack: list[str] = []
    last = None
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if indent >= 20 and last is not None:  # a continuation of the entry above
            entries[last] += " " + line.strip()
            continue
        names, _, description = line.strip().partition("  ")
        depth = indent // 2
        stack = stack[:depth]
        parent = "".join(stack)
        for name in (n.strip() for n in names.split(",")):
            last = parent + name
            entries[last] = description.strip()
        if names.endswith("/"):
            stack.append(names.strip())
    return entries


def _children(folder: str) -> set[str]:
    """A folder's modules and packages, as the tree writes them ('x.py', 'pkg/')."""
    found = set()
    for p in (ROOT / folder).iterdir():
        if p.suffix == ".py" and p.name != "__init__.py":
            found.add(p.name)
        elif p.is_dir() and (p / "__init__.py").exists():
            found.add(p.name + "/")
    return found


def test_the_architecture_pages_tree_names_what_exists():
    missing = sorted(path for path in _page_tree() if not (ROOT / path.rstrip("/")).exists())
    assert missing == [], "docs/architecture.md names what is not there"


@pytest.mark.parametrize("folder", LISTED_WHOLE)
def test_the_architecture_pages_tree_lists_every_module_of(folder):
    tree = _page_tree()
    listed = {path.removeprefix(folder + "/") for path in tree if path.startswith(folder + "/")}
    assert sorted(_children(folder) - listed) == [], f"docs/architecture.md leaves these out of {folder}/"


@pytest.mark.parametrize("folder", NAMED_IN_PROSE)
def test_the_architecture_pages_tree_names_every_module_of(folder):
    description = _page_tree()[folder + "/"]
    words = set(re.findall(r"[\w]+", description))
    unnamed = sorted(c for c in _children(folder) if c.removesuffix(".py").rstrip("/") not in words)
    assert unnamed == [], f"the line for {folder}/ in docs/architecture.md does not name these"


def test_the_tree_reader_sees_nesting_and_continuations():
    entries = _page_tree()
    assert entries["app/services/runtime.py"].startswith("what every room shares")
    assert "generation lock" in entries["app/services/runtime.py"]  # from its continuation line
    assert {"reflectrm/render.py", "reflectrm/audit.py", "app/commands/", "db/"} <= entries.keys()
