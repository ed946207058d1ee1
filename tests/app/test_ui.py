"""The Blocks and the `reflectrm app` command, built in-process (no server)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from reflectrm_app.cli import build_parser
from reflectrm_app.services import Services
from reflectrm_app.ui.blocks import build_app

APP = Path(__file__).resolve().parents[2] / "app"


def test_named_api_endpoints_have_plain_names(services: Services) -> None:
    demo = build_app(services)
    public = {d["api_name"] for d in demo.config["dependencies"] if d.get("api_visibility") == "public"}
    assert public == {"judge", "audit", "correct", "rejudge"}


def test_eight_tabs(services: Services) -> None:
    demo = build_app(services)
    labels = [b.label for b in demo.blocks.values() if type(b).__name__ == "Tab"]
    assert labels == ["Judge", "Audit", "Review queue", "Reviewers", "Curate", "History", "Train", "Evaluate"]


def test_app_command_defaults_and_options(monkeypatch) -> None:
    from reflectrm_app.settings import load_settings

    for name in [n for n in os.environ if n.startswith("REFLECTRM_")]:
        monkeypatch.delenv(name)
    args = build_parser().parse_args(["app"])
    assert (args.host, args.port, args.db, args.model) == (None, None, None, None)  # not given: the settings decide
    settings = load_settings(host=args.host, port=args.port)
    assert (settings.app.host, settings.app.port) == ("127.0.0.1", 7860)  # the defaults --help states
    monkeypatch.setenv("REFLECTRM_PORT", "9999")
    assert load_settings(host=args.host, port=args.port).app.port == 9999  # the environment, when no flag
    args = build_parser().parse_args(["app", "--host", "0.0.0.0", "--port", "8080", "--db", "x.db",
                                      "--model", "/m", "--backend", "transformers"])
    assert (args.host, args.port, args.db, args.model, args.backend) == ("0.0.0.0", 8080, "x.db", "/m", "transformers")
    assert load_settings(host=args.host, port=args.port).app.port == 8080  # a flag wins over the environment


def _module_level_mutables(path: Path) -> list[str]:
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)) or (
                isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("list", "dict", "set", "defaultdict")
            ):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found += [f"{path.name}:{getattr(t, 'id', '?')}" for t in targets]
    return found


def test_no_module_level_mutable_state() -> None:
    # Gradio shares module globals between all users: constants only (tuples, strings, frozen mappings), in every
    # module of the app, a new one included
    modules = sorted(APP.rglob("*.py"))
    assert {"runtime.py", "blocks.py", "judge.py"} <= {p.name for p in modules}
    found = [m for path in modules for m in _module_level_mutables(path)]
    assert found == []


@pytest.mark.parametrize("source, want", [
    pytest.param("X = []", ["m.py:X"], id="list"),
    pytest.param("X: dict = {}", ["m.py:X"], id="annotated-dict"),
    pytest.param("X = defaultdict(list)", ["m.py:X"], id="defaultdict"),
    pytest.param("X = (1, 2)\nY = 'a'\nZ = MappingProxyType({})", [], id="constants"),
])
def test_the_mutable_state_check_finds_each_kind(tmp_path, source, want) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert _module_level_mutables(path) == want


def test_ui_assembles_one_module_per_tab_and_handlers_stay_short() -> None:
    # a tab is a module (app/ui/tabs/<id>.py); the assembly is a list; no builder of hundreds of lines
    from reflectrm_app.ui.blocks import TABS

    assert [t.id for t in TABS] == ["judge", "audit", "review", "reviewers", "curate", "history", "train", "evaluate"]
    assert all((APP / "ui" / "tabs" / f"{t.id}.py").exists() for t in TABS)
    assert len((APP / "ui" / "blocks.py").read_text().splitlines()) < 150


def test_long_actions_show_one_progress_display_on_their_status_line(services: Services) -> None:
    demo = build_app(services)
    elem = {c["id"]: c.get("props", {}).get("elem_id") for c in demo.config["components"]}
    trigger = {d["id"]: elem.get(d["targets"][0][0]) for d in demo.config["dependencies"] if d["targets"]}
    shown_on = {trigger[d["id"]]: [elem[t] for t in d.get("show_progress_on") or []]
                for d in demo.config["dependencies"] if d["targets"]}
    # the overlay used to repeat over every output of the action
    assert shown_on["judge-run"] == ["judge-status"]
    assert shown_on["judge-audit"] == ["judge-status"]
    assert shown_on["audit-run"] == ["audit-status"]
    assert shown_on["eval-run"] == ["eval-status"] and shown_on["eval-resume"] == ["eval-status"]


def test_curate_names_its_empty_choice(services: Services) -> None:
    demo = build_app(services)
    [source] = [c for c in demo.config["components"] if c.get("props", {}).get("elem_id") == "curate-source"]
    # an empty label rendered as a bare tick mark
    assert [list(choice) for choice in source["props"]["choices"]][0] == ["any source", ""]


def test_curates_long_cells_wrap_instead_of_being_cut_off(services: Services) -> None:
    from reflectrm_app.ui.blocks import CSS

    demo = build_app(services)
    [table] = [c for c in demo.config["components"] if c.get("props", {}).get("elem_id") == "curate-table"]
    assert table["props"]["wrap"] is True
    rules = [line for line in CSS.splitlines() if line.startswith("#curate-table")]
    assert rules and not any("nowrap" in line for line in rules)  # the contested text was cut at the cell's edge


def test_a_keyboard_user_snapshots_with_enter_in_the_name_field(services: Services) -> None:
    demo = build_app(services)
    elem = {c["id"]: c.get("props", {}).get("elem_id") for c in demo.config["components"]}
    triggers = {(elem.get(target), event) for d in demo.config["dependencies"] for target, event in d["targets"]}
    # Enter in the name field did nothing: the keyboard user had to Tab on to the button
    assert ("curate-snap-name", "submit") in triggers and ("curate-snapshot", "click") in triggers
    # the export's choices have ids a keyboard script (and a test) can find
    assert {"curate-export-kind", "curate-export-snapshot"} <= set(elem.values())
