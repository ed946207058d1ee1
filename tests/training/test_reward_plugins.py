"""Rewards by name: built-ins, plugins loaded on first use, any package.module:function; training never imports demo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reflectrm.demo.rewards import arithmetic_reward
from reflectrm.errors import ConfigError
from reflectrm.training.grpo import TrainConfig
from reflectrm.training.rewards import BUILTIN_REWARDS, REWARDS, accuracy_reward
from tests.test_architecture import ROOT


def test_names_resolve_to_builtins_plugins_and_paths():
    assert REWARDS["accuracy"] is accuracy_reward
    assert REWARDS["arithmetic"] is arithmetic_reward  # the plugin, loaded by its import path
    assert REWARDS["reflectrm.training.rewards:format_reward"] is BUILTIN_REWARDS["format"]
    assert set(REWARDS) == {"accuracy", "format", "consistency", "arithmetic"}
    assert "no-such-reward" not in REWARDS


@pytest.mark.parametrize("name, message", [
    pytest.param("acuracy", "use names from", id="typo"),  # trap: a misspelt name must not train on nothing
    pytest.param("reflectrm.nowhere:reward", "cannot be loaded", id="missing-module"),
    pytest.param("reflectrm.training.rewards:nothing_here", "cannot be loaded", id="missing-function"),
    pytest.param("reflectrm.training.rewards:BUILTIN_REWARDS", "not a function", id="not-callable"),
])
def test_a_bad_reward_name_fails_when_the_config_is_made(name, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(reward_weights={"accuracy": 1.0, name: 1.0})


def test_training_loads_no_task_domain_until_a_run_names_one():
    code = ("import sys, json, reflectrm.training.rewards, reflectrm.training.grpo, reflectrm_app.commands.train;"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('reflectrm.demo'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == []
