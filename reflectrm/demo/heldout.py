"""What a demo judge's build trained on, and so which pairs are held out from it.

A running-sum judge's card records each training stage's arguments (pairs, seed, ranges, misread and
carry-drop shares). `lessons` draws a stage's training stream from them exactly as the build drew it
(every random draw in the same order), so `trained_problems` knows every problem the judge was taught
and `heldout_pairs` leaves them out. The build tool (beside the research, not installed) renders the
same lessons into token sequences; a benchmark only needs their pairs. Pure standard library.

Replaying a five-stage build is seconds of pure Python, so a build also writes what it trained on beside its card
(`TRAINED_FILE`, under the sha256 of the streams it came from, `streams_key`): `trained_problems` reads that file
when its key is the card's and replays otherwise (a judge built elsewhere, a file from another build). The shipped
judge's folder holds one; a test checks it against a fresh replay.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import random
import re
from pathlib import Path
from typing import Any, NamedTuple

import reflectrm.defaults
from reflectrm.core.prompts import Task, format_output, reflection_prompt, response_prompt
from reflectrm.core.types import ChatMessage, PreferencePair
from reflectrm.demo.steps import (
    DEFAULT_RANGES,
    KINDS,
    Chain,
    RANGES,
    Balance,
    Ranges,
    analysis,
    careless_slips,
    chain_of,
    make_pair,
    make_pairs,
    mistaken,
    reflection_examples,
)
from reflectrm.errors import InputError

TRAIN_SEED = 1234
"""The training stream's seed when a card records none."""
EVAL_SEED = 98765
"""Held-out pairs come from this generator stream (a build trains on another)."""
SOURCE = "demo-steps-train"
MAX_HELDOUT_PAIRS = 100_000
"""Held-out pairs are drawn from a stream 4x as long; far above what a CPU judges in a day."""
TRAINED_FILE = "trained_problems.txt.gz"
"""Beside a judge's card: the problems its build trained on, one a line ("12 +7 -8 +5 +9"), sorted, after a header
line naming `TRAINED_FORMAT` and the `streams_key` of the card they were replayed from."""
TRAINED_FORMAT = "reflectrm-demo-trained-problems-v1"

log = logging.getLogger(__name__)


class Lesson(NamedTuple):
    """One training example before rendering: the chat prompt, the target, and the target's character spans
    left out of the loss (a taught mistake)."""

    messages: tuple[ChatMessage, ...]
    target: str
    untaught: tuple[tuple[int, int], ...] = ()


def lessons(n_pairs: int, *, seed: int, refl_every: int = 1, mistake_frac: float = 0.25,
            misread_frac: float = 0.5, ranges: Ranges = DEFAULT_RANGES, carry_drop: float = 0.0,
            both_orders: bool = False) -> tuple[list[Lesson], list[PreferencePair]]:
    """(lessons, pairs): every pair a preference lesson, every `refl_every`-th also a reflection.

    A `mistake_frac` of the preference lessons slip at one step, the slipped result left out of the
    loss (later steps and the checks follow it rightly; a `misread_frac` of them misread a step, as a
    `misread_frac` of the reflections' wrong critiques do): the judge learns to check the responses
    against what it computed, not that exactly one answer is right.

    A `carry_drop` makes the taught judge careless: its other preference lessons drop the carry at
    each blind spot (`steps.blind_spot`: adding 8 or 9 across a ten) with that probability, taught as
    written, while every reflection checks rightly. The judge learns a habit that a greedy decode
    repeats and a sample sometimes escapes: what the reflection's check of one step can find. (Its
    reflections draw careless critiques, so the pairs drawn depend on it.) `both_orders` also shows
    each reflection with its critiques exchanged; the pairs drawn do not depend on it."""
    rng, balance = random.Random(seed), Balance()
    careless = random.Random(seed + 1)
    out: list[Lesson] = []
    pairs: list[PreferencePair] = []
    for i in range(n_pairs):
        pair = make_pair(rng, kind=KINDS[i % len(KINDS)], index=i, source=SOURCE, ranges=ranges)
        pairs.append(pair)
        prompt = tuple(response_prompt(pair))
        if rng.random() < mistake_frac:
            at = rng.randrange(len(chain_of(pair).ops))
            a, misread_step = mistaken(rng, pair, at, misread_frac=misread_frac, ranges=ranges)
            target = format_output(a.text, a.verdict, task=Task.RESPONSE)
            # the mistake is left out of the loss (a misread step's quote, a slip's result); the rest follows it
            untaught = _quote_spans(target, at) if misread_step else (_result_span(target, at),)
            out.append(Lesson(prompt, target, untaught))
        else:
            a = analysis(pair, slips=careless_slips(careless, chain_of(pair), carry_drop) if carry_drop else None)
            out.append(Lesson(prompt, format_output(a.text, a.verdict, task=Task.RESPONSE)))
        if i % refl_every == 0:
            shown = reflection_examples(rng, pair, balance, misread_frac=misread_frac, ranges=ranges,
                                        carry_drop=carry_drop, both_orders=both_orders)
            out.extend(Lesson(tuple(reflection_prompt(pair, c1, c2)), target) for c1, c2, target, _ in shown)
    return out, pairs


