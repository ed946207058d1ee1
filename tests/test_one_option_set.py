"""One option set: each setting is defined in one place, and every door it enters by (a flag, an environment
variable, a library call) reads that one definition.

The parsers are walked as `reflectrm` builds them, the settings as the app reads them, the sources as shipped.
Each allow-list below names a reason; a new entry without one, or a stale one, fails."""

from __future__ import annotations

import argparse
import re
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path

import pytest

import reflectrm.backends
from reflectrm.backends import BackendConfig, EngineConfig, load_backend
from reflectrm.core.config import JudgeConfig
from reflectrm.errors import ConfigError
from reflectrm.eval.runner import EvalPlan
from reflectrm_app.commands.options import STORE_DEFAULT, STORE_HELP, StoreOption
from reflectrm.serving.hosts import AccessConfig
from reflectrm.serving.rewards import RewardConfig
from reflectrm.serving.server import ServeConfig
from reflectrm.training.data import DataConfig
from reflectrm.training.grpo import TrainConfig
from reflectrm_app.cli import build_parser, main
from reflectrm_app.commands.serve import SERVE_SKIP, ServerOptions
from reflectrm_app.settings import (RENAMED_VARIABLES, SECTIONS, SHORT_NAMES, ServeSettings, Settings,
                                    known_variables, load_settings)
from reflectrm_db.settings import ENV_PREFIX, StoreSettings, section_fields

ROOT = Path(__file__).resolve().parents[1]


