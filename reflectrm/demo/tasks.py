"""The demo judge's synthetic, verifiable domain: is this arithmetic answer right?

Each pair asks a small arithmetic question; one response gives the right answer, the other a
plausibly wrong one (off by one, a dropped carry, swapped digits, ...). Because the right answer
is computable, every analysis and verdict can be checked exactly. Pure standard library.

Kinds (the pair's `subset`):
  add  2..29 + 2..29      sub  10..40 - 2..40      mul  2..9 x 2..9 (times tables)

The ranges are small on purpose: about 1,600 arithmetic facts, of which a 15-minute build
learns most but not all (its mistakes are what sampling, reflection and retraining fix).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

from reflectrm.core.prompts import Task, format_output
from reflectrm.core.types import PreferencePair

KINDS = ("add", "sub", "mul")
SYMBOL = {"add": "+", "sub": "-", "mul": "*"}
QUESTION_FORMS = ("What is {a} {op} {b}?", "Compute {a} {op} {b}.", "Calculate {a} {op} {b}.", "{a} {op} {b} = ?")
ANSWER_FORMS = ("The answer is {v}.", "{v}", "It is {v}.", "It equals {v}.", "The result is {v}.")


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str
    a: int
    b: int

    @property
    def answer(self) -> int:
        return {"add": self.a + self.b, "sub": self.a - self.b, "mul": self.a * self.b}[self.kind]

    @property
    def expression(self) -> str:
        return f"{self.a} {SYMBOL[self.kind]} {self.b}"


def make_problem(rng: random.Random, kind: str) -> Problem:
    if kind == "add":
        return Problem(kind, rng.randint(2, 29), rng.randint(2, 29))
    if kind == "sub":
        a = rng.randint(10, 40)
        return Problem(kind, a, rng.randint(2, a))
    return Problem(kind, rng.randint(2, 9), rng.randint(2, 9))


def wrong_answer(rng: random.Random, p: Problem) -> int:
    """A plausible mistake: off by one or two, off by ten, a dropped carry, or swapped digits."""
    v = p.answer
    for _ in range(20):
        how = rng.choice(("pm1", "pm2", "pm10", "carry", "swap"))
        if how == "pm1":
            w = v + rng.choice((-1, 1))
        elif how == "pm2":
            w = v + rng.choice((-2, 2))
        elif how == "pm10":
            w = v + rng.choice((-10, 10))
        elif how == "carry":
            w = v - 10 if v % 10 < 9 else v + 10
        else:
            s = str(v)
            w = int(s[::-1]) if len(s) > 1 else v + 1
        if w != v and w >= 0:
            return w
    return v + 1


def answer_text(rng: random.Random, p: Problem, value: int) -> str:
    return rng.choice(ANSWER_FORMS).format(a=p.a, op=SYMBOL[p.kind], b=p.b, v=value)


def make_pair(rng: random.Random, *, kind: str | None = None, index: int = 0, source: str = "demo-arith") -> PreferencePair:
    """One labelled pair: a question, a right and a wrong answer in random order."""
    p = make_problem(rng, kind or rng.choice(KINDS))
    return _pair_on(rng, p, None, index=index, source=source)


def _pair_on(rng: random.Random, p: Problem, form: str | None, *, index: int, source: str) -> PreferencePair:
    """A pair on `p` asked in `form` (None: a random form, drawn last, as the seeds always drew it)."""
    right, wrong = answer_text(rng, p, p.answer), answer_text(rng, p, wrong_answer(rng, p))
    label = rng.choice((1, 2))
    r1, r2 = (right, wrong) if label == 1 else (wrong, right)
    query = (form or rng.choice(QUESTION_FORMS)).format(a=p.a, op=SYMBOL[p.kind], b=p.b)
    return PreferencePair.from_query(query, r1, r2, label=label, id=f"{source}:{index}", source=source, subset=p.kind)


def fresh_pairs(pairs: list[PreferencePair], *, seed: int, source: str = "demo-fresh") -> list[PreferencePair]:
    """New pairs on the problems of `pairs`: each problem asked in every question form none of
    `pairs` uses for it, with new answers (a new wrong one) in a new order.

    No conversation repeats one of `pairs`, so these pass the training-data overlap check against
    them. It is how a reward model is used in RLHF: known prompts, fresh responses to judge.
    """
    rng = random.Random(seed)
    problems: dict[Problem, set[str]] = {}
    for pair in pairs:
        problems.setdefault(problem_of(pair), set()).add(pair.query)
    out: list[PreferencePair] = []
    for p, asked in problems.items():
        for form in QUESTION_FORMS:
            if form.format(a=p.a, op=SYMBOL[p.kind], b=p.b) not in asked:
                out.append(_pair_on(rng, p, form, index=len(out), source=source))
    return out


def other_problems(pairs: list[PreferencePair], avoid: list[PreferencePair]) -> list[PreferencePair]:
    """The pairs of `pairs` whose problem none of `avoid` asks, in any wording."""
    seen = {problem_of(p) for p in avoid}
    return [p for p in pairs if problem_of(p) not in seen]


def make_pairs(n: int, *, seed: int, kinds: tuple[str, ...] = KINDS, source: str = "demo-arith") -> list[PreferencePair]:
    rng = random.Random(seed)
    return [make_pair(rng, kind=kinds[i % len(kinds)], index=i, source=source) for i in range(n)]


_NUMBER = re.compile(r"-?\d+")
_QUERY = re.compile(r"(\d+)\s*([-+*])\s*(\d+)")


KIND_OF = {symbol: kind for kind, symbol in SYMBOL.items()}


def problem_in(text: str) -> Problem | None:
    """The first arithmetic problem written in `text` ("9 + 20"), or None."""
    m = _QUERY.search(text)
    return Problem(KIND_OF[m.group(2)], int(m.group(1)), int(m.group(3))) if m else None


def problem_of(pair: PreferencePair) -> Problem:
    """Recover the arithmetic problem of a demo pair from its query."""
    p = problem_in(pair.query)
    if p is None:
        raise ValueError(f"not a demo arithmetic query: {pair.query!r}")
    return p


def stated_value(response: str, p: Problem) -> int | None:
    """The number a response states as its answer (the last number in it)."""
    numbers = [int(x) for x in _NUMBER.findall(response)]
    return numbers[-1] if numbers else None


def _check(label: str, stated: int | None, computed: int) -> str:
    if stated is None:
        return f"{label}: no answer, wrong."
    return f"{label}: {stated} - {computed} = {stated - computed}, {'right' if stated == computed else 'wrong'}."


def response_analysis(pair: PreferencePair, computed: int) -> tuple[str, int]:
    """The analysis a judge who computed `computed` writes, and the verdict it implies.

    It works the problem, then subtracts its result from each response's answer and calls the
    answer right when the difference is 0: "7 + 5 = 12. Response 1: 13 - 12 = 1, wrong. Response
    2: 12 - 12 = 0, right." A tiny transformer trained for minutes learns subtraction as it learns
    the problems' arithmetic, but never learned to tell directly whether two numbers are equal:
    earlier formats ("Response 1 says 13, which is wrong"; "13 vs 12 wrong") judged at chance.
    When neither or both answers agree with its result, the verdict is Response 1.
    """
    p = problem_of(pair)
    v1, v2 = stated_value(pair.response_1, p), stated_value(pair.response_2, p)
    text = f"{p.expression} = {computed}. {_check('Response 1', v1, computed)} {_check('Response 2', v2, computed)}"
    return text, 2 if v2 == computed and v1 != computed else 1


def reflection_analysis(pair: PreferencePair, computed_1: int, computed_2: int) -> tuple[str, int]:
    """The reflection comparing critiques that computed `computed_1` and `computed_2`: it works the
    problem and checks each critique's result against its own, as the response analysis does."""
    p = problem_of(pair)
    v = p.answer
    text = f"{p.expression} = {v}. {_check('Critique 1', computed_1, v)} {_check('Critique 2', computed_2, v)}"
    return text, 2 if computed_2 == v and computed_1 != v else 1


