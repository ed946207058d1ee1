"""What a `reflectrm` command pays before it does anything: a refusal or a store command loads no model library.

Importing transformers takes about a second; a typo's answer, and every store command, should not wait for it.
Without -v the command still quiets transformers, whether it was imported before the command ran or after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("transformers", "torch", "trl", "gradio")


def _python(code: str, *, cwd: Path) -> dict:
    """Run `code` in a fresh interpreter (the project on its path, no TRANSFORMERS_VERBOSITY of the machine's)."""
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("argv", [
    pytest.param(["judge", "--input", "missing.jsonl"], id="judge-missing-input"),
    pytest.param(["judge", "--query", "q", "--response-1", "a"], id="judge-one-response"),
    pytest.param(["export", "judgments", "--out", "o.jsonl", "--db", "typo.db"], id="export-typo-db"),
    pytest.param(["db", "upgrade", "--db", "notdb.db"], id="db-upgrade-not-a-database"),
    pytest.param(["train-status", "missing"], id="train-status-missing"),
])
def test_a_refused_command_loads_no_model_library(argv: list[str], tmp_path: Path) -> None:
    (tmp_path / "notdb.db").write_text("not a database\n")
    code = ("import json, sys\nfrom reflectrm_app.cli import main\n"
            f"code = main({argv!r})\n"
            f"print(json.dumps({{'code': code, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))")
    assert _python(code, cwd=tmp_path) == {"code": 2, "loaded": []}


ERROR, WARNING = 40, 30  # transformers' levels (logging's)


@pytest.mark.parametrize(("imported_first", "verbose", "level"), [
    pytest.param(False, False, ERROR, id="imported-after-the-command-quiet"),
    pytest.param(True, False, ERROR, id="imported-before-the-command-quiet"),
    pytest.param(False, True, WARNING, id="imported-after-a-verbose-command-its-default"),
])
def test_without_v_transformers_is_quiet_however_it_was_imported(imported_first: bool, verbose: bool, level: int,
                                                                 tmp_path: Path) -> None:
    argv = [*(["-v"] if verbose else []), "judge", "--input", "missing.jsonl"]
    code = ("import json\n"
            + ("import transformers.utils.logging\n" if imported_first else "")
            + f"from reflectrm_app.cli import main\ncode = main({argv!r})\n"
            "from transformers.utils import logging\n"
            "print(json.dumps({'code': code, 'level': logging.get_verbosity()}))")
    assert _python(code, cwd=tmp_path) == {"code": 2, "level": level}