def _commands(parser: argparse.ArgumentParser | None = None, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every sub-command's parser by its name as typed ("db upgrade" included)."""
    out = {}
    for action in (parser or build_parser())._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[f"{prefix}{name}"] = sub
                out.update(_commands(sub, f"{prefix}{name} "))
    return out


COMMANDS = _commands()


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The visible options by option string (help and a renamed flag's hidden refusal left out)."""
    return {o: a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction) for o in a.option_strings}


def _reading(action: argparse.Action) -> tuple:
    return action.help, getattr(action.type, "__name__", action.type), action.choices, type(action).__name__


# --- (a) an option string means one thing, explained one way, in every command --------------------------------

GIVEN_ONLY = {"app"}  # unset flags keep the settings, which are the same classes: the defaults read None there

OWN_MEANING = {  # option -> the commands whose option of that name is a setting of its own, and why
    "--batch-size": ({"train"}, "TrainConfig's prompts per optimizer step, not pairs per generation call"),
    "--both-orders": ({"eval", "serve", "train", "export"}, "eval's default follows the benchmark's protocol; "
                      "serve's rewards cancel position bias by default; train pays a right verdict by how often the other order is right; "
                      "export writes the training rows train --both-orders reads"),
    "--no-both-orders": ({"eval", "serve", "train"}, "as --both-orders"),
    "--data": ({"train", "eval"}, "a training snapshot folder; a benchmark file or folder"),
    "--device": ({"train"}, "TrainConfig's: where training runs"),
    "--host": ({"app", "serve"}, "two servers (the app's settings; the reward service's ServerOptions)"),
    "--port": ({"app", "serve"}, "two servers with their own default ports (7860, 8000)"),
    "--json": ({"judge", "train-status", "compare", "reviewers list", "round progress", "round agreement"},
               "each command's own JSON output"),
    "--format": ({"round export"}, "a round's answers: jsonl or parquet (no hf folder of training rows)"),
    "--source": ({"round open"}, "selects the judgments of a data set, not a name given to imported rows"),
    "--snapshot": ({"round open"}, "the judgments a snapshot's examples came from, not the examples exported"),
    "--model": ({"train"}, "the model to train, not a judge to load"),
    "--out": ({"export", "build-data", "eval", "round export"}, "each command's own output"),
    "--output": ({"judge", "train"}, "each command's own output"),
    "--seed": ({"train"}, "TrainConfig's: data order and initialisation"),
    "--strategy": ({"compare"}, "filters stored runs by a strategy name, no choice of how to judge"),
    "--temperature": ({"train"}, "TrainConfig's: the policy's sampling, not the judge's"),
    "--threads": ({"train"}, "TrainConfig's torch threads while training (one spelling; no 'auto', nothing to time)"),
}


def _shared_options() -> dict[str, dict[str, argparse.Action]]:
    shared: dict[str, dict[str, argparse.Action]] = {}
    for name, parser in COMMANDS.items():
        for option, action in _options(parser).items():
            shared.setdefault(option, {})[name] = action
    return {o: by for o, by in shared.items() if len(by) > 1 and o != "--db"}  # --db: (b)


@pytest.mark.parametrize("option", sorted(_shared_options()))
def test_an_option_in_several_commands_has_one_definition(option):
    by_command = _shared_options()[option]
    own = OWN_MEANING.get(option, (set(), ""))[0]
    common = {name: a for name, a in by_command.items() if name not in own}
    readings = {_reading(a) for a in common.values()}
    assert len(readings) <= 1, (option, {name: _reading(a)[0] for name, a in common.items()})
    defaults = {repr(a.default) for name, a in common.items() if name not in GIVEN_ONLY}
    assert len(defaults) <= 1, (option, defaults)
    assert {name: a.default for name, a in common.items() if name in GIVEN_ONLY} in ({}, {"app": None})


def test_every_allowed_difference_is_still_one():
    # a stale entry would let a later drift pass unseen: each entry must name commands that take the option
    shared = _shared_options()
    for option, (commands, reason) in OWN_MEANING.items():
        assert reason and commands <= set(shared.get(option, {})), option


# --- (b) one store option ------------------------------------------------------------------------------------

STORE_COMMANDS = {"judge", "serve", "app", "eval", "eval-merge", "compare", "import", "export", "db upgrade", "db backup",
                  "reviewers add", "reviewers list", "round open", "round progress", "round agreement",
                  "round adjudicate", "round release", "round export"}
STORE_OPTIONAL = {"judge", "serve"}  # no --db: nothing is stored (a reward service must not fill ./reflectrm.db)


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
def test_every_db_option_is_the_one_store_option(command):
    action = _options(COMMANDS[command])["--db"]
    assert isinstance(action, StoreOption), f"{command}: --db added by hand, not by add_store_flag"
    default = "none: nothing is stored" if command in STORE_OPTIONAL else STORE_DEFAULT
    assert (action.help, action.default, action.metavar) == (f"{STORE_HELP} (default: {default})", None, "URL")


def test_no_other_command_takes_a_store():
    assert {name for name, p in COMMANDS.items() if "--db" in _options(p)} == STORE_COMMANDS


# --- (c) a field is defined in one config class ----------------------------------------------------------------

CONFIGS = (JudgeConfig, BackendConfig, EngineConfig, DataConfig, TrainConfig, RewardConfig, ServeConfig,
           ServerOptions, AccessConfig, EvalPlan, StoreSettings, ServeSettings)

SAME_NAME = {  # field -> the classes that hold a field of that name, and why it is not one setting
    "temperature": ({"JudgeConfig", "TrainConfig"}, "the judge's stage-1 sampling; the policy's during GRPO"),
    "seed": ({"JudgeConfig", "TrainConfig", "RewardConfig"}, "three random streams (serve passes --seed to both)"),
    "device": ({"BackendConfig", "TrainConfig"}, "where the judge runs; where training runs (another process)"),
    "threads": ({"BackendConfig", "TrainConfig"}, "the judge's torch threads; the training worker's, same spelling"),
    "batch_size": ({"TrainConfig", "RewardConfig", "EvalPlan"}, "prompts per step; pairs per call; pairs per batch"),
    "both_orders": ({"RewardConfig", "EvalPlan", "TrainConfig"},
                    "rewards cancel position bias; evaluation follows a benchmark; GRPO pays both orders right"),
    "host": ({"ServerOptions", "ServeSettings"}, "the reward service's and the app's own interfaces"),
    "port": ({"ServerOptions", "ServeSettings"}, "two servers, two default ports"),
    "allowed_hosts": ({"AccessConfig", "ServeSettings"}, "the environment's comma-separated text, read by AccessConfig"),
    "allowed_origins": ({"AccessConfig", "ServeSettings"}, "as allowed_hosts"),
}


def _field_names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)} if is_dataclass(cls) else set(cls.model_fields)


def test_a_field_name_in_two_config_classes_is_on_the_list_with_its_reason():
    holders: dict[str, set[str]] = {}
    for cls in CONFIGS:
        for name in _field_names(cls):
            holders.setdefault(name, set()).add(cls.__name__)
    shared = {name: classes for name, classes in holders.items() if len(classes) > 1}
    assert shared == {name: classes for name, (classes, _) in SAME_NAME.items()}


@pytest.mark.parametrize(("section", "cls"), [
    pytest.param("judge", JudgeConfig, id="judge"),
    pytest.param("generation", BackendConfig, id="generation"),  # used to restate model, backend, device, threads
    pytest.param("engine", EngineConfig, id="engine"),  # used to be an untyped dict beside them
    pytest.param("store", StoreSettings, id="store"),
])
def test_the_app_settings_sections_are_the_library_classes_themselves(no_reflectrm_environment, section, cls):
    assert SECTIONS[section] is cls
    assert getattr(Settings(), section) == cls()  # the class's defaults, stated once


def test_data_config_holds_the_judge_instead_of_copying_its_fields():
    assert _field_names(DataConfig) & _field_names(JudgeConfig) == set()
    assert DataConfig().judge == JudgeConfig()  # the rollouts' defaults are the judge's (paper: N = 8 at T = 1.0)


