"""`reflectrm judge`: the judging command, a thin shell over the library.

The full `reflectrm` command (judge, store, app, training) is assembled in `reflectrm_app.cli`, the outer
shell, so that this library never imports the store or the app.

    reflectrm judge --query Q --response-1 A --response-2 B [--json] [--swap]
    reflectrm judge --input pairs.jsonl --output judgments.jsonl [--strategy S] [--n N] [--seed K]

Bad input gets one line on stderr naming the problem and the fix, and exit code 2.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import itertools
import json
import logging
import os
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from reflectrm import flags, outputs
from reflectrm.backends.config import BACKENDS, DEFAULT_THREADS, BackendConfig
from reflectrm.core.config import JudgeConfig
from reflectrm.core.strategies import STRATEGIES
from reflectrm.core.types import PreferencePair
from reflectrm.display import escape_unencodable, printable
from reflectrm.errors import InputError, ReflectRMError
from reflectrm.flags import Flag, add_config_flags, add_store_flag
from reflectrm.eval.readers import read_pairs
from reflectrm.inputs import check_text, unique_keys
from reflectrm.locks import exclusive

JUDGE_FLAGS = {
    "strategy": Flag(choices=tuple(sorted(STRATEGIES))),
    "critique_includes_verdict": Flag(names=("--include-verdict",)),  # the flag's first name, still accepted
    "reflection_max_new_tokens": Flag(tied_to="max_new_tokens"),  # one --max-new-tokens bounds both stages
}
"""What the judging flags add to `JudgeConfig`'s fields; every other flag, default and help comes from the class."""


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


def register(sub: argparse._SubParsersAction, *, open_store: Callable[[str], Any] | None = None) -> None:
    """Add `judge` to a sub-command parser; `open_store(url)` backs `--db` (supplied by the shell)."""
    p = sub.add_parser("judge", help="judge one pair, or a JSONL file of pairs",
                       description="Judge response pairs with ReflectRM's two-stage method (or another strategy).")
    one = p.add_argument_group("one pair")
    one.add_argument("--query", help="the user query")
    one.add_argument("--messages", help="a JSON list of {role, content} turns ending in a user turn (instead of --query)")
    one.add_argument("--response-1", dest="response_1", help="the first response")
    one.add_argument("--response-2", dest="response_2", help="the second response")
    one.add_argument("--label", type=int, choices=(1, 2), help="the better response, if known")
    many = p.add_argument_group("a file of pairs")
    many.add_argument("--input", type=Path,
                      help='pairs: JSONL of {"id", "query" or "messages", "response_1", "response_2", "label"?}, '
                           "or JSON, CSV, Parquet, a `datasets` folder (read as `eval` reads them)")
    many.add_argument("--output", type=Path, help="JSONL of judgments; a rerun skips pairs already there")
    add_batch_flag(many)
    add_judge_flags(p)
    p.add_argument("--swap", action="store_true", help="judge both orders and report whether they agree")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the anatomy")
    if open_store is not None:
        add_store_flag(p, optional=True)
    add_backend_flags(p)
    p.set_defaults(func=cmd_judge, open_store=open_store)


# --- the options every command that judges shares, derived from the config classes ----------------------

BACKEND_FLAGS = {
    "model": Flag(show=lambda _: "the bundled demo judge"),
    "backend": Flag(choices=BACKENDS),
    "threads": Flag(metavar="N|auto", show=lambda _: DEFAULT_THREADS),
}
"""What the model and backend flags add to `BackendConfig`'s fields (choices, how a default of None reads)."""


