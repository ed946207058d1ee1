"""The `store` extra: `reflectrm import / export / db` run without gradio (nor torch) being importable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_architecture import ROOT

# Blocks the UI's dependency the way a `pip install '.[store]'` environment lacks it, then runs the real CLI.
SCRIPT = """
import importlib.abc, json, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("gradio", "gradio_client"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the store extra has no gradio)")

sys.meta_path.insert(0, NotInstalled())
import reflectrm_app.commands.store  # the store's command-line shell
from reflectrm_app.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
print(json.dumps({"codes": codes, "loaded": [m for m in ("gradio", "torch") if m in sys.modules]}))
"""


def test_store_commands_work_without_gradio(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"q{k}", "response_1": "a", "response_2": "b", "label": 1}) + "\n"
                             for k in range(3)), encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    argv = [["db", "upgrade", "--db", url], ["import", str(pairs), "--db", url],
            ["export", "pairs", "--out", str(tmp_path / "out.jsonl"), "--db", url]]  # an export of nothing is refused
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(argv)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"codes": [0, 0, 0], "loaded": []}
    assert (tmp_path / "out.jsonl").exists()


def test_importing_the_store_cli_loads_no_ui() -> None:
    code = "import sys, reflectrm_app.commands.store, reflectrm_db.services; print('gradio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
