"""A multi-step demo domain in which checking one step is easier than getting every step right.

Each pair asks a running sum of four to six numbered steps ("Start with 7. Step 1: add 5. Step 2:
subtract 3. Step 3: add 8. Step 4: subtract 6. What is the result?"); one response states the
right result, the other the result of a chain that slipped at one step. An analysis writes every
step (numbered as the question numbers them, so each step's operand is found by its number),
then checks each response's number by subtracting its own result (0 means right):

    Step 1: add 5, 7 + 5 = 12. Step 2: subtract 3, 12 - 3 = 9. Step 3: add 8, 9 + 8 = 17.
    Step 4: subtract 6, 17 - 6 = 11. Response 1: 11 - 11 = 0, right. Response 2: 12 - 11 = 1, wrong.

Each step first quotes the question's step ("Step 3: add 8"): the words after the label are the
question's own, so a model copies them by matching the label (an induction), which a 4-layer model
learns; writing the operand straight into the equation left it to find "the third operand", which a
20-minute build never learned (its equations were right arithmetic on the wrong operands).

(A subtraction, not "Response 1 says 11, right": a tiny model learns whether two numbers are equal
as it learns the other arithmetic facts, never directly; the shipped arithmetic judge found it.)

A sampled analysis that slips at any of its k steps ends wrong (right with roughly p^k). A
reflection between two critiques walks their steps side by side until the first one where they
differ, and checks only that step, by the inverse operation: a different arithmetic fact from
the one the critiques used (a judge that misremembers 9 + 8 has no reason to misremember 17 - 8):

    Step 1: add 5, 7 + 5 = 12; add 5, 7 + 5 = 12; 12 - 12 = 0. Step 2: subtract 3, 12 - 3 = 9;
    subtract 3, 12 - 3 = 9; 9 - 9 = 0. Step 3: add 8, 9 + 8 = 17; add 8, 9 + 8 = 16; 17 - 16 = 1.
    The question says add 8. Check 17 - 8 = 9, 9 - 9 = 0, Critique 1 is right.

(Each critique's step is copied as the critique wrote it, label first: a copy by matching the label.
The two values are then subtracted, and a difference other than 0 stops the walk: a build whose walk
had to see that two numbers differ stopped after the first step whatever they were.) The
question's step is read again there: a critique that misread it (the wrong operand or operation, worked
rightly, which an inverse check passes) loses at once ("The question says add 8, Critique 2 is right.").

A difference of 0 means Critique 1's value at that step is right; anything else, that it is wrong
and Critique 2 is chosen. Critiques that differ only in a response's check are decided by that
check worked afresh; critiques that agree throughout are a tie. Every judgment is exactly verifiable. Pure standard
library.

A *careless* judge (`careless_slips`, a build's `--carry-drop`) is taught analyses that drop the carry
when they add 8 or 9 across a ten (`27 + 8 = 25`) with a fixed probability, while its reflections
check rightly: a habit its greedy decode repeats and a sample sometimes escapes, and one the
reflection's check of the differing step catches (`Check 25 - 8 = 17, 17 - 27 = -10`). It models a
judge with a systematic blind spot, the case self-reflection is for; a careful judge learns every
narrow fact and leaves a reflection nothing to fix.

Kinds (the pair's `subset`): ``steps4``, ``steps5``, ``steps6``, in `RANGES` "narrow" (starts 5..30,
operands 2..9, every value kept in 1..40: about 550 addition and subtraction facts), "medium" (starts 5..50,
operands 2..14, values 1..60) or "wide" (starts
5..80, operands 2..19, values 1..99: about 2,900). A judge's card names its ranges; none means narrow.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

from reflectrm.core.prompts import Task, format_output
from reflectrm.core.types import PreferencePair

DOMAIN_KEY = "running-sums"
"""The key this domain is registered under (`reflectrm.demo.domains`); a running-sum judge's card names it."""

KINDS = ("steps4", "steps5", "steps6")
QUESTION_FORMS = ("Start with {s}. {steps} What is the result?", "A counter shows {s}. {steps} What does it show now?",
                  "Take {s}. {steps} What number do you get?", "You have {s} points. {steps} How many points now?")
