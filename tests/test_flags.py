"""The CLIs' config flags are derived from the config dataclasses: one flag per field, the dataclass's default."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from reflectrm_app.commands import judge, options
from reflectrm.core.config import JudgeConfig
from reflectrm.flags import field_help
from reflectrm_app.commands import train as train_cli
from reflectrm.training.data import DataConfig
from reflectrm.training.grpo import TrainConfig

REQUIRED_TRAIN = ["--data", "d", "--output", "o"]


def _parser(register) -> argparse.ArgumentParser:  # noqa: ANN001
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser


def judge_config(*argv: str) -> JudgeConfig:
    return options.config_from_args(_parser(judge.register).parse_args(["judge", *argv]))


def data_config(*argv: str) -> DataConfig:
    return train_cli.data_config_from_args(_parser(train_cli.register).parse_args(["build-data", *argv]))


def train_config(*argv: str) -> TrainConfig:
    return train_cli.config_from_args(_parser(train_cli.register).parse_args(["train", *REQUIRED_TRAIN, *argv]))


# One non-default value per field, as typed on the command line. A new field without a row fails the test below:
# add its row (the flag itself needs no code).
JUDGE_VALUES = {
    "strategy": ("majority", "majority"), "n": ("5", 5), "temperature": ("0.7", 0.7), "top_k": ("20", 20),
    "top_p": ("0.9", 0.9), "max_new_tokens": ("64", 64), "bottom_frac": ("0.2", 0.2),
    "reflection_temperature": ("0.5", 0.5), "reflection_max_new_tokens": ("32", 32),
    "critique_includes_verdict": (None, True), "skip_unanimous": (None, True), "matched_compute_n": ("9", 9),
    "seed": ("3", 3), "control_suffix": ("", ""),
}
TRAIN_VALUES = {
    "learning_rate": ("2e-6", 2e-6), "batch_size": ("16", 16), "num_generations": ("4", 4),
    "temperature": ("0.8", 0.8), "epochs": ("1.5", 1.5), "max_steps": ("10", 10), "max_time_s": ("90", 90.0),
    "max_completion_length": ("256", 256), "per_device_batch_size": ("4", 4), "beta": ("0.04", 0.04),
    "loss_type": ("grpo", "grpo"), "scale_rewards": ("batch", "batch"),
    "reward_weights": ("accuracy=1,format=0.5", {"accuracy": 1.0, "format": 0.5}),
    "lr_scheduler": ("cosine", "cosine"), "warmup_steps": ("0.1", 0.1), "weight_decay": ("0.01", 0.01),
    "max_grad_norm": ("0.5", 0.5), "lora": (None, True), "lora_r": ("8", 8), "lora_alpha": ("16", 16),
    "lora_dropout": ("0.1", 0.1), "lora_target_modules": ("q_proj,v_proj", ("q_proj", "v_proj")),
    "use_vllm": (None, True), "vllm_mode": ("server", "server"), "vllm_gpu_memory_utilization": ("0.5", 0.5),
    "vllm_server_url": ("http://h:8000", "http://h:8000"), "device": ("cpu", "cpu"), "bf16": (None, True),
    "threads": ("2", 2), "gradient_checkpointing": ("no", False), "save_steps": ("5", 5),
    "save_total_limit": ("none", None), "logging_steps": ("2", 2), "completions_to_record": ("0", 0),
    "seed": ("7", 7), "min_analysis_chars": ("0", 0), "both_orders": (None, True),
}
DATA_VALUES = {  # build-data exposed 5 of these fields before they were derived (issue 30)
    "mix": ("1:0", (1, 0)), "keep_all_wrong": ("no", False), "subsample": ("either", "either"),
    "extra_in_mix": (None, True), "unparseable_is_incorrect": (None, True),
}
ROLLOUT_VALUES = {k: v for k, v in JUDGE_VALUES.items() if k not in train_cli.ROLLOUT_SKIP}  # DataConfig.judge


def rollout_config(*argv: str) -> JudgeConfig:
    return data_config(*argv).judge


CASES = [(JudgeConfig, judge_config, JUDGE_VALUES), (TrainConfig, train_config, TRAIN_VALUES),
         (DataConfig, data_config, DATA_VALUES), (JudgeConfig, rollout_config, ROLLOUT_VALUES)]
IDS = ["judge", "train", "data", "rollout"]
WITHOUT_FLAG = {"data": {"judge"}, "rollout": set(train_cli.ROLLOUT_SKIP)}  # fields set another way (or not at all)


@pytest.mark.parametrize("cls, build, values", CASES, ids=IDS)
def test_no_flags_give_the_dataclass_defaults(cls, build, values):
    assert build() == cls()


@pytest.mark.parametrize("cls, build, values, case", [(*c, i) for c, i in zip(CASES, IDS)], ids=IDS)
def test_every_field_has_a_row_here(cls, build, values, case):
    assert sorted(values) == sorted(f.name for f in fields(cls) if f.name not in WITHOUT_FLAG.get(case, ()))


def _argv(name: str, text: str | None, want: object) -> list[str]:
    flag = f"--{name.replace('_', '-')}"
    if text is None:  # a boolean: --x sets True
        return [flag]
    if text == "no":
        return [f"--no-{name.replace('_', '-')}"]
    return [f"{flag}={text}"]


@pytest.mark.parametrize(
    "cls, build, name, text, want",
    [pytest.param(cls, build, name, text, want, id=f"{case}.{name}")
     for (cls, build, values), case in zip(CASES, IDS) for name, (text, want) in values.items()],
)
def test_each_field_has_a_flag_that_sets_it_and_only_it(cls, build, name, text, want):
    config = build(*_argv(name, text, want))
    assert getattr(config, name) == want
    changed = {f.name for f in fields(cls) if getattr(config, f.name) != getattr(cls(), f.name)}
    # `judge`'s one --max-new-tokens bounds both stages; build-data has no stage 2
    tied = {"max_new_tokens": {"reflection_max_new_tokens"}}.get(name, set()) if build is judge_config else set()
    assert changed == {name} | tied


@pytest.mark.parametrize("cls", [JudgeConfig, TrainConfig, DataConfig])
def test_every_field_has_help(cls):
    helps = field_help(cls)
    assert {f.name for f in fields(cls) if not helps.get(f.name)} == set()


# The flag names the README and the older CLIs used keep working.
@pytest.mark.parametrize("argv, want", [
    pytest.param(["--include-verdict"], {"critique_includes_verdict": True}, id="include-verdict"),
    # trap: one --max-new-tokens bounds both stages, as before, unless stage 2 is given its own
    pytest.param(["--max-new-tokens", "96"], {"max_new_tokens": 96, "reflection_max_new_tokens": 96}, id="tied"),
    pytest.param(["--max-new-tokens", "96", "--reflection-max-new-tokens", "40"],
                 {"max_new_tokens": 96, "reflection_max_new_tokens": 40}, id="untied"),
    pytest.param(["--strategy", "greedy", "--n", "1"], {"strategy": "greedy", "n": 1}, id="greedy-n1"),
])
def test_judge_flag_names_kept(argv, want):
    config = judge_config(*argv)
    assert {k: getattr(config, k) for k in want} == want


@pytest.mark.parametrize("argv, want", [
    pytest.param(["--lr", "3e-4"], {"learning_rate": 3e-4}, id="lr"),
    pytest.param(["--max-minutes", "2"], {"max_time_s": 120.0}, id="max-minutes"),
    pytest.param(["--no-gradient-checkpointing"], {"gradient_checkpointing": False}, id="no-gc"),
    pytest.param(["--format-reward", "0.5"], {"reward_weights": {"accuracy": 1.0, "format": 0.5}}, id="format"),
    pytest.param(["--format-reward", "1", "--reward-weights", "accuracy=2"],
                 {"reward_weights": {"accuracy": 2.0, "format": 1.0}}, id="format-over-weights"),
    # a demo domain's process reward is a reward name like any other (no demo-only flag)
    pytest.param(["--reward-weights", "accuracy=1,arithmetic=0.5"],
                 {"reward_weights": {"accuracy": 1.0, "arithmetic": 0.5}}, id="domain-reward-by-name"),
    pytest.param(["--no-bf16"], {"bf16": False}, id="no-bf16"),
    # the original GRPO beside TRL's defaults, by name
    pytest.param(["--objective", "original-grpo"], {"beta": 0.04, "loss_type": "grpo"}, id="original-grpo"),
    pytest.param(["--objective", "trl", "--beta", "0.1"], {"beta": 0.0, "loss_type": "dapo"}, id="objective-trl"),
])
def test_train_flag_names_kept(argv, want):
    config = train_config(*argv)
    assert {k: getattr(config, k) for k in want} == want


def test_a_bad_value_is_refused_by_the_dataclass_rule():
    from reflectrm.errors import ConfigError

    with pytest.raises(ConfigError, match="n must be >= 2"):
        judge_config("--n", "1")


# Every `reflectrm COMMAND --flag` the README and docs/ show is checked in tests/test_docs.py.


def test_a_malformed_mapping_flag_exits_2_naming_the_form(capsys):
    with pytest.raises(SystemExit) as info:
        train_config("--reward-weights", "accuracy")
    assert info.value.code == 2
    assert "'accuracy' is not NAME=WEIGHT" in capsys.readouterr().err


def test_given_only_flags_pass_on_what_was_typed_and_repeat_a_tuple_field():
    """The engine flags: None means "not given" (the engine keeps its own default), --base-url repeats."""
    import argparse

    from reflectrm.backends.engine import EngineConfig
    from reflectrm.flags import Flag, add_config_flags, given_flags

    p = argparse.ArgumentParser()
    add_config_flags(p, EngineConfig, extra={"base_urls": Flag(name="--base-url", repeat=True, metavar="URL")},
                     given_only=True)
    assert given_flags(EngineConfig, p.parse_args([])) == {}
    args = p.parse_args(["--base-url", "http://a:1/v1", "--base-url", "http://b:2/v1", "--enforce-eager",
                         "--max-model-len", "none", "--dtype", "float32"])
    assert given_flags(EngineConfig, args) == {"base_urls": ("http://a:1/v1", "http://b:2/v1"), "enforce_eager": True,
                                               "dtype": "float32"}
    assert EngineConfig(**given_flags(EngineConfig, args)).base_urls == ("http://a:1/v1", "http://b:2/v1")
    assert "(default: 0.9)" in p.format_help() and "--base-urls" not in p.format_help()


@pytest.mark.parametrize(
    ("argv", "env", "want"),
    [
        pytest.param([], None, {"threads": 1}, id="demo-judge-one-thread"),
        pytest.param([], "2", {}, id="omp-num-threads-is-the-users-choice"),
        pytest.param(["--model", "/models/judge"], None, {}, id="a-real-model-keeps-torchs-setting"),
        pytest.param(["--device", "cuda"], None, {}, id="gpu"),
        pytest.param(["--threads", "1", "--model", "m"], "2", {"threads": 1}, id="the-flag-wins"),
        pytest.param(["--threads", "AUTO", "--model", "m"], None, {"threads": "auto"}, id="auto"),
        pytest.param(["--backend", "vllm"], None, {}, id="an-engine-runs-its-own"),
    ],
)
def test_the_threads_flag_and_its_default(argv, env, want, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if env is not None:
        monkeypatch.setenv("OMP_NUM_THREADS", env)
    p = argparse.ArgumentParser()
    options.add_backend_flags(p)
    assert options.backend_config(p.parse_args(argv)).load_options() == want


def test_more_threads_than_cpus_is_refused_before_anything_loads(capsys):
    from reflectrm.defaults import usable_cpus

    p = argparse.ArgumentParser()
    options.add_backend_flags(p)
    assert p.parse_args(["--threads", str(usable_cpus())]).threads == usable_cpus()
    with pytest.raises(SystemExit):
        p.parse_args(["--threads", "100000"])  # torch crashed (SIGSEGV) at this count
    assert f"give a thread count from 1 to {usable_cpus()}" in capsys.readouterr().err


def test_build_data_flag_names_kept():
    config = data_config("--include-verdict", "--mix", "3:2")
    assert (config.judge.critique_includes_verdict, config.mix) == (True, (3, 2))


def test_a_malformed_mix_exits_2_naming_the_form(capsys):
    with pytest.raises(SystemExit) as exit_:
        data_config("--mix", "4/1")
    assert exit_.value.code == 2
    assert "--mix must look like 4:1" in capsys.readouterr().err


def test_train_config_objective_names_the_original_grpo():
    from reflectrm.errors import ConfigError

    assert (TrainConfig().objective("original-grpo").beta, TrainConfig().objective("original-grpo").loss_type) == \
        (0.04, "grpo")
    assert TrainConfig().objective("trl") == TrainConfig()  # TRL's defaults are the defaults
    with pytest.raises(ConfigError, match="objective must be one of trl, original-grpo"):
        TrainConfig().objective("ppo")
