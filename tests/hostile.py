"""What the hostile-input tables share: a copy of a module's world per case, its fingerprint, and the refusal's shape."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path


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
