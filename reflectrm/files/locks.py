"""One writer per output: a command holds an exclusive lock on what it writes, from before it reads it until it ends.

    with exclusive(Path("out.jsonl"), flag="--output"):             # out.jsonl.lock, beside the file
        plan = check_output(...)                                    # read, then appended to: no other run can
    with exclusive(Path("runs/r1"), flag="--output", folder=True):  # runs/r1/.reflectrm.lock, inside the folder

A second run on the same output is refused at once (`OutputBusy`, one line naming the run that holds
it), before it reads or writes anything. The lock is the kernel's (`flock`, advisory): it goes with
its process however that ends, a crash or `kill -9` included, so a killed run never blocks the rerun.
The lock file is removed on release; one a killed run left is stale and harmless (the next run takes
it). Two names of one file (a symbolic link, `./out.jsonl`) take one lock: the path is resolved first.
Local file systems only: `flock` on a network share may lock nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from reflectrm.errors import InputError, OutputBusy

FOLDER_LOCK = ".reflectrm.lock"
"""The lock file inside a folder output (a training run, a report folder, a snapshot folder)."""


@contextlib.contextmanager
def exclusive(target: Path, *, flag: str, folder: bool = False) -> Iterator[Path]:
    """Hold the one-writer lock of `target` (a file, or with `folder` a folder, created if missing) while writing it.

    Yields the lock file's path. A folder this made and the command left empty is removed on release.

    Raises:
        OutputBusy: another process holds the lock (its pid and command are in the message).
        InputError: the lock cannot be made there (a missing or read-only folder, a file where a folder goes).
    """
    target = Path(target)
    made = _make_folder(target, flag=flag) if folder else []
    path = target.resolve() / FOLDER_LOCK if folder else _beside(target, flag=flag)
    try:
        fd = _acquire(path, flag=flag, target=target)
        try:
            os.write(fd, json.dumps(_holder()).encode("utf-8"))  # for the message a second run shows
            yield path
        finally:
            with contextlib.suppress(OSError):  # still held: a run that opened this file meanwhile sees it gone
                os.unlink(path)
            os.close(fd)
    finally:
        for created in made:  # deepest first; stops at the first that holds something
            try:
                created.rmdir()
            except OSError:
                break


def _beside(target: Path, *, flag: str) -> Path:
    real = target.resolve()
    if not real.parent.is_dir():
        raise InputError(f"the folder of {flag} {str(target)!r} does not exist: create it or fix the path")
    return real.with_name(real.name + ".lock")


def _make_folder(target: Path, *, flag: str) -> list[Path]:
    """Create the folder `target` (and missing parents); returns the folders made, deepest first."""
    real = target.resolve()
    if real.exists() and not real.is_dir():
        raise InputError(f"{flag} {str(target)!r} is a file: pass a folder path")
    made = [p for p in (real, *real.parents) if not p.exists()]
    try:
        real.mkdir(parents=True, exist_ok=True)  # the command writes into it: it would make it anyway
    except OSError as exc:
        raise InputError(f"cannot create {flag} {str(target)!r} ({exc.strerror}): pick a writable folder") from None
    return made


def _acquire(path: Path, *, flag: str, target: Path) -> int:
    import fcntl  # POSIX; imported here so that `import reflectrm` stays portable

    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise InputError(f"cannot lock {flag} {str(target)!r}: {path} cannot be created ({exc.strerror}): "
                             "make its folder writable or pass another path") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise OutputBusy(f"{flag} {str(target)!r} is being written by another run, {holder}: wait for it to "
                             "end (or stop it), or pass another path") from None
        if _is_current(fd, path):
            os.ftruncate(fd, 0)
            return fd
        os.close(fd)  # its holder removed the file between our open and our lock: lock the one there now


def _is_current(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _holder() -> dict[str, object]:
    # the program and its sub-command only: the rest of a command line can hold a password (a --db URL)
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:2]]) if sys.argv and sys.argv[0] else "python"
    return {"pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command[:200]}


def _read_holder(fd: int) -> str:
    """Who holds the lock, from what it wrote: "reflectrm judge (pid 4242, since ...)" (bounded, never trusted)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return f"{info['command']} (pid {int(info['pid'])}, since {info['since']})"
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # empty (it is writing it now) or not ours
        return "whose pid is not recorded yet"