def add_batch_flag(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--batch-size: pairs generated together, as `judge`, `eval` and `build-data` batch them."""
    p.add_argument("--batch-size", type=int, default=8, help="pairs generated together (default 8)")


def add_judge_flags(p: argparse.ArgumentParser, *, skip: Collection[str] = ()) -> None:
    """One flag per `JudgeConfig` field but those in `skip` (a command that sets them another way)."""
    add_config_flags(p.add_argument_group("judging (JudgeConfig; defaults from the paper)"), JudgeConfig,
                     extra={k: v for k, v in JUDGE_FLAGS.items() if k not in skip}, skip=skip)


def add_backend_flags(p: argparse.ArgumentParser, *, given_only: bool = False, skip: Collection[str] = ()) -> None:
    """--model, --backend, --device, --threads (`BackendConfig`) but those in `skip`, and the engine options
    (`EngineConfig`) unless "backend" is skipped (a command that runs the transformers backend only).

    `given_only`: the flags default to None, for a command whose defaults come from its settings (`app`)."""
    add_config_flags(p.add_argument_group("model and backend (BackendConfig)"), BackendConfig,
                     extra=BACKEND_FLAGS, given_only=given_only, skip=skip)
    if "backend" not in skip:  # the engine options are those of --backend vllm|openai
        add_engine_flags(p)


ACCESS_FLAGS = {
    "allowed_hosts": Flag(name="--allowed-host", repeat=True, metavar="HOST"),
    "allowed_origins": Flag(name="--allowed-origin", repeat=True, metavar="ORIGIN"),
}
"""The trusted-host and origin options of `serve` and `app`, from `AccessConfig`'s fields (one definition)."""


def add_access_flags(p: argparse.ArgumentParser) -> None:
    """--allowed-host and --allowed-origin (`reflectrm.serving.hosts.AccessConfig`), repeatable; unset: not given."""
    from reflectrm.serving.hosts import AccessConfig

    add_config_flags(p.add_argument_group("who may call it (AccessConfig; localhost and IP addresses always)"),
                     AccessConfig, extra=ACCESS_FLAGS, given_only=True)


def access_config(args: argparse.Namespace) -> Any:
    """The `AccessConfig` the access flags give (checked: a malformed host or origin is one `ConfigError` line)."""
    from reflectrm.serving.hosts import AccessConfig

    return AccessConfig(**flags.given_flags(AccessConfig, args))


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """The `--backend vllm|openai` options, derived from `EngineConfig` (its defaults and comments) by
    `reflectrm.flags`; none has a default of its own, so only what was typed reaches the engine."""
    from reflectrm.backends.engine import EngineConfig

    group = p.add_argument_group("engines (--backend vllm or openai)")
    add_config_flags(group, EngineConfig, extra={"base_urls": Flag(name="--base-url", repeat=True, metavar="URL")},
                     given_only=True)


def backend_config(args: argparse.Namespace) -> BackendConfig:
    """The `BackendConfig` the model and backend flags give, checked (threads with an engine are refused)."""
    return flags.config_from_args(BackendConfig, args)


def engine_config(args: argparse.Namespace) -> Any:
    """The `EngineConfig` the engine flags give, checked; None unless --backend vllm or openai."""
    from reflectrm.backends.engine import ENGINE_BACKENDS, EngineConfig

    if getattr(args, "backend", None) not in ENGINE_BACKENDS:
        return None
    return EngineConfig(**flags.given_flags(EngineConfig, args))


def backend_configs(args: argparse.Namespace) -> tuple[BackendConfig, Any]:
    """`load_backend`'s configs from the model, backend and engine flags, checked before anything loads (the model
    folder and the device too: `BackendConfig.check_ready`)."""
    config, engine = backend_config(args), engine_config(args)
    config.check_ready()
    return config, engine


def load_judge(config: BackendConfig, engine: Any = None) -> Any:
    """The backend the configs name, loaded (minutes on a real judge: check inputs first)."""
    from reflectrm.backends import load_backend

    return load_backend(config, engine)


def config_from_args(args: argparse.Namespace) -> JudgeConfig:
    """The `JudgeConfig` the judging flags give (every field has one; see `JUDGE_FLAGS`)."""
    return flags.config_from_args(JudgeConfig, args, extra=JUDGE_FLAGS)


def _pair_from_args(args: argparse.Namespace) -> PreferencePair:
    if args.response_1 is None or args.response_2 is None:
        raise InputError("give --response-1 and --response-2 (or --input FILE.jsonl)")
    for name in ("query", "messages", "response_1", "response_2"):
        check_text(getattr(args, name) or "", where=f"--{name.replace('_', '-')}")
    if args.messages is not None:
        try:
            messages = json.loads(args.messages, object_pairs_hook=unique_keys)  # a key given twice: refused
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"--messages is not valid JSON ({getattr(exc, 'msg', 'nested too deeply')}): "
                             "pass a list of {role, content} objects") from exc
        return PreferencePair.from_dict({"messages": messages, "response_1": args.response_1,
                                         "response_2": args.response_2, "label": args.label})
    if args.query is None:
        raise InputError("give --query (or --messages) with the two responses")
    return PreferencePair.from_query(args.query, args.response_1, args.response_2, label=args.label)


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeRun:
    """What `judge` does besides making judgments (`JudgeConfig`): what it reads, writes and stores."""

    input: Path | None = None  # a file of pairs; None: the one pair given by flags
    output: Path | None = None  # None with `input`: beside it, as NAME.judgments.jsonl
    batch_size: int = 8
    swap: bool = False
    json: bool = False
    db: str | None = None  # None: nothing stored; "" is refused by the store, not read as "no store"

    def __post_init__(self) -> None:
        if self.input is None and self.output is not None:
            raise InputError("--output needs --input FILE.jsonl")
        if self.batch_size < 1:
            raise InputError(f"--batch-size must be at least 1, got {self.batch_size}")


def cmd_judge(args: argparse.Namespace) -> int:
    config, run = config_from_args(args), JudgeRun(
        input=args.input, output=args.output, batch_size=args.batch_size, swap=args.swap, json=args.json,
        db=getattr(args, "db", None))
    backend, engine = backend_configs(args)  # checked here: a bad flag fails before anything loads
    # any pair file `eval` and `import` read, by the same rules (a row without a source is the file's, as there)
    pairs = read_pairs(run.input) if run.input else [_pair_from_args(args)]
    return judge_pairs(pairs, run=run, config=config, backend=backend, engine=engine, open_store=args.open_store)