ANSWER_FORMS = ("The answer is {v}.", "It is {v}.", "It equals {v}.", "The result is {v}.", "I get {v}.")
"""Every form puts a space before the number: " 18" and "18" are different tokens, and a check copies " 18"."""


@dataclass(frozen=True, slots=True)
class Ranges:
    """The numbers a running-sum problem uses: its start, each step's operand, every value it passes."""

    starts: tuple[int, int]
    operands: tuple[int, int]
    values: tuple[int, int]

    @property
    def name(self) -> str:
        return next((k for k, v in RANGES.items() if v == self), repr(self))


RANGES = {"narrow": Ranges((5, 30), (2, 9), (1, 40)), "medium": Ranges((5, 50), (2, 14), (1, 60)),
          "wide": Ranges((5, 80), (2, 19), (1, 99))}
"""narrow: about 550 addition and subtraction facts, which a 20-minute build learns all of (its greedy judge was
right on 48 of 48 probe pairs: nothing left for reflection to fix); medium: values 1..60, operands 2..14, for a
narrow judge continued a few hundred steps, part way through learning its new facts; wide: about 2,900."""
DEFAULT_RANGES = RANGES["narrow"]
SLIPS = (-1, 1, -2, 2, -10, 10)
CARRY_OPERANDS = (8, 9)
"""A careless judge's blind spot: it drops the carry when it adds one of these across a ten."""


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
        """The steps as the question lists them: "Step 1: add 5. Step 2: subtract 3." """
        return " ".join(f"Step {i}: {_WORD[op]} {b}." for i, (op, b) in enumerate(self.ops, 1))

    def question(self, form: str) -> str:
        return form.format(s=self.start, steps=self.expression)

    @property
    def answer(self) -> int:
        return steps_of(self)[-1].z


@dataclass(frozen=True, slots=True)
class Eq:
    """One step of an analysis: `x op y = z`, numbered from 1."""

    step: int
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
    def worked(self) -> str:
        """The step as an analysis writes it after its label: the question's step quoted, then the equation."""
        return f"{_WORD[self.op]} {self.y}, {self.text}"


@dataclass(frozen=True, slots=True)
class Check:
    """One response's check: `stated - computed = d`, right when d is 0 (`d` as written: it may be wrong)."""

    response: int
    stated: int
    computed: int
    d: int

    @property
    def right(self) -> bool:
        return self.d == 0

    @property
    def worked(self) -> bool:
        """Whether its difference is worked rightly (whatever the computed result it starts from)."""
        return self.d == self.stated - self.computed

    @property
    def text(self) -> str:
        return f"Response {self.response}: {self.stated} - {self.computed} = {self.d}, {'right' if self.right else 'wrong'}."


_WORD = {"+": "add", "-": "subtract"}


def apply(x: int, op: str, y: int) -> int:
    return x + y if op == "+" else x - y


def make_chain(rng: random.Random, k: int, ranges: Ranges = DEFAULT_RANGES) -> Chain:
    value = start = rng.randint(*ranges.starts)
    ops = []
    low, high = ranges.values
    for _ in range(k):
        b = rng.randint(*ranges.operands)
        op = rng.choice("+-")
        if op == "-" and value - b < low:
            op = "+"
        if op == "+" and value + b > high:
            op = "-"
        value = apply(value, op, b)
        ops.append((op, b))
    return Chain(start, tuple(ops))


def steps_of(chain: Chain, slips: dict[int, int] | None = None,
             misreads: dict[int, tuple[str, int]] | None = None) -> list[Eq]:
    """The chain's steps; `slips` maps a step index (0-based) to the wrong result written there,
    `misreads` to the (op, operand) read there instead of the question's (worked rightly). Later steps
    continue rightly from either (a mistake propagates)."""
    slips, misreads = slips or {}, misreads or {}
    value, out = chain.start, []
    for i, step in enumerate(chain.ops):
        op, b = misreads.get(i, step)
        z = slips.get(i, apply(value, op, b))
        out.append(Eq(i + 1, value, op, b, z))
        value = z
    return out


