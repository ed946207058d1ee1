"""What the hostile-input tables share: a copy of a module's world per case, its fingerprint, and the refusal's shape."""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def copy_world(template: Path, tmp_path: Path) -> Path:
    """A fresh copy of a module's prepared world (links kept as links) for one case to act on."""
    root = tmp_path / "world"
    shutil.copytree(template, root, symlinks=True)
    return root


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` -> the sha256 of its bytes: a changed, new (a -wal, a backup) or lost file shows."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


def assert_one_line_refusal(code: int, err: str, expected: str) -> None:
    """Exit 2, one `error:` line on stderr matching `expected`, no traceback."""
    assert code == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert re.search(expected, err), err


def run_cli(args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300,
            limit_file_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
    """`reflectrm ARGS` in a real process in `cwd` ("{w}" in an argument is `cwd`), with a bare environment and,
    with `limit_file_bytes`, a cap on the size of any file it writes (a full disk, as EFBIG)."""
    def limits() -> None:  # Python ignores SIGXFSZ: a write past the limit fails with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    base = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    return subprocess.run([sys.executable, "-m", "reflectrm_app.cli", *[a.replace("{w}", str(cwd)) for a in args]],
                          capture_output=True, text=True, cwd=cwd, env={**base, **(env or {})}, timeout=timeout,
                          preexec_fn=limits if limit_file_bytes else None)


def assert_refused(done: subprocess.CompletedProcess[str], expected: str) -> None:
    """A real process's refusal: exit 2, one `error:` line on stderr holding `expected`, no traceback."""
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: "), done.stderr[-2000:]
    assert expected in done.stderr, done.stderr
