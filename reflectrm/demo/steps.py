"""A multi-step demo domain in which checking one step is easier than getting every step right.

Each pair asks a running sum of two or three steps ("What is 26 + 8 - 5 + 7?"); one response
states the right result, the other the result of a chain that slipped at one step. Analyses write
every intermediate result, then check each response's answer by subtraction (0 means right):

    26 + 8 = 34. 34 - 5 = 29. 29 + 7 = 36. Response 1: 36 - 36 = 0, right. Response 2: 37 - 36 = 1, wrong.

A sampled analysis that slips at any of its k steps ends wrong (right with roughly p^k). A reflection
between two critiques only has to find the FIRST equation where they differ and check that one,
and it checks it by the inverse operation, a different arithmetic fact from the one the critiques
used (a judge that misremembers 34 - 5 has no reason to misremember 29 + 5):

    Critique 1 step 2: 34 - 5 = 29. Critique 2 step 2: 34 - 5 = 28. 29 + 5 = 34, 34 - 34 = 0, Critique 1 is right.

A difference of 0 means Critique 1's value is right; anything else, Critique 2's. Every judgment is
exactly verifiable. Pure standard library.

Kinds (the pair's `subset`): ``steps2`` and ``steps3``, starts 10..49, operands 2..9, values kept in 1..99.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from reflectrm.core.prompts import Task, format_output
from reflectrm.core.types import PreferencePair

KINDS = ("steps2", "steps3")
QUESTION_FORMS = ("What is {e}?", "Compute {e}.", "Calculate {e}.", "{e} = ?")
ANSWER_FORMS = ("The answer is {v}.", "{v}", "It is {v}.", "It equals {v}.", "The result is {v}.")
MAX_VALUE = 99


@dataclass(frozen=True, slots=True)
class Chain:
    """A running sum: `start`, then each (op, operand) of `ops` in turn."""

    start: int
    ops: tuple[tuple[str, int], ...]

    @property
    def kind(self) -> str:
        return f"steps{len(self.ops)}"

    @property
    def expression(self) -> str:
        return " ".join([str(self.start), *(f"{op} {b}" for op, b in self.ops)])

    @property
    def answer(self) -> int:
        return steps_of(self)[-1].z


@dataclass(frozen=True, slots=True)
class Eq:
    """One written equation of an analysis: `x op y = z`, labelled "step 2" or "Response 1"."""

    label: str
    x: int
    op: str
    y: int
    z: int

    @property
    def text(self) -> str:
        return f"{self.x} {self.op} {self.y} = {self.z}"

    @property
    def right(self) -> bool:
        return self.z == apply(self.x, self.op, self.y)

    @property
    def lhs(self) -> tuple[int, str, int]:
        return (self.x, self.op, self.y)


def apply(x: int, op: str, y: int) -> int:
    return x + y if op == "+" else x - y


def make_chain(rng: random.Random, k: int) -> Chain:
    value, ops = rng.randint(10, 49), []
    start = value
    for _ in range(k):
        b = rng.randint(2, 9)
        op = rng.choice("+-")
        if op == "-" and value - b < 1:
            op = "+"
        if op == "+" and value + b > MAX_VALUE:
            op = "-"
        value = apply(value, op, b)
        ops.append((op, b))
    return Chain(start, tuple(ops))


def steps_of(chain: Chain, slips: dict[int, int] | None = None) -> list[Eq]:
    """The chain's step equations; `slips` maps a step index (0-based) to the wrong result written
    there, later steps then continue rightly from it (a slip propagates)."""
    slips = slips or {}
    value, out = chain.start, []
    for i, (op, b) in enumerate(chain.ops):
        z = slips.get(i, apply(value, op, b))
        out.append(Eq(f"step {i + 1}", value, op, b, z))
        value = z
    return out


def slipped(rng: random.Random, right: int) -> int:
    """A plausible wrong result: off by one or two, off by ten, or a dropped/added carry."""
    for _ in range(20):
        w = right + rng.choice((-1, 1, -2, 2, -10, 10))
        if w != right and 0 <= w <= MAX_VALUE + 10:
            return w
    return right + 1


def checks(computed: int, stated: tuple[int | None, int | None], wrong_diff: dict[int, int] | None = None) -> list[Eq]:
    """Each response's check `stated - computed = d`; `wrong_diff` maps a response index (0/1) to a
    wrongly computed difference."""
    wrong_diff = wrong_diff or {}
    out = []
    for r, v in enumerate(stated):
        if v is None:
            continue
        out.append(Eq(f"Response {r + 1}", v, "-", computed, wrong_diff.get(r, v - computed)))
    return out


def analysis_text(steps: list[Eq], check_eqs: list[Eq]) -> str:
    parts = [f"{e.text}." for e in steps]
    parts += [f"{c.label}: {c.text}, {'right' if c.z == 0 else 'wrong'}." for c in check_eqs]
    return " ".join(parts)


def verdict_of(check_eqs: list[Eq]) -> int:
    """Response 2 when only its check is 0, else Response 1 (the current demo's rule)."""
    zero = {c.label for c in check_eqs if c.z == 0}
    return 2 if zero == {"Response 2"} else 1


_NUMBER = re.compile(r"-?\d+")
_EXPR = re.compile(r"(\d+)((?:\s*[-+]\s*\d+){2,3})")
_OP = re.compile(r"([-+])\s*(\d+)")


def chain_in(text: str) -> Chain | None:
    m = _EXPR.search(text)
    if not m:
        return None
    return Chain(int(m.group(1)), tuple((op, int(b)) for op, b in _OP.findall(m.group(2))))


def chain_of(pair: PreferencePair) -> Chain:
    c = chain_in(pair.query)
    if c is None:
        raise ValueError(f"not a demo running-sum query: {pair.query!r}")
    return c


def stated_value(response: str) -> int | None:
    numbers = [int(x) for x in _NUMBER.findall(response)]
    return numbers[-1] if numbers else None


def stated(pair: PreferencePair) -> tuple[int | None, int | None]:
    return stated_value(pair.response_1), stated_value(pair.response_2)


def make_pair(rng: random.Random, *, kind: str, index: int = 0, source: str = "demo-steps") -> PreferencePair:
    """One labelled pair: the right result against a chain that slipped at one step, random order."""
    chain = make_chain(rng, int(kind[-1]))
    right = chain.answer
    at = rng.randrange(len(chain.ops))
    wrong = steps_of(chain, {at: slipped(rng, steps_of(chain)[at].z)})[-1].z
    if wrong == right:
        wrong = slipped(rng, right)
    r_right, r_wrong = rng.choice(ANSWER_FORMS).format(v=right), rng.choice(ANSWER_FORMS).format(v=wrong)
    label = rng.choice((1, 2))
    r1, r2 = (r_right, r_wrong) if label == 1 else (r_wrong, r_right)
    query = rng.choice(QUESTION_FORMS).format(e=chain.expression)
    return PreferencePair.from_query(query, r1, r2, label=label, id=f"{source}:{index}", source=source, subset=kind)


def make_pairs(n: int, *, seed: int, kinds: tuple[str, ...] = KINDS, source: str = "demo-steps") -> list[PreferencePair]:
    rng = random.Random(seed)
    return [make_pair(rng, kind=kinds[i % len(kinds)], index=i, source=source) for i in range(n)]


@dataclass(frozen=True, slots=True)
class Analysis:
    """An analysis as equations: what the target text says, and its verdict."""

    steps: tuple[Eq, ...]
    checks: tuple[Eq, ...]

    @property
    def eqs(self) -> tuple[Eq, ...]:
        return self.steps + self.checks

    @property
    def text(self) -> str:
        return analysis_text(list(self.steps), list(self.checks))

    @property
    def verdict(self) -> int:
        return verdict_of(list(self.checks))


def analysis(pair: PreferencePair, *, slips: dict[int, int] | None = None,
             wrong_diff: dict[int, int] | None = None) -> Analysis:
    """The analysis a judge writes with the given slips (none: the right analysis)."""
    steps = steps_of(chain_of(pair), slips)
    return Analysis(tuple(steps), tuple(checks(steps[-1].z, stated(pair), wrong_diff)))


def response_example(pair: PreferencePair) -> str:
    a = analysis(pair)
    return format_output(a.text, a.verdict, task=Task.RESPONSE)


def first_difference(a: Analysis, b: Analysis) -> int | None:
    """Index of the first equation where two analyses differ, or None if they agree throughout."""
    for i, (x, y) in enumerate(zip(a.eqs, b.eqs)):
        if x != y:
            return i
    return None if len(a.eqs) == len(b.eqs) else min(len(a.eqs), len(b.eqs))


def inverse_check(e: Eq) -> tuple[str, int]:
    """Check `x op y = z` by the inverse operation: (text, difference); 0 means z is right."""
    back = e.z - e.y if e.op == "+" else e.z + e.y
    inv_op = "-" if e.op == "+" else "+"
    diff = back - e.x
    return f"{e.z} {inv_op} {e.y} = {back}, {back} - {e.x} = {diff}", diff


def reflection_analysis(c1: Analysis, c2: Analysis, *, tie_choice: int) -> tuple[str, int]:
    """The reflection comparing two critiques: the first equation where they differ, Critique 1's
    value checked by the inverse operation. Critiques that agree throughout get `tie_choice`."""
    i = first_difference(c1, c2)
    if i is None or i >= min(len(c1.eqs), len(c2.eqs)):
        return f"The critiques agree, Critique {tie_choice} is right.", tie_choice
    e1, e2 = c1.eqs[i], c2.eqs[i]
    check, diff = inverse_check(e1)
    choice = 1 if diff == 0 else 2
    return (f"Critique 1 {e1.label}: {e1.text}. Critique 2 {e2.label}: {e2.text}. "
            f"{check}, Critique {choice} is right."), choice


def wrong_analysis(rng: random.Random, pair: PreferencePair, how: str) -> tuple[Analysis, str]:
    """An analysis with one slip ("step": a wrong step result, propagated; "check": a wrong
    difference), and the label of the equation where it slipped (its kind of disagreement)."""
    if how == "step":
        chain = chain_of(pair)
        at = rng.randrange(len(chain.ops))
        return analysis(pair, slips={at: slipped(rng, steps_of(chain)[at].z)}), f"step {at + 1}"
    r = rng.randrange(2)
    right = analysis(pair).checks[r].z
    return analysis(pair, wrong_diff={r: right + rng.choice((-1, 1, -2, 2, -10, 10))}), f"Response {r + 1}"


@dataclass
class Balance:
    """Places the right critique first and second equally often per kind of disagreement."""

    counts: Counter

    def __init__(self) -> None:
        self.counts = Counter()

    def right_first(self, kind: str) -> bool:
        n = self.counts[kind]
        self.counts[kind] += 1
        return n % 2 == 0


def reflection_example(rng: random.Random, pair: PreferencePair, balance: Balance,
                       *, agree_frac: float = 0.2) -> tuple[str, str, str, str]:
    """(critique 1, critique 2, target output, kind): a right and a wrong analysis (or two that agree),
    the right one first or second by `balance` per kind."""
    right = analysis(pair)
    if rng.random() < agree_frac:
        kind = "agree"
        first = balance.right_first(kind)
        text, choice = reflection_analysis(right, right, tie_choice=1 if first else 2)
        return right.text, right.text, format_output(text, choice, task=Task.ANALYSIS), kind
    wrong, kind = wrong_analysis(rng, pair, "step" if rng.random() < 0.8 else "check")
    c1, c2 = (right, wrong) if balance.right_first(kind) else (wrong, right)
    text, choice = reflection_analysis(c1, c2, tie_choice=1)
    return c1.text, c2.text, format_output(text, choice, task=Task.ANALYSIS), kind


def iter_training_texts(seed: int) -> Iterator[str]:
    rng, balance = random.Random(seed), Balance()
    for i in range(2000):
        pair = make_pair(rng, kind=KINDS[i % 2], index=i)
        yield pair.query
        yield response_example(pair)
        yield "\n".join(reflection_example(rng, pair, balance)[:3])