def blind_spot(x: int, op: str, y: int) -> bool:
    """Whether `x op y` is where a careless judge drops the carry: adding 8 or 9 across a ten (27 + 8)."""
    return op == "+" and y in CARRY_OPERANDS and x % 10 + y >= 10


def careless_slips(rng: random.Random, chain: Chain, drop: float) -> dict[int, int]:
    """The slips of a careless judge working `chain`: at each step that is a blind spot of the value it
    has reached, it drops the carry (writes a result 10 short) with probability `drop`; later steps
    continue from what it wrote. Step index -> written result, as `steps_of` takes them."""
    value, slips = chain.start, {}
    for i, (op, y) in enumerate(chain.ops):
        z = apply(value, op, y)
        if blind_spot(value, op, y) and rng.random() < drop:
            z -= 10
            slips[i] = z
        value = z
    return slips


def drops_a_carry(a: Analysis) -> bool:
    """Whether an analysis dropped a carry at a blind spot of its own values (the careless judge's habit)."""
    return any(blind_spot(e.x, e.op, e.y) and e.z == e.x + e.y - 10 for e in a.steps)


def step_right(e: Eq, chain: Chain) -> bool:
    """Whether a step reads the question's step (its op and operand) and works it rightly."""
    return 0 < e.step <= len(chain.ops) and (e.op, e.y) == chain.ops[e.step - 1] and e.right


def misread(rng: random.Random, chain: Chain, at: int, ranges: Ranges = DEFAULT_RANGES) -> tuple[str, int] | None:
    """A plausible misreading of step `at`: its operand off by one, another step's operand, or the
    other operation; None when every one leaves the running value outside 0..(the highest value) + 10."""
    op, b = chain.ops[at]
    value = steps_of(chain)[at].x
    options = {(op, b + d) for d in (-1, 1)} | {(op, y) for _, y in chain.ops} | {("-" if op == "+" else "+", b)}
    options = sorted(o for o in options if o != (op, b) and 1 <= o[1] <= ranges.operands[1] + 1
                     and 0 <= apply(value, *o) <= ranges.values[1] + 10)
    return rng.choice(options) if options else None


def slipped(rng: random.Random, right: int, ranges: Ranges = DEFAULT_RANGES) -> int:
    """A plausible wrong result: off by one or two, or off by ten (a dropped or added carry)."""
    for _ in range(20):
        w = right + rng.choice(SLIPS)
        if w != right and 0 <= w <= ranges.values[1] + 10:
            return w
    return right + 1


_NUMBER = re.compile(r"-?\d+")
_QUESTION = re.compile(r"(\d+)[^\d]*?((?:Step \d+: (?:add|subtract) \d+\.\s*){2,8})")
_OP = re.compile(r"Step (\d+): (add|subtract) (\d+)\.")


def chain_in(text: str) -> Chain | None:
    """The running sum a question asks (its start, then its numbered steps in order), or None."""
    m = _QUESTION.search(text)
    if not m:
        return None
    found = _OP.findall(m.group(2))
    if [int(i) for i, _, _ in found] != list(range(1, len(found) + 1)):
        return None
    return Chain(int(m.group(1)), tuple(("+" if op == "add" else "-", int(b)) for _, op, b in found))


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


def make_pair(rng: random.Random, *, kind: str, index: int = 0, source: str = "demo-steps",
              ranges: Ranges = DEFAULT_RANGES) -> PreferencePair:
    """One labelled pair: the right result against a chain that slipped at one step, random order."""
    chain = make_chain(rng, int(kind.removeprefix("steps")), ranges)
    return _pair_on(rng, chain, None, index=index, source=source, ranges=ranges)


def make_pairs(n: int, *, seed: int, kinds: tuple[str, ...] = KINDS, source: str = "demo-steps",
               ranges: Ranges = DEFAULT_RANGES) -> list[PreferencePair]:
    rng = random.Random(seed)
    return [make_pair(rng, kind=kinds[i % len(kinds)], index=i, source=source, ranges=ranges) for i in range(n)]


