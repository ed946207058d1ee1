"""`reflectrm judge`: the judging command, a thin shell over the library.

The full `reflectrm` command (judge, store, app, training) is assembled in `app.cli`, the outer
shell, so that this library never imports the store or the app.

    reflectrm judge --query Q --response-1 A --response-2 B [--json] [--swap]
    reflectrm judge --input pairs.jsonl --output judgments.jsonl [--strategy S] [--n N] [--seed K]

Bad input gets one line on stderr naming the problem and the fix, and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reflectrm.core.config import JudgeConfig
from reflectrm.core.strategies import STRATEGIES
from reflectrm.core.types import PreferencePair
from reflectrm.errors import InputError


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
    p.add_argument("--backend", default="transformers", help="generation backend (default transformers)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    p.add_argument("--strategy", default="reflectrm", choices=sorted(STRATEGIES), help="aggregation strategy")
    p.add_argument("--n", type=int, default=8, help="stage-1 samples N (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed: same seed, same judgment (default 0)")
    p.add_argument("--max-new-tokens", type=int, default=1024, help="per sampled analysis (default 1024)")
    p.add_argument("--reflection-temperature", type=float, default=0.0, help="stage-2 decoding; 0 = greedy")
    p.add_argument("--include-verdict", action="store_true", help="show each critique's verdict in reflection prompts")
    p.add_argument("--skip-unanimous", action="store_true", help="skip stage 2 when all samples agree")
    p.add_argument("--swap", action="store_true", help="judge both orders and report whether they agree")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the anatomy")
    if open_store is not None:
        p.add_argument("--db", help="also store judgments in this database URL (see `reflectrm db`)")
    add_engine_flags(p)
    p.set_defaults(func=cmd_judge, open_store=open_store)


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """The `--backend vllm|openai` options, derived from `EngineConfig` (its defaults and comments)."""
    import re
    import typing
    from dataclasses import fields

    from reflectrm.backends.engine import EngineConfig

    hints = typing.get_type_hints(EngineConfig)
    source = inspect.getsource(EngineConfig)
    group = p.add_argument_group("engines (--backend vllm or openai)")
    for f in fields(EngineConfig):
        found = re.search(rf"^\s+{f.name}: .*?#\s*(.+)$", source, re.M)
        doc = (found.group(1) if found else f.name).replace("%", "%%") + f" (default {f.default!r})"
        if f.name == "base_urls":
            group.add_argument("--base-url", dest="base_urls", action="append", metavar="URL",
                               help=doc + "; repeatable")
        elif hints[f.name] is bool:
            group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, action="store_true", default=None,
                               help=doc)
        else:
            kind = next(t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None))
            group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=kind, help=doc)


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The engine flags given, as `EngineConfig` fields for `load_backend` ({} unless --backend vllm/openai)."""
    from dataclasses import fields

    from reflectrm.backends.engine import ENGINE_BACKENDS, EngineConfig

    if getattr(args, "backend", None) not in ENGINE_BACKENDS:
        return {}
    given = {f.name: getattr(args, f.name) for f in fields(EngineConfig) if getattr(args, f.name, None) is not None}
    if "base_urls" in given:
        given["base_urls"] = tuple(given["base_urls"])
    EngineConfig(**given)  # validated now: a bad flag fails before anything loads
    return given


def config_from_args(args: argparse.Namespace) -> JudgeConfig:
    return JudgeConfig(
        strategy=args.strategy,
        n=args.n,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        reflection_max_new_tokens=args.max_new_tokens,
        reflection_temperature=args.reflection_temperature,
        critique_includes_verdict=args.include_verdict,
        skip_unanimous=args.skip_unanimous,
    )


def _pair_from_args(args: argparse.Namespace) -> PreferencePair:
    if args.response_1 is None or args.response_2 is None:
        raise InputError("give --response-1 and --response-2 (or --input FILE.jsonl)")
    if args.messages is not None:
        try:
            messages = json.loads(args.messages)
        except json.JSONDecodeError as exc:
            raise InputError(f"--messages is not valid JSON ({exc.msg}): pass a list of {{role, content}} objects") from exc
        return PreferencePair.from_dict({"messages": messages, "response_1": args.response_1,
                                         "response_2": args.response_2, "label": args.label})
    if args.query is None:
        raise InputError("give --query (or --messages) with the two responses")
    return PreferencePair.from_query(args.query, args.response_1, args.response_2, label=args.label)