# --- (d) one environment variable per setting -----------------------------------------------------------------


def test_each_short_variable_sets_one_field_of_one_section():
    per_section = [name for kind in SECTIONS.values() for name in section_fields(kind)]
    assert len(per_section) == len(set(per_section)) == len(SHORT_NAMES)
    for name, section in SHORT_NAMES.items():
        assert name in section_fields(SECTIONS[section])


def test_each_variable_read_is_a_section_a_field_or_named_elsewhere():
    sections = {f"{ENV_PREFIX}{s.upper()}" for s in SECTIONS}
    fields_ = {f"{ENV_PREFIX}{n.upper()}" for n in SHORT_NAMES} | {
        f"{ENV_PREFIX}{s.upper()}__{n.upper()}" for n, s in SHORT_NAMES.items()}
    from reflectrm_app.settings import OTHER_VARIABLES

    assert known_variables() == sections | fields_ | set(OTHER_VARIABLES)
    assert not sections & fields_  # REFLECTRM_ENGINE is the engine section (JSON), no field of another


def test_renamed_variables_name_a_variable_that_is_read_and_are_not_read_themselves():
    known = known_variables()
    assert set(RENAMED_VARIABLES.values()) <= known
    assert not set(RENAMED_VARIABLES) & known


@pytest.mark.parametrize("command", ["app", "serve"])
@pytest.mark.parametrize(("old", "new"), [pytest.param(o, n, id=o) for o, n in RENAMED_VARIABLES.items()])
def test_a_renamed_variable_is_refused_at_start_up_naming_the_new_one(monkeypatch, capsys, no_reflectrm_environment,
                                                                      command, old, new):
    # the trap: the old name silently ignored, so the setting someone relied on stops applying
    from reflectrm_app.services import Services

    def reached(*_: object, **__: object) -> None:
        raise AssertionError("started despite a renamed variable")

    monkeypatch.setattr(Services, "start", reached)
    monkeypatch.setattr(reflectrm.backends, "load_backend", reached)
    monkeypatch.setenv(old, "1")
    code = main([command, "--port", "0"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert f"{old} was renamed: set {new} instead" in lines[0]


@pytest.mark.parametrize(("env", "want"), [
    pytest.param({"REFLECTRM_THREADS": "1"}, 1, id="short"),
    pytest.param({"REFLECTRM_GENERATION__THREADS": "1"}, 1, id="nested"),
    pytest.param({"REFLECTRM_THREADS": "auto"}, "auto", id="auto"),  # as --threads auto
    pytest.param({}, None, id="unset"),
])
def test_the_threads_variable_reaches_backend_config(monkeypatch, no_reflectrm_environment, env, want):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert load_settings().generation == BackendConfig(threads=want)


# Each: the environment, the variable the one line must name. The trap: a section that is a library dataclass
# checks itself in __post_init__, whose error names no field, so the line named no variable to fix.
SECTION_REFUSALS = [
    pytest.param({"REFLECTRM_DEVICE": "gpu"}, "REFLECTRM_DEVICE", id="device"),
    pytest.param({"REFLECTRM_THREADS": "0", "REFLECTRM_DEVICE": "cpu"}, "REFLECTRM_THREADS", id="threads-beside-another"),
    pytest.param({"REFLECTRM_BACKEND": "tensorrt"}, "REFLECTRM_BACKEND", id="backend"),
    pytest.param({"REFLECTRM_ENGINE__TENSOR_PARALLEL_SIZE": "0"}, "REFLECTRM_TENSOR_PARALLEL_SIZE", id="engine-field"),
    pytest.param({"REFLECTRM_N": "100", "REFLECTRM_SEED": "1"}, "REFLECTRM_N)", id="judge-field"),
]


@pytest.mark.parametrize(("env", "variable"), SECTION_REFUSALS)
def test_a_bad_setting_of_a_library_section_names_its_variable(monkeypatch, no_reflectrm_environment, env, variable):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert variable in str(refused.value) and len(str(refused.value).splitlines()) == 1


# --- (e) one spelling for CPU threads ---------------------------------------------------------------------------

OLD_SPELLING = re.compile(r"cpu[_-]threads", re.IGNORECASE)
OLD_SPELLING_KEPT = {  # file -> occurrences that exist to refuse or read the old name, not to use it
    "app/settings.py": 3,  # RENAMED_VARIABLES (2) and the docstring that says so
    "reflectrm/training/grpo.py": 3,  # TrainConfig.from_dict reads a run recorded under the old field name
    "app/commands/train.py": 1,  # `train --cpu-threads` refused, naming --threads
    "docs/app.md": 1,  # tells a user the old variable is refused, and its new name
}


def test_cpu_threads_is_spelled_threads_everywhere():
    found = {}
    for path in [ROOT / "README.md", *(p for d in ("reflectrm", "app", "db", "docs") for p in (ROOT / d).rglob("*")
                                      if p.suffix in (".py", ".md"))]:
        count = len(OLD_SPELLING.findall(path.read_text(encoding="utf-8")))
        if count:
            found[str(path.relative_to(ROOT))] = count
    assert found == OLD_SPELLING_KEPT


def test_every_command_that_loads_a_judge_spells_threads_one_way():
    assert {name for name, p in COMMANDS.items() if "--threads" in _options(p)} == {
        "judge", "eval", "serve", "build-data", "app", "train"}


# --- serve: flags derived from its config classes, checks in the classes ---------------------------------------


@pytest.mark.parametrize("cls", [ServerOptions, RewardConfig, ServeConfig])
def test_serve_takes_a_flag_per_field_with_the_class_default(cls):
    options = {a.dest: a for a in COMMANDS["serve"]._actions if a.option_strings}
    skipped = {ServeConfig: set(SERVE_SKIP), RewardConfig: {"seed", "batch_size"}}.get(cls, set())
    for f in fields(cls):
        if f.name in skipped:
            continue
        default = options[f.name].default
        want = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        assert default == want, (cls.__name__, f.name)


# Each: the flags, the flag the one line must name. The trap: a check kept in the command drifts from the class
# (a library user building ServeConfig(max_queue=-1) used to get no error at all).
SERVE_REFUSALS = [
    pytest.param(["--port", "70000"], "--port 70000 is not a port", id="port-high"),
    pytest.param(["--port", "-1"], "--port -1 is not a port", id="port-negative"),
    pytest.param(["--max-queue", "-1"], "--max-queue -1", id="queue-negative"),
    pytest.param(["--max-judgments", "0"], "--max-judgments 0", id="no-judgments"),
    pytest.param(["--batch-window-ms", "20000"], "--batch-window-ms 20000", id="window-long"),
    pytest.param(["--batch-window-ms", "nan"], "--batch-window-ms nan", id="window-nan"),
    pytest.param(["--drain-timeout-s", "-5"], "--drain-timeout-s -5", id="drain-negative"),
    pytest.param(["--opponents", "0"], "--opponents 0", id="no-opponents"),
]


@pytest.mark.parametrize(("argv", "fragment"), SERVE_REFUSALS)
def test_serve_refuses_a_bad_limit_in_one_line_before_the_model_loads(monkeypatch, capsys, no_reflectrm_environment,
                                                                     argv, fragment):
    def reached(*_: object, **__: object) -> None:
        raise AssertionError("the model loaded despite a bad flag")

    monkeypatch.setattr(reflectrm.backends, "load_backend", reached)
    code = main(["serve", *argv])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(("make", "fragment"), [
    pytest.param(lambda: ServeConfig(max_queue=-1), "--max-queue -1", id="queue"),
    pytest.param(lambda: ServeConfig(batch_window_s=11.0), "--batch-window-ms 11000", id="window"),
    pytest.param(lambda: ServerOptions(port=65536), "--port 65536", id="port"),
])
def test_the_library_classes_check_what_the_command_used_to(make, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        make()


# --- load_backend takes config objects -------------------------------------------------------------------------

# The trap in each: a keyword that restates a config field, silently taking another path than the config says.
LOAD_REFUSALS = [
    pytest.param(lambda: load_backend(device="cpu"), "restates a BackendConfig field", id="device-keyword"),
    pytest.param(lambda: load_backend(None, backend="vllm"), "restates a BackendConfig field", id="backend-keyword"),
    pytest.param(lambda: load_backend(BackendConfig(), EngineConfig()), "sets the vllm and openai backends",
                 id="engine-for-transformers"),
    pytest.param(lambda: load_backend(BackendConfig(backend="openai"), base_urls=("http://h/v1",)),
                 "pass an EngineConfig", id="engine-option-as-keyword"),
]


@pytest.mark.parametrize(("call", "fragment"), LOAD_REFUSALS)
def test_load_backend_refuses_options_outside_its_configs(call, fragment):
    with pytest.raises(ConfigError, match=fragment):
        call()


@pytest.mark.parametrize("name", ["host", "port", "runs_dir", "data_root"])
def test_the_apps_server_flags_read_their_help_and_default_from_its_settings(name):
    from reflectrm_app.settings import ServeSettings

    from reflectrm.flags import field_help

    action = _options(COMMANDS["app"])[f"--{name.replace('_', '-')}"]
    field = ServeSettings.model_fields[name]
    assert action.help.startswith(field_help(ServeSettings)[name] + "; default: $REFLECTRM_" + name.upper())
    assert action.default is None  # unset, the environment's setting (or the class's default) stays
    assert (field.default is None) or action.help.endswith(f", else {field.default}")