@dataclass(frozen=True, slots=True)
class Analysis:
    """An analysis as data: its steps and checks, its text and verdict."""

    steps: tuple[Eq, ...]
    checks: tuple[Check, ...]

    @property
    def result(self) -> int:
        return self.steps[-1].z

    @property
    def text(self) -> str:
        return " ".join([*(f"Step {e.step}: {e.worked}." for e in self.steps), *(c.text for c in self.checks)])

    @property
    def verdict(self) -> int:
        """Response 2 when only its check is 0, else Response 1."""
        rights = {c.response for c in self.checks if c.right}
        return 2 if rights == {2} else 1


def analysis(pair: PreferencePair, *, slips: dict[int, int] | None = None,
             wrong_diff: dict[int, int] | None = None, misreads: dict[int, tuple[str, int]] | None = None) -> Analysis:
    """The analysis a judge writes with the given mistakes (none: the right analysis): `slips` maps a
    step index to a wrong result, `misreads` to a wrongly read step, `wrong_diff` a response (1 or 2)
    to a wrongly worked difference."""
    steps = steps_of(chain_of(pair), slips, misreads)
    result, wrong_diff = steps[-1].z, wrong_diff or {}
    checks = tuple(Check(r + 1, v, result, wrong_diff.get(r + 1, v - result))
                   for r, v in enumerate(stated(pair)) if v is not None)
    return Analysis(tuple(steps), checks)


def response_example(pair: PreferencePair) -> str:
    a = analysis(pair)
    return format_output(a.text, a.verdict, task=Task.RESPONSE)


_STEP = re.compile(r"Step (\d+): (?:add|subtract) -?\d+, (-?\d+) ([-+]) (-?\d+) = (-?\d+)\.")
_WALKED = re.compile(r"; (-?\d+) - (-?\d+) = (-?\d+)\.")
_CHECK = re.compile(r"Response ([12]): (-?\d+) - (-?\d+) = (-?\d+), (?:right|wrong)\.")


def parse_analysis(text: str) -> Analysis | None:
    """An analysis read back from text (a sampled critique), or None when it is not in the format."""
    steps = tuple(Eq(int(s), int(x), op, int(y), int(z)) for s, x, op, y, z in _STEP.findall(text))
    checks = tuple(Check(int(r), int(v), int(c), int(d)) for r, v, c, d in _CHECK.findall(text))
    return Analysis(steps, checks) if steps else None


def first_difference(a: Analysis, b: Analysis) -> tuple[str, int] | None:
    """Where two analyses first differ: ("step", index) or ("check", index); None if they agree."""
    for i, (x, y) in enumerate(zip(a.steps, b.steps)):
        if x != y:
            return ("step", i)
    if len(a.steps) != len(b.steps):
        return ("step", min(len(a.steps), len(b.steps)))
    for i, (x, y) in enumerate(zip(a.checks, b.checks)):
        if x != y:
            return ("check", i)
    return None


def difference_kind(a: Analysis, b: Analysis, chain: Chain | None = None) -> str:
    """The kind of disagreement, for balancing: "step 3", "step 3 misread" (one critique read that
    step of `chain` wrongly), "Response 2" or "agree"."""
    at = first_difference(a, b)
    if at is None:
        return "agree"
    where, i = at
    if where == "check":
        return f"Response {a.checks[i].response}"
    misread_there = chain is not None and i < len(chain.ops) and any(
        (e.op, e.y) != chain.ops[i] for e in (*a.steps[i:i + 1], *b.steps[i:i + 1]))
    return f"step {i + 1} misread" if misread_there else f"step {i + 1}"


def inverse_check(e: Eq) -> tuple[str, bool]:
    """Check `x op y = z` by the inverse operation: (text, whether z is right)."""
    inv = "-" if e.op == "+" else "+"
    back = apply(e.z, inv, e.y)
    return f"Check {e.z} {inv} {e.y} = {back}, {back} - {e.x} = {back - e.x}", back == e.x


def walk_difference(e: Eq, f: Eq) -> str:
    """The two critiques' values at one step of a walk, subtracted: 0 walks on, anything else stops.
    (Whether two numbers are equal a tiny model never learns directly; a subtraction it learns as a fact.)"""
    return f"{e.z} - {f.z} = {e.z - f.z}"


