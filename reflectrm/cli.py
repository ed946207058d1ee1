"""`reflectrm judge`: the judging command, a thin shell over the library.

The full `reflectrm` command (judge, store, app, training) is assembled in `reflectrm_app.cli`, the outer
shell, so that this library never imports the store or the app.

    reflectrm judge --query Q --response-1 A --response-2 B [--json] [--swap]
    reflectrm judge --input pairs.jsonl --output judgments.jsonl [--strategy S] [--n N] [--seed K]

Bad input gets one line on stderr naming the problem and the fix, and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from reflectrm import flags
from reflectrm.backends import BACKENDS
from reflectrm.core.config import JudgeConfig, counting
from reflectrm.core.strategies import STRATEGIES
from reflectrm.core.types import PreferencePair
from reflectrm.errors import ConfigError, InputError, ReflectRMError
from reflectrm.flags import Flag, add_config_flags
from reflectrm.inputs import byte_lines, loads

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
    many.add_argument("--input", type=Path, help='JSONL: {"id", "query" or "messages", "response_1", "response_2", "label"?}')
    many.add_argument("--output", type=Path, help="JSONL of judgments; a rerun skips pairs already there")
    many.add_argument("--batch-size", type=int, default=8, help="pairs generated together (default 8)")
    p.add_argument("--model", help="Hugging Face id or local path (default: the bundled demo judge)")
    p.add_argument("--backend", default="transformers", choices=BACKENDS,
                   help="generation backend (default transformers)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    add_config_flags(p.add_argument_group("judging (JudgeConfig; defaults from the paper)"), JudgeConfig,
                     extra=JUDGE_FLAGS)
    p.add_argument("--swap", action="store_true", help="judge both orders and report whether they agree")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the anatomy")
    if open_store is not None:
        p.add_argument("--db", help="also store judgments in this database URL (see `reflectrm db`)")
    add_threads_flag(p)
    add_engine_flags(p)
    p.set_defaults(func=cmd_judge, open_store=open_store)


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """The `--backend vllm|openai` options, derived from `EngineConfig` (its defaults and comments) by
    `reflectrm.flags`; none has a default of its own, so only what was typed reaches the engine."""
    from reflectrm.backends.engine import EngineConfig
    from reflectrm.flags import Flag, add_config_flags

    group = p.add_argument_group("engines (--backend vllm or openai)")
    add_config_flags(group, EngineConfig, extra={"base_urls": Flag(name="--base-url", repeat=True, metavar="URL")},
                     given_only=True)


def add_threads_flag(p: argparse.ArgumentParser) -> None:
    """`--threads N|auto`: torch CPU threads of the transformers backend (`threads_option` reads it)."""
    p.add_argument("--threads", type=_thread_count, metavar="N|auto",
                   help="transformers backend: torch CPU threads while generating; auto times one thread against "
                        "torch's count and keeps the faster (default: 1 for the bundled demo judge on a CPU unless "
                        "OMP_NUM_THREADS is set, torch's setting otherwise)")


def _thread_count(text: str) -> int | str:
    from reflectrm.defaults import check_threads

    if text.strip().lower() == "auto":
        return "auto"
    try:
        count = counting(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a thread count: give a number of at least 1, or auto") \
            from None
    try:
        return check_threads(count, name="--threads")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def threads_option(args: argparse.Namespace) -> dict[str, Any]:
    """`load_backend`'s `threads` for the transformers backend ({} when torch keeps its own setting)."""
    from reflectrm.defaults import default_threads

    if args.backend != "transformers":
        if args.threads is not None:
            raise InputError(f"--threads sets the transformers backend's CPU threads; --backend {args.backend} "
                             "runs its own: drop --threads")
        return {}
    threads = args.threads if args.threads is not None else default_threads(args.model, args.device)
    return {} if threads is None else {"threads": threads}


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """`load_backend`'s keyword options from the engine flags and --threads, checked before anything loads."""
    return {**engine_options(args), **threads_option(args)}


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The engine flags given, as `EngineConfig` fields for `load_backend` ({} unless --backend vllm/openai)."""
    from reflectrm.backends.engine import ENGINE_BACKENDS, EngineConfig
    from reflectrm.flags import given_flags

    if getattr(args, "backend", None) not in ENGINE_BACKENDS:
        return {}
    given = given_flags(EngineConfig, args)
    EngineConfig(**given)  # validated now: a bad flag fails before anything loads
    return given


def config_from_args(args: argparse.Namespace) -> JudgeConfig:
    """The `JudgeConfig` the judging flags give (every field has one; see `JUDGE_FLAGS`)."""
    return flags.config_from_args(JudgeConfig, args, extra=JUDGE_FLAGS)


def _pair_from_args(args: argparse.Namespace) -> PreferencePair:
    if args.response_1 is None or args.response_2 is None:
        raise InputError("give --response-1 and --response-2 (or --input FILE.jsonl)")
    for name in ("query", "messages", "response_1", "response_2"):
        _check_text(getattr(args, name) or "", where=f"--{name.replace('_', '-')}")
    if args.messages is not None:
        try:
            messages = json.loads(args.messages)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"--messages is not valid JSON ({getattr(exc, 'msg', 'nested too deeply')}): "
                             "pass a list of {role, content} objects") from exc
        return PreferencePair.from_dict({"messages": messages, "response_1": args.response_1,
                                         "response_2": args.response_2, "label": args.label})
    if args.query is None:
        raise InputError("give --query (or --messages) with the two responses")
    return PreferencePair.from_query(args.query, args.response_1, args.response_2, label=args.label)


def _check_text(text: str, *, where: str) -> None:
    """Refuse text a model cannot read: a lone surrogate (a JSON escape like \\ud800, or undecodable argv bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{where}: holds {text[exc.start]!r}, a lone surrogate that is not a character: "
                         "fix the text (an unpaired \\uD800-\\uDFFF escape, or bytes that are not UTF-8)") from None