def _quote_spans(target: str, step: int) -> tuple[tuple[int, int], ...]:
    """Character spans of step `step`'s quoted operation and operand (its equation, which follows the
    quote, stays taught)."""
    m = list(re.finditer(r"Step \d+: (add|subtract) (\d+),", target))[step]
    return m.span(1), m.span(2)


def _result_span(target: str, step: int) -> tuple[int, int]:
    """Character span of step `step`'s result in a response target."""
    m = list(re.finditer(r"= (-?\d+)\.", target))[step]
    return m.span(1)


def ranges_of(card: dict[str, Any]) -> Ranges:
    """The ranges a build stage's problems used (a card from before ranges were recorded: narrow)."""
    name = (card.get("build_args") or {}).get("ranges", "narrow")
    if name not in RANGES:
        raise InputError(f"demo card names ranges {name!r}; known: {', '.join(RANGES)}")
    return RANGES[name]


def _streams(card: dict[str, Any]) -> list[dict[str, Any]]:
    """What each training stage of the card's build drew its lessons from (last stage first): the pairs, seed,
    misread share, ranges and carry drop `lessons` takes. A judge built with --init has a prior stage."""
    out = []
    stage = card
    while stage:
        args = stage.get("build_args") or {}
        out.append({"pairs": int(args.get("pairs", 16000)), "seed": int(args.get("seed", TRAIN_SEED)),
                    "misread_frac": float(args.get("misread_frac", 0.0)), "ranges": ranges_of(stage).name,
                    "carry_drop": float(args.get("carry_drop", 0.0))})
        stage = args.get("prior") or stage.get("prior")
    return out


def streams_key(card: dict[str, Any]) -> str:
    """The sha256 of the training streams a card records (`_streams`): two cards with the same key trained on
    the same problems, whatever else they say (their evaluation figures, their folders)."""
    return hashlib.sha256(json.dumps(_streams(card), sort_keys=True).encode()).hexdigest()


def replay_trained_problems(card: dict[str, Any]) -> set[Chain]:
    """The problems every training stage of the card's build asked, found by drawing each stage's lessons again."""
    seen: set[Chain] = set()
    for s in _streams(card):
        _, pairs = lessons(s["pairs"], seed=s["seed"], misread_frac=s["misread_frac"], ranges=RANGES[s["ranges"]],
                           carry_drop=s["carry_drop"])
        seen |= {chain_of(p) for p in pairs}
    return seen


def trained_problems(card: dict[str, Any], *, folder: str | Path | None = None) -> set[Chain]:
    """The problems (chains) every training stage of the judge with this demo card asked, in any
    wording: what a held-out set must leave out. Read from `folder`'s `TRAINED_FILE` (default: the demo
    judge's folder) when it was written for the same streams, else replayed (`replay_trained_problems`)."""
    key = streams_key(card)
    if folder is None:
        folder = reflectrm.defaults.DEMO_MODEL_DIR  # looked up now: a test may point it elsewhere
    recorded = _read_trained(Path(folder) / TRAINED_FILE, key)
    return recorded if recorded is not None else replay_trained_problems(card)


def _line(chain: Chain) -> str:
    return " ".join([str(chain.start), *(f"{op}{b}" for op, b in chain.ops)])


def _chain(line: str) -> Chain:
    start, *ops = line.split(" ")
    if not ops or any(o[:1] not in ("+", "-") for o in ops):
        raise ValueError("not a running sum")
    return Chain(int(start), tuple((o[0], int(o[1:])) for o in ops))


def _read_trained(path: Path, key: str) -> set[Chain] | None:
    """The problems recorded at `path` for streams `key`; None when there is no such file, it was written for
    other streams, or it cannot be read (then the caller replays: slower, never wrong)."""
    try:
        with gzip.open(path, "rt", encoding="ascii") as f:
            if f.readline().split() != [TRAINED_FORMAT, key]:
                return None
            return {_chain(line) for line in f.read().splitlines()}
    except FileNotFoundError:
        return None
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as e:
        log.warning("%s cannot be read (%s): replaying the build's lessons instead", path, type(e).__name__)
        return None


def write_trained_problems(card: dict[str, Any], folder: str | Path) -> Path:
    """Write `TRAINED_FILE` for the judge with this card into `folder` (a build does, beside the card): the
    replayed problems, sorted, under the card's `streams_key`; whole or not at all. The same card gives the
    same bytes."""
    lines = sorted(_line(c) for c in replay_trained_problems(card))
    path = Path(folder) / TRAINED_FILE
    part = path.with_name(path.name + ".part")
    text = "\n".join([f"{TRAINED_FORMAT} {streams_key(card)}", *lines]) + "\n"
    try:
        with open(part, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
            f.write(text.encode("ascii"))
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return path


def heldout_pairs(card: dict[str, Any], n: int, *, seed: int, source: str) -> list[PreferencePair]:
    """The first `n` pairs of the seed's stream whose chain none of the build's training pairs asks
    (ids stay stream positions). Fewer than `n` among 4n is an `InputError` (it cannot happen with
    today's domain: about 10^7 chains, 16,000 trained)."""
    seen = trained_problems(card)
    pool = make_pairs(4 * n, seed=seed, source=source, ranges=ranges_of(card))
    pairs = [p for p in pool if chain_of(p) not in seen][:n]
    if len(pairs) < n:
        raise InputError(f"only {len(pairs)} of {4 * n} demo pairs ask problems the build did not train on: "
                         "ask for fewer")
    return pairs