def read_pairs(path: Path) -> list[PreferencePair]:
    """Every pair of a JSONL file, validated up front: a bad line aborts before anything is judged."""
    if not path.is_file():
        raise InputError(f"input file {str(path)!r} does not exist: check the path")
    pairs, seen = [], set()
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: not valid JSON ({exc.msg}): fix or remove the line") from exc
            try:
                pair = PreferencePair.from_dict(obj)
            except InputError as exc:
                raise InputError(f"{path}:{lineno}: {exc}") from exc
            if pair.id in seen:
                raise InputError(f"{path}:{lineno}: duplicate id {pair.id!r}: give every pair a unique id")
            seen.add(pair.id)
            pairs.append(pair)
    if not pairs:
        raise InputError(f"{path} holds no pairs: add JSONL lines with query, response_1 and response_2")
    return pairs


def done_ids(path: Path) -> set[str]:
    """Ids already judged in an output file; a torn last line (from a kill) is cut off."""
    if not path.exists():
        return set()
    raw = path.read_bytes()
    good_end = raw.rfind(b"\n") + 1
    if good_end != len(raw):  # a partial last line: drop it so the rerun redoes that pair
        with path.open("r+b") as fh:
            fh.truncate(good_end)
    ids = set()
    for lineno, line in enumerate(raw[:good_end].decode("utf-8").splitlines(), 1):
        if line.strip():
            try:
                ids.add(json.loads(line)["id"])
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise InputError(f"{path}:{lineno}: not a judgment line: pass a different --output") from exc
    return ids


def cmd_judge(args: argparse.Namespace) -> int:
    from reflectrm.backends import load_backend

    config = config_from_args(args)
    if args.input is None and args.output is not None:
        raise InputError("--output needs --input FILE.jsonl")
    pairs = read_pairs(args.input) if args.input else [_pair_from_args(args)]
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(args.open_store(args.db)) if getattr(args, "db", None) else None
        backend = load_backend(args.model, backend=args.backend, device=args.device, **engine_options(args))
        if args.input is None:
            return _judge_one(args, pairs[0], backend, config, store)
        return _judge_file(args, pairs, backend, config, store)


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


def _judge_file(args: argparse.Namespace, pairs: list[PreferencePair], backend: Any, config: JudgeConfig, store: Any) -> int:
    from tqdm import tqdm

    from reflectrm.pipeline import judge_many, orders_agree

    out_path: Path = args.output or args.input.with_suffix(".judgments.jsonl")
    done = done_ids(out_path)
    todo = [p for p in pairs if p.id not in done]
    expanded = [q for p in todo for q in ((p, p.swapped()) if args.swap else (p,))]
    per_pair = 2 if args.swap else 1
    with out_path.open("a", encoding="utf-8") as out, tqdm(total=len(pairs), initial=len(pairs) - len(todo),
                                                           unit="pair", file=sys.stderr, disable=None) as bar:
        buffer: list[Any] = []
        for j in judge_many(expanded, backend, config, batch_size=args.batch_size * per_pair):
            buffer.append(j)
            if len(buffer) < per_pair:
                continue
            line = {"id": buffer[0].pair.id, **buffer[0].to_dict()}
            if args.swap:
                line["swapped"] = buffer[1].to_dict()
                line["orders_agree"] = orders_agree(*buffer)
            if store:
                store.record(buffer, swapped=args.swap)
            out.write(json.dumps(line, ensure_ascii=False) + "\n")  # one write per line: never half a pair
            out.flush()
            buffer = []
            bar.update(1)
    print(f"judged {len(todo)} pair(s), skipped {len(pairs) - len(todo)} already in {out_path}", file=sys.stderr)
    return 0