def read_pairs(path: Path) -> list[PreferencePair]:
    """Every pair of a JSONL file, validated up front: a bad line aborts before anything is judged.

    Read through `reflectrm.inputs.byte_lines`: a FIFO or device is refused at once, and no line or file is
    read past its bound.
    """
    if path.is_dir():
        raise InputError(f"input file {str(path)!r} is a folder: check the path")
    pairs, seen = [], set()
    for lineno, raw in byte_lines(path):
        if lineno == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # the byte-order mark Notepad and Excel write
        pair = _pair_from_line(raw, where=f"{path}:{lineno}")
        if pair is None:
            continue
        if pair.id in seen:
            raise InputError(f"{path}:{lineno}: duplicate id {pair.id!r}: give every pair a unique id")
        seen.add(pair.id)
        pairs.append(pair)
    if not pairs:
        raise InputError(f"{path} holds no pairs: add JSONL lines with query, response_1 and response_2")
    return pairs


def _pair_from_line(raw: bytes, *, where: str) -> PreferencePair | None:
    """The pair on one JSONL line (None for a blank line); every way it can be wrong is an `InputError`."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}): "
                         "save the file as UTF-8") from None
    if not line.strip():
        return None
    obj = loads(line, where=where)
    try:
        pair = PreferencePair.from_dict(obj)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from exc
    for message in pair.conversation:
        _check_text(message.content, where=where)
    _check_text(pair.response_1 + pair.response_2, where=where)
    return pair


# --- the output file: appended to only once it is proven to be this command's own ----------------------

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


def _open_output(plan: OutputPlan) -> BinaryIO:
    """The output file opened for appending; a torn last line is cut now, when new work is ready to write."""
    out = plan.path.open("r+b" if plan.path.exists() else "wb")
    out.truncate(plan.keep)
    out.seek(plan.keep)
    if plan.newline:
        out.write(b"\n")
    return out


def _drop_if_empty(path: Path) -> None:
    """Remove an output file this run created and wrote nothing to (a 0-byte file would read as a judged run)."""
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()


def _json_line(obj: dict[str, Any]) -> bytes:
    text = json.dumps(obj, ensure_ascii=False)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a stored pair: \\u-escape it, still valid UTF-8 JSON
        return (json.dumps(obj, ensure_ascii=True) + "\n").encode("ascii")


def cmd_judge(args: argparse.Namespace) -> int:
    from reflectrm.backends import load_backend

    config = config_from_args(args)
    engine = backend_options(args)  # checked here: a bad flag fails before anything loads
    if args.input is None and args.output is not None:
        raise InputError("--output needs --input FILE.jsonl")
    if args.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {args.batch_size}")
    pairs = read_pairs(args.input) if args.input else [_pair_from_args(args)]
    plan = None
    if args.input is not None:  # every precondition before the model loads: it takes minutes on a real judge
        out_path = args.output or args.input.with_suffix(".judgments.jsonl")
        plan = check_output(out_path, input_path=args.input, config=config, swap=args.swap)
    with contextlib.ExitStack() as stack:
        store = None
        if getattr(args, "db", None) is not None:  # `--db ""` is an error (the store says so), not "no store"
            store = stack.enter_context(args.open_store(args.db))
            store.check_writable()
        backend = load_backend(args.model, backend=args.backend, device=args.device, **engine)
        if plan is None:
            return _judge_one(args, pairs[0], backend, config, store)
        return _judge_file(args, pairs, plan, backend, config, store)


def _judge_one(args: argparse.Namespace, pair: PreferencePair, backend: Any, config: JudgeConfig, store: Any) -> int:
    from reflectrm.pipeline import judge_many, orders_agree
    from reflectrm.render import render_judgment

    judgments = list(judge_many([pair, pair.swapped()] if args.swap else [pair], backend, config))
    ids = store.record(judgments, swapped=args.swap) if store else None
    agree = orders_agree(*judgments) if args.swap else None
    if args.json:
        payload: dict[str, Any] = judgments[0].to_dict()
        if args.swap:
            payload["swapped"] = judgments[1].to_dict()
            payload["orders_agree"] = agree
        if ids:
            payload["stored_ids"] = ids
        print(json.dumps(payload, ensure_ascii=False))
        return 0
    print(render_judgment(judgments[0]))
    if args.swap:
        print("\n=== Swapped order ===\n")
        print(render_judgment(judgments[1]))
        print(f"\nBoth orders: {'consistent' if agree else 'FLIPPED' if agree is False else 'undecided (abstained)'}")
    if ids:
        print(f"Stored as judgment {', '.join(f'#{i}' for i in ids)} in {args.db}")
    return 0


def _judge_file(args: argparse.Namespace, pairs: list[PreferencePair], plan: OutputPlan, backend: Any,
                config: JudgeConfig, store: Any) -> int:
    from tqdm import tqdm

    from reflectrm.pipeline import judge_many, orders_agree

    todo = [p for p in pairs if p.id not in plan.done]
    expanded = [q for p in todo for q in ((p, p.swapped()) if args.swap else (p,))]
    per_pair = 2 if args.swap else 1
    judged = judge_many(expanded, backend, config, batch_size=args.batch_size * per_pair)
    first = next(judged, None)  # the first judgment is in hand before the file is touched
    with contextlib.ExitStack() as stack:
        if first is not None and not plan.path.exists():  # a run that fails before its first line leaves no file
            stack.callback(_drop_if_empty, plan.path)
        out = stack.enter_context(_open_output(plan)) if first is not None else None
        bar = stack.enter_context(tqdm(total=len(pairs), initial=len(pairs) - len(todo), unit="pair",
                                       file=sys.stderr, disable=None))
        buffer: list[Any] = []
        for j in itertools.chain([first] if first is not None else [], judged):
            buffer.append(j)
            if len(buffer) < per_pair:
                continue
            line = {"id": buffer[0].pair.id, **buffer[0].to_dict()}
            if args.swap:
                line["swapped"] = buffer[1].to_dict()
                line["orders_agree"] = orders_agree(*buffer)
            if store:  # idempotent: a rerun after a crash between these two writes finds the stored rows
                store.record(buffer, swapped=args.swap, idempotent=True)
            assert out is not None  # opened with the first judgment
            out.write(_json_line(line))  # one write per line: never half a pair
            out.flush()
            buffer = []
            bar.update(1)
    print(f"judged {len(todo)} pair(s), skipped {len(pairs) - len(todo)} already in {plan.path}", file=sys.stderr)
    return 0
