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
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm_app.commands.options import (add_backend_flags, add_batch_flag, add_judge_flags, add_store_flag,
                                            backend_configs, config_from_args, load_judge)
from reflectrm.files import outputs
from reflectrm.backends.config import BackendConfig
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import PreferencePair
from reflectrm.display import printable
from reflectrm.errors import InputError
from reflectrm.files.readers import read_pairs
from reflectrm.files.inputs import check_text, unique_keys
from reflectrm.files.locks import exclusive


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