def judge_pairs(pairs: list[PreferencePair], *, run: JudgeRun, config: JudgeConfig, backend: BackendConfig,
                engine: Any, open_store: Callable[[str], Any] | None) -> int:
    """Judge `pairs` as `run` says, every precondition checked before the model loads (minutes on a real judge)."""
    with contextlib.ExitStack() as stack:
        plan = None
        if run.input is not None:
            out_path = run.output or run.input.with_suffix(".judgments.jsonl")
            stack.enter_context(exclusive(out_path, flag="--output"))  # one writer: read, then appended to by us only
            plan = outputs.check_output(out_path, input_path=run.input, config=config, swap=run.swap)
        store = None
        if run.db is not None and open_store is not None:
            store = stack.enter_context(open_store(run.db))
            store.check_writable()
        judge = load_judge(backend, engine)
        if plan is None:
            return _judge_one(run, pairs[0], judge, config, store)
        return _judge_file(run, pairs, plan, judge, config, store)


def _judge_one(run: JudgeRun, pair: PreferencePair, backend: Any, config: JudgeConfig, store: Any) -> int:
    from reflectrm.pipeline import judge_many

    judgments = list(judge_many([pair, pair.swapped()] if run.swap else [pair], backend, config))
    # what is printed is made before the store is written: a failure in making it stores nothing
    payload = _one_payload(judgments) if run.json else None
    text = None if run.json else _one_text(judgments)
    ids = store.record(judgments, swapped=run.swap) if store else None
    if payload is not None:
        if ids:
            payload["stored_ids"] = ids
        print(printable(json.dumps(payload, ensure_ascii=False)))  # still JSON: the escapes are JSON's own
        return 0
    print(text)
    if ids:
        print(printable(f"Stored as judgment {', '.join(f'#{i}' for i in ids)} in {run.db}"))
    return 0


def _one_payload(judgments: list[Any]) -> dict[str, Any]:
    from reflectrm.pipeline import orders_agree

    payload: dict[str, Any] = judgments[0].to_dict()
    if len(judgments) == 2:
        payload["swapped"] = judgments[1].to_dict()
        payload["orders_agree"] = orders_agree(*judgments)
    return payload


def _one_text(judgments: list[Any]) -> str:
    """The anatomy of one pair's judgment (and of its swap); `render_judgment` escapes the data in it."""
    from reflectrm.pipeline import orders_agree
    from reflectrm.render import render_judgment

    text = render_judgment(judgments[0])
    if len(judgments) == 2:
        agree = orders_agree(*judgments)
        text += "\n\n=== Swapped order ===\n\n" + render_judgment(judgments[1])
        both = "consistent" if agree else "FLIPPED" if agree is False else "undecided (abstained)"
        text += f"\n\nBoth orders: {both}"
    return text


def _judge_file(run: JudgeRun, pairs: list[PreferencePair], plan: outputs.OutputPlan, backend: Any,
                config: JudgeConfig, store: Any) -> int:
    from tqdm import tqdm

    from reflectrm.pipeline import judge_many, orders_agree

    todo = [p for p in pairs if p.id not in plan.done]
    expanded = [q for p in todo for q in ((p, p.swapped()) if run.swap else (p,))]
    per_pair = 2 if run.swap else 1
    judged = judge_many(expanded, backend, config, batch_size=run.batch_size * per_pair)
    first = next(judged, None)  # the first judgment is in hand before the file is touched
    with contextlib.ExitStack() as stack:
        if first is not None and not plan.path.exists():  # a run that fails before its first line leaves no file
            stack.callback(outputs.drop_if_empty, plan.path)
        out = stack.enter_context(outputs.open_output(plan)) if first is not None else None
        bar = stack.enter_context(tqdm(total=len(pairs), initial=len(pairs) - len(todo), unit="pair",
                                       file=sys.stderr, disable=None))
        buffer: list[Any] = []
        for j in itertools.chain([first] if first is not None else [], judged):
            buffer.append(j)
            if len(buffer) < per_pair:
                continue
            line = {"id": buffer[0].pair.id, **buffer[0].to_dict()}
            if run.swap:
                line["swapped"] = buffer[1].to_dict()
                line["orders_agree"] = orders_agree(*buffer)
            if store:  # idempotent: a rerun after a crash between these two writes finds the stored rows
                store.record(buffer, swapped=run.swap, idempotent=True)
            assert out is not None  # opened with the first judgment
            out.write(outputs.json_line(line))  # one write per line: never half a pair
            out.flush()
            buffer = []
            bar.update(1)
    print(printable(f"judged {len(todo)} pair(s), skipped {len(pairs) - len(todo)} already in {plan.path}"),
          file=sys.stderr)
    return 0
