"""The training package keeps the library's import rules: nothing heavy at import, no store or app."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_architecture import HEAVY, ROOT, _imports


def test_importing_training_loads_no_heavy_module():
    code = (
        "import sys, json, reflectrm.training, reflectrm_app.commands.train, reflectrm.training.jobs, "
        "reflectrm.training.worker, reflectrm.training.data, reflectrm.training.grpo, reflectrm.training.rewards;"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == []


def test_rewards_and_runs_use_the_standard_library_and_the_core_only():
    # The reward functions run inside TRL's loop and the run files are read by the app: keep both light.
    # The demo domain's arithmetic reward is a plugin TRL calls in the same loop: it and its domain keep the same rule.
    light = ("reflectrm.core", "reflectrm.errors", "reflectrm.training.rewards", "reflectrm.demo.rewards",
             "reflectrm.demo.tasks", "reflectrm.demo.steps", "__future__")
    for path in (ROOT / "reflectrm" / "training" / "rewards.py", ROOT / "reflectrm" / "training" / "runs.py",
                 ROOT / "reflectrm" / "demo" / "rewards.py", ROOT / "reflectrm" / "demo" / "tasks.py",
                 ROOT / "reflectrm" / "demo" / "steps.py"):
        bad = [n for n in _imports(Path(path)) if n.split(".")[0] not in sys.stdlib_module_names
               and not n.startswith(light)]
        assert bad == [], path.name
