"""Judgment files a rerun resumes: `reflectrm judge --output` appends to a file only once it is proven its own.

    plan = check_output(Path("out.jsonl"), input_path=Path("pairs.jsonl"), config=config, swap=False)
    todo = [p for p in pairs if p.id not in plan.done]
    with open_output(plan) as out:          # a torn last line (a killed run's) is cut only now
        out.write(json_line({"id": ..., **judgment.to_dict()}))

Every line is one judgment (or a pair judged in both orders) made with the same `JudgeConfig`; a file
holding anything else, or judgments made with other options, is refused before any model work.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from reflectrm.core.config import JudgeConfig
from reflectrm.errors import InputError

_LINE_FIELDS = {"id": str, "pair": dict, "strategy": str, "rollouts": list, "config": dict}
_LINE_START = b'{"id": '  # how every line this command writes begins (json.dumps of {"id": ..., ...})


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """What a rerun finds in an output file.

    Attributes:
        done: ids of the pairs judged there already.
        keep: bytes of the file that are whole judgment lines; a torn last line past them (a killed
            run's) is cut when the first new line is written, not before.
        newline: the last judgment lacks its final newline (written before the next line).
    """

    path: Path
    done: frozenset[str]
    keep: int
    newline: bool


def check_output(path: Path, *, input_path: Path | None, config: JudgeConfig, swap: bool) -> OutputPlan:
    """Check `--output` before any model work: a writable new file, or this command's own judgments.

    Raises:
        InputError: the output is the input file, a folder, not writable, or holds anything but
            judgments made with these options (the file is left as it was).
    """
    if input_path is not None and _same_file(path, input_path):
        raise InputError(f"--output {str(path)!r} is the --input file: pass another --output (judging never "
                         "rewrites its input)")
    if not path.exists():
        folder = path.parent
        if not folder.is_dir():
            raise InputError(f"the folder of --output {str(path)!r} does not exist: create it or fix the path")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError(f"cannot create --output {str(path)!r}: its folder is not writable")
        return OutputPlan(path=path, done=frozenset(), keep=0, newline=False)
    if not path.is_file():
        raise InputError(f"--output {str(path)!r} is a folder (or not a file): pass a file path")
    if not os.access(path, os.W_OK):
        raise InputError(f"--output {str(path)!r} is not writable: fix its permissions or pass another --output")
    return _plan_resume(path, path.read_bytes(), config=config, swap=swap)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def _plan_resume(path: Path, raw: bytes, *, config: JudgeConfig, swap: bool) -> OutputPlan:
    keep = raw.rfind(b"\n") + 1
    lines = raw[:keep].split(b"\n")[:-1] if keep else []
    done = {_judgment_id(line, where=f"{path}:{k}", config=config, swap=swap)
            for k, line in enumerate(lines, 1) if line.strip()}
    tail = raw[keep:]
    if not tail.strip():
        return OutputPlan(path=path, done=frozenset(done), keep=len(raw), newline=False)
    try:  # a last line that is whole but lacks its newline (a run killed between the two writes, or an editor)
        done.add(_judgment_id(tail, where=f"{path}:{len(lines) + 1}", config=config, swap=swap))
        return OutputPlan(path=path, done=frozenset(done), keep=len(raw), newline=True)
    except InputError:
        if not tail.startswith(_LINE_START):  # not the start of a line this command writes: not a torn judgment
            raise
    return OutputPlan(path=path, done=frozenset(done), keep=keep, newline=False)


def _judgment_id(line: bytes, *, where: str, config: JudgeConfig, swap: bool) -> str:
    """The pair id of one output line, after checking it is a judgment made with these options."""
    fix = "pass a new --output, or rerun with the options that made this file"
    try:
        obj = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise InputError(f"{where}: not a judgment line (this is not an output of `reflectrm judge`): "
                         "pass a new --output") from None
    if not isinstance(obj, dict) or any(not isinstance(obj.get(k), t) for k, t in _LINE_FIELDS.items()):
        raise InputError(f"{where}: not a judgment line (this is not an output of `reflectrm judge`): "
                         "pass a new --output")
    if ("swapped" in obj) != swap:
        raise InputError(f"{where}: judged {'with' if 'swapped' in obj else 'without'} --swap: {fix}")
    ours = config.to_dict()
    theirs = obj["config"]
    changed = sorted((k not in theirs, k) for k in set(ours) | set(theirs) if theirs.get(k) != ours.get(k))
    if changed:
        k = changed[0][1]  # a field the file names first: the likeliest difference the user made
        raise InputError(f"{where}: judged with {k}={theirs.get(k)!r}, this run has {k}={ours.get(k)!r}: {fix}")
    return obj["id"]


def open_output(plan: OutputPlan) -> BinaryIO:
    """The output file opened for appending; a torn last line is cut now, when new work is ready to write."""
    out = plan.path.open("r+b" if plan.path.exists() else "wb")
    out.truncate(plan.keep)
    out.seek(plan.keep)
    if plan.newline:
        out.write(b"\n")
    return out


def drop_if_empty(path: Path) -> None:
    """Remove an output file this run created and wrote nothing to (a 0-byte file would read as a judged run)."""
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()


def json_line(obj: dict[str, Any]) -> bytes:
    text = json.dumps(obj, ensure_ascii=False)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a stored pair: \\u-escape it, still valid UTF-8 JSON
        return (json.dumps(obj, ensure_ascii=True) + "\n").encode("ascii")