def response_example(pair: PreferencePair) -> str:
    """The target output of the response-preference task for a demo pair."""
    analysis, choice = response_analysis(pair, problem_of(pair).answer)
    return format_output(analysis, choice, task=Task.RESPONSE)


def slip(rng: random.Random, pair: PreferencePair, *, invent: float) -> int:
    """A wrong result a judge might reach: the wrong response's answer, or (with probability
    `invent`, or when that answer is unusable) another plausible mistake."""
    p = problem_of(pair)
    value = stated_value(pair.response_1 if pair.label == 2 else pair.response_2, p)
    if value is None or value == p.answer or rng.random() < invent:
        value = wrong_answer(rng, p)
    return value


def reflection_example(rng: random.Random, pair: PreferencePair) -> tuple[str, str, str]:
    """(critique 1, critique 2, target output): a right and a wrong analysis in random order."""
    p = problem_of(pair)
    wrong_value = slip(rng, pair, invent=0.3)
    right, _ = response_analysis(pair, p.answer)
    wrong, _ = response_analysis(pair, wrong_value)
    if rng.random() < 0.5:
        analysis, choice = reflection_analysis(pair, p.answer, wrong_value)
        return right, wrong, format_output(analysis, choice, task=Task.ANALYSIS)
    analysis, choice = reflection_analysis(pair, wrong_value, p.answer)
    return wrong, right, format_output(analysis, choice, task=Task.ANALYSIS)


def iter_training_texts(seed: int) -> Iterator[str]:
    """Raw text for training the tokenizer: queries, responses and target outputs."""
    rng = random.Random(seed)
    for i in range(4000):
        pair = make_pair(rng, index=i)
        yield pair.query
        yield pair.response_1
        yield pair.response_2
        yield response_example(pair)
        yield "\n".join(reflection_example(rng, pair))


EXAMPLES: tuple[tuple[str, str, str], ...] = (
    ("Calculate 26 + 11.", "It equals 37.", "It equals 73."),
    ("Calculate 24 - 16.", "The result is 8.", "It is 9."),
    ("Calculate 8 * 8.", "It is 54.", "It is 64."),
)
"""(query, response 1, response 2) the app offers as examples in the Judge tab: pairs the shipped arithmetic judge
gets right, greedy and with its default strategy (it misjudges many hand-picked ones, e.g. 17 + 8: 25 or 35)."""
