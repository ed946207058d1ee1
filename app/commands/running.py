"""How every `reflectrm` command runs: known failures as one line and exit 2, output that never fails to encode,
a closed pipe as a quiet exit 141, log lines escaped (`run_command`, `safe_streams`, `PrintableFormatter`)."""

from __future__ import annotations

import argparse
import codecs
import contextlib
import logging
import os
import sys

from reflectrm.display import escape_unencodable, printable
from reflectrm.errors import ReflectRMError


def error_line(exc: BaseException) -> str | None:
    """One line for an error a command can meet in the world (a file, an encoding, a database); None for a bug.

    The `reflectrm` command prints it and exits 2, whatever part raised it: precise checks come first
    where a better message is possible, and this catches what they cannot foresee (a full disk, a
    file that vanished, a database server that went away), never with a traceback.
    """
    if isinstance(exc, ReflectRMError):
        text = str(exc)
    elif isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        text = f"{exc.strerror or exc}{where}: check the path, its permissions and the free disk space"
    elif isinstance(exc, UnicodeError):
        text = f"text that is not valid UTF-8 ({exc}): save files as UTF-8 and fix any unpaired \\uD800-\\uDFFF escape"
    elif isinstance(exc, RecursionError):
        text = "input nested too deeply to read: fix the data"
    elif _is_database_error(exc):
        orig = getattr(exc, "orig", None) or exc
        text = f"the database failed ({type(orig).__name__}: {orig}): check --db, its permissions and the server"
    else:
        return None
    return " ".join(text.split())  # one line, whatever the message held


EXIT_USAGE = 2
EXIT_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a program whose reader went away (`reflectrm judge ... | head -1`)."""


def run_command(args: argparse.Namespace) -> int:
    """Run the command `args.func` names: a known kind of failure is one line and exit 2, whatever part raised it.

    Printing never fails: a character the terminal's encoding lacks is written as its escape (an encoding
    error after a judgment was stored used to read as bad input, and each retry stored another row), and
    a reader that went away ends the command quietly (exit 141). Ctrl-C is exit 130.
    """
    safe_streams()
    try:
        code = int(args.func(args) or 0)
        if sys.stdout is not None:
            sys.stdout.flush()  # a reader that went away shows here, not as a message at exit
        return code
    except KeyboardInterrupt:
        _say("interrupted: rerun the same command to resume")
        return 130
    except Exception as exc:  # one mechanism for every command
        if isinstance(exc, BrokenPipeError) and stdout_gone():
            return EXIT_PIPE  # nothing to say, and no one reading it
        line = error_line(exc)
        if line is None:
            raise  # a bug: keep its traceback
        logging.getLogger(__name__).info("%s", line, exc_info=True)  # the traceback, with --verbose
        _say(f"error: {printable(line)}")
        return EXIT_USAGE


ESCAPE_ERRORS = "reflectrm-escape"
"""The codec error handler `safe_streams` gives stdout and stderr (`reflectrm.display.escape_unencodable`)."""


def safe_streams() -> None:
    """stdout and stderr write what their encoding lacks as \\u escapes (PYTHONIOENCODING=ascii, a C locale)."""
    codecs.register_error(ESCAPE_ERRORS, escape_unencodable)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):  # None (closed at start), or not a text file
            stream.reconfigure(errors=ESCAPE_ERRORS)  # type: ignore[union-attr]


def stdout_gone() -> bool:
    """Whether stdout's reader went away (a closed pipe); if so stdout is pointed at /dev/null, so that the
    interpreter's own flush at exit stays quiet (the recipe of Python's `signal` documentation)."""
    try:
        fd = sys.stdout.fileno()  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return False
    try:
        sys.stdout.flush()  # type: ignore[union-attr]
        gone = _pipe_widowed(fd)
    except BrokenPipeError:
        gone = True
    if gone:
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return gone


def _pipe_widowed(fd: int) -> bool:
    """A pipe no process reads any more: poll reports an error on its writing end (Linux, macOS)."""
    import select

    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr's reader gone too: the exit code still tells
        print(line, file=sys.stderr)


class PrintableFormatter(logging.Formatter):
    """Log records with data escaped for a terminal (`printable`); a traceback keeps its lines."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), lines=True)


def _is_database_error(exc: BaseException) -> bool:
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")  # loaded only by commands that use the store
    return sqlalchemy_exc is not None and isinstance(exc, sqlalchemy_exc.SQLAlchemyError)