def reflection_analysis(c1: Analysis, c2: Analysis, *, tie_choice: int, chain: Chain) -> tuple[str, int]:
    """The reflection comparing two critiques of `chain`: their steps side by side up to the first
    difference; there, the question's step read again (Critique 1 misread it: Critique 2), else
    Critique 1's value checked by the inverse operation. Critiques that agree get `tie_choice`."""
    at = first_difference(c1, c2)
    walked = c1.steps if at is None or at[0] == "check" else c1.steps[: at[1] + 1]
    parts = [f"Step {e.step}: {e.worked}; {f.worked}; {walk_difference(e, f)}." for e, f in zip(walked, c2.steps)]
    if at is None:
        choice = tie_choice
        parts.append(f"The critiques agree, Critique {choice} is right.")
    elif at[0] == "step":
        e = c1.steps[at[1]]
        asked = chain.ops[at[1]] if at[1] < len(chain.ops) else None
        says = f"The question says {_WORD[asked[0]]} {asked[1]}" if asked else "The question has no such step"
        if asked is None or (e.op, e.y) != asked:
            choice = 2
            parts.append(f"{says}, Critique {choice} is right.")
        else:
            text, ok = inverse_check(e)
            choice = 1 if ok else 2
            parts.append(f"{says}. {text}, Critique {choice} is right.")
    else:  # the steps agree, a check differs: work that check afresh
        k1 = c1.checks[at[1]]
        d = k1.stated - k1.computed
        choice = 1 if k1.d == d else 2
        parts.append(f"Response {k1.response}: {k1.stated} - {k1.computed} = {d}, Critique {choice} is right.")
    return " ".join(parts), choice


def wrong_analysis(rng: random.Random, pair: PreferencePair, *, not_at: int | None = None,
                   misread_frac: float = 0.5, ranges: Ranges = DEFAULT_RANGES) -> tuple[Analysis, int]:
    """An analysis with one mistake at one step (propagated), and that step's index: a `misread_frac`
    of them a misread step (the wrong operand or operation, worked rightly), the rest a slip (a wrong
    result): the two mistakes a sampled analysis makes."""
    chain = chain_of(pair)
    at = rng.choice([i for i in range(len(chain.ops)) if i != not_at])
    return mistaken(rng, pair, at, misread_frac=misread_frac, ranges=ranges)[0], at


def mistaken(rng: random.Random, pair: PreferencePair, at: int, *, misread_frac: float,
             ranges: Ranges = DEFAULT_RANGES) -> tuple[Analysis, bool]:
    """The analysis with one mistake at step `at`, and whether it is a misread: a `misread_frac` of them
    misread the step (when it has a plausible misreading), the rest slip there."""
    chain = chain_of(pair)
    if misread_frac and rng.random() < misread_frac and (read := misread(rng, chain, at, ranges)) is not None:
        return analysis(pair, misreads={at: read}), True
    return analysis(pair, slips={at: slipped(rng, steps_of(chain)[at].z, ranges)}), False


