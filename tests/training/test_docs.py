"""The launch docs and configs stay in step with the code."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

import reflectrm.training
from reflectrm_app.commands import train as cli

CONFIGS = Path(reflectrm.training.__file__).resolve().parent / "configs"


def train_commands(text: str) -> list[str]:
    """The arguments after `train` of every documented `reflectrm train` command (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [m.group(1) for m in re.finditer(r"(?:reflectrm train|reflectrm_app\.commands\.train train)( [^\n]*)", joined)]


def known_train_flags() -> set[str]:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    train = parser._subparsers._group_actions[0].choices["train"]
    return {flag for action in train._actions for flag in action.option_strings}


def test_every_documented_train_flag_exists():
    commands = train_commands((CONFIGS / "README.md").read_text())
    assert len(commands) >= 4
    used = {flag for c in commands for flag in re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", c)}
    assert used - known_train_flags() == set()


@pytest.mark.parametrize("name", ["multi_gpu.yaml", "zero2.yaml", "zero3.yaml"])
def test_accelerate_configs_parse_and_are_referenced(name):
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((CONFIGS / name).read_text())
    assert config["distributed_type"] in ("MULTI_GPU", "DEEPSPEED") and config["mixed_precision"] == "bf16"
    assert name in (CONFIGS / "README.md").read_text()