class Balance:
    """Places the critique chosen first and second equally often per kind of disagreement."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def chosen_first(self, kind: str) -> bool:
        n = self.counts[kind]
        self.counts[kind] += 1
        return n % 2 == 0


def careless_analysis(rng: random.Random, pair: PreferencePair, drop: float) -> Analysis | None:
    """A careless judge's analysis that dropped at least one carry (`careless_slips`, drawn again until
    it does, at most 20 times), or None when the problem has no blind spot on its right path."""
    chain = chain_of(pair)
    if not any(blind_spot(e.x, e.op, e.y) for e in steps_of(chain)):
        return None
    for _ in range(20):
        if slips := careless_slips(rng, chain, drop):
            return analysis(pair, slips=slips)
    return None


def reflection_example(rng: random.Random, pair: PreferencePair, balance: Balance, *,
                       misread_frac: float = 0.5, ranges: Ranges = DEFAULT_RANGES,
                       carry_drop: float = 0.0) -> tuple[str, str, str, str]:
    """(critique 1, critique 2, target output, kind of disagreement): the first of `reflection_examples`."""
    return reflection_examples(rng, pair, balance, misread_frac=misread_frac, ranges=ranges, carry_drop=carry_drop)[0]


def reflection_examples(rng: random.Random, pair: PreferencePair, balance: Balance, *,
                        misread_frac: float = 0.5, ranges: Ranges = DEFAULT_RANGES, carry_drop: float = 0.0,
                        both_orders: bool = False) -> list[tuple[str, str, str, str]]:
    """[(critique 1, critique 2, target output, kind of disagreement)], and with `both_orders` the same two
    critiques the other way round after it (critiques that agree: once). Showing a reflection in both orders
    teaches it to check the value at the first difference rather than copy whichever critique comes first; it
    draws nothing more from `rng`, so the pairs and critiques drawn are those of a build without it.

    Mix: 15 % critiques that agree, 60 % a right against a wrong analysis, 15 % two analyses that
    went wrong at different steps (the one right at the first difference is chosen), 10 % a right
    analysis against one that worked a response's check wrong. With a `carry_drop`, half the wrong
    analyses against a right one are a careless judge's (`careless_analysis`) where the problem has a
    blind spot. The chosen critique comes first or second by `balance`, per kind."""
    right, chain = analysis(pair), chain_of(pair)
    u = rng.random()
    if u < 0.15:
        first = balance.chosen_first("agree")
        text, choice = reflection_analysis(right, right, tie_choice=1 if first else 2, chain=chain)
        return [(right.text, right.text, format_output(text, choice, task=Task.ANALYSIS), "agree")]
    if u < 0.75:
        bad = careless_analysis(rng, pair, carry_drop) if carry_drop and rng.random() < 0.5 else None
        good, bad = right, bad or wrong_analysis(rng, pair, misread_frac=misread_frac, ranges=ranges)[0]
    elif u < 0.90:
        a, i = wrong_analysis(rng, pair, misread_frac=misread_frac, ranges=ranges)
        b, j = wrong_analysis(rng, pair, not_at=i, misread_frac=misread_frac, ranges=ranges)
        good, bad = (a, b) if j < i else (b, a)  # the one that slipped later is right where they first differ
    else:
        r = rng.choice((1, 2))
        good, bad = right, analysis(pair, wrong_diff={r: right.checks[r - 1].d + rng.choice(SLIPS)})
    kind = difference_kind(good, bad, chain)
    c1, c2 = (good, bad) if balance.chosen_first(kind) else (bad, good)
    out = []
    for first, second in ((c1, c2), (c2, c1))[: 2 if both_orders else 1]:
        text, choice = reflection_analysis(first, second, tie_choice=1, chain=chain)
        out.append((first.text, second.text, format_output(text, choice, task=Task.ANALYSIS), kind))
    return out


def problem_of(pair: PreferencePair) -> Chain:
    """The problem a pair asks (its chain), whatever the wording: what a held-out split keys on."""
    return chain_of(pair)


def _pair_on(rng: random.Random, chain: Chain, form: str | None, *, index: int, source: str,
             ranges: Ranges = DEFAULT_RANGES) -> PreferencePair:
    """A pair on `chain` asked in `form` (None: a random form, drawn last, as make_pair always drew it)."""
    right = chain.answer
    at = rng.randrange(len(chain.ops))
    wrong = steps_of(chain, {at: slipped(rng, steps_of(chain)[at].z, ranges)})[-1].z
    if wrong == right:
        wrong = slipped(rng, right, ranges)
    r_right, r_wrong = rng.choice(ANSWER_FORMS).format(v=right), rng.choice(ANSWER_FORMS).format(v=wrong)
    label = rng.choice((1, 2))
    r1, r2 = (r_right, r_wrong) if label == 1 else (r_wrong, r_right)
    query = chain.question(form or rng.choice(QUESTION_FORMS))
    return PreferencePair.from_query(query, r1, r2, label=label, id=f"{source}:{index}",
                                     source=source, subset=chain.kind)


def fresh_pairs(pairs: list[PreferencePair], *, seed: int, source: str = "demo-steps-fresh",
                ranges: Ranges = DEFAULT_RANGES) -> list[PreferencePair]:
    """New pairs on the problems of `pairs`: each problem asked in every question form none of
    `pairs` uses for it, with new answers (a new wrong one) in a new order. No conversation
    repeats one of `pairs`: known prompts, fresh responses to judge, as a reward model meets them."""
    rng = random.Random(seed)
    problems: dict[Chain, set[str]] = {}
    for pair in pairs:
        problems.setdefault(problem_of(pair), set()).add(pair.query)
    out: list[PreferencePair] = []
    for chain, asked in problems.items():
        for form in QUESTION_FORMS:
            if chain.question(form) not in asked:
                out.append(_pair_on(rng, chain, form, index=len(out), source=source, ranges=ranges))
    return out


def other_problems(pairs: list[PreferencePair], avoid: list[PreferencePair]) -> list[PreferencePair]:
    """The pairs of `pairs` whose problem none of `avoid` asks, in any wording."""
    seen = {problem_of(p) for p in avoid}
    return [p for p in pairs if problem_of(p) not in seen]


def analysis_true(text: str, chain: Chain | None, *, task: Task) -> bool:
    """Whether an analysis's arithmetic is true (a process reward's test).

    A response analysis: its steps work `chain` (each step's operands from the question or the step
    before, every result true) and each check follows from its result. A reflection: every subtraction
    of its walk is true, the question's step it quotes is the question's (the last step it walked), and
    its inverse check is true (the step's value taken back, then its difference from the step's start)."""
    if task is Task.ANALYSIS:
        if any(int(a) - int(b) != int(d) for a, b, d in _WALKED.findall(text)):
            return False  # a walk's subtraction of the two critiques' values
        said = re.search(r"The question says (add|subtract) (\d+)", text)
        if said is not None:
            walked = re.findall(r"Step (\d+): ", text)
            i = int(walked[-1]) - 1 if walked else -1
            if chain is None or not 0 <= i < len(chain.ops) or \
                    chain.ops[i] != ("+" if said[1] == "add" else "-", int(said[2])):
                return False
        m = re.search(r"Check (-?\d+) ([-+]) (\d+) = (-?\d+), (-?\d+) - (-?\d+) = (-?\d+)", text)
        if m is None:
            if said is not None:
                return ", Critique 2 is right" in text
            m = re.search(r"Response [12]: (-?\d+) - (-?\d+) = (-?\d+), Critique", text)
            return ("The critiques agree" in text) if m is None else int(m[1]) - int(m[2]) == int(m[3])
        z, op, y, back, again, x, d = m.groups()
        return apply(int(z), op, int(y)) == int(back) == int(again) and int(again) - int(x) == int(d)
    a = parse_analysis(text)
    if a is None or chain is None or len(a.steps) != len(chain.ops):
        return False
    value = chain.start
    for e, (op, y) in zip(a.steps, chain.ops):
        if (e.x, e.op, e.y) != (value, op, y) or not e.right:
            return False
        value = e.z
    return bool(a.checks) and all(c.computed == a.result and c.worked for c in a.checks)


EXAMPLES: tuple[tuple[str, str, str], ...] = (
    # the shipped judge's anchor drops a carry on each of the first three, and stage 2 overturns it
    # (`python research/find_examples.py --pairs 128` on the app's settings, seed 0: 10 of 128 held-out pairs)
    ("A counter shows 12. Step 1: add 7. Step 2: subtract 8. Step 3: add 5. Step 4: add 9. What does it show now?",
     "It is 25.", "I get 15."),
    ("Start with 23. Step 1: add 9. Step 2: add 7. Step 3: subtract 8. Step 4: subtract 3. What is the result?",
     "The result is 28.", "It is 18."),
    ("Start with 12. Step 1: add 9. Step 2: subtract 4. Step 3: subtract 5. Step 4: add 7. Step 5: add 6. "
     "Step 6: subtract 4. What is the result?", "It equals 31.", "It is 21."),
    ("A counter shows 25. Step 1: subtract 8. Step 2: add 6. Step 3: subtract 9. Step 4: add 3. Step 5: add 7. "
     "What does it show now?", "It is 24.", "It is 14."),
)
"""(query, response 1, response 2) the app offers as examples in the Judge tab."""
