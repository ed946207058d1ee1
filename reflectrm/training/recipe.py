"""The training-data recipe: from a pair's analyses to the rows GRPO trains on (PAPER.md section 2).

The one place where preference examples and reflection pairs are built and rendered. Both paths
call the same functions with different arguments:

* the labelled path (`labelled_examples`, which `reflectrm.training.data` and the store's
  `derive_from_labels` call): the verdict is the pair's label, no marks, one reflection pair per
  mixed-outcome item (`max_pairs=1`, the paper's recipe) over the judge's sampled rollouts;
* the correction path (`reflectrm_db.curation`): the verdict is a person's, marks override the rule below,
  up to the correction's `max_pairs` pairs.

An analysis is *right* when marked right, or, unmarked, when its prediction equals the verdict;
*wrong* when marked wrong, or, unmarked, when its parseable prediction differs from the verdict.
An unparseable, unmarked analysis takes no part unless `unparseable_is_wrong` (it has no verdict
to be wrong about; counting it as wrong gives more reflection pairs whose "wrong" side may be
right). An empty analysis never takes part. A reflection pair shows one right and one wrong
analysis in a seeded random order, labelled with the right one's position; two analyses shown
with the same text never make a pair (it would contradict itself).

A row is TRL's conversational format, exactly as trained on: `prompt` (list of {role, content}),
`label` (1 or 2), `task` ("response" / "analysis"), `origin` and `pair_id`. A snapshot's identity
is `rows_hash` of its rows in order, so anything that changes what the trainer sees (the prompt
template included) changes the identity. Pure: standard library and `reflectrm.core` only.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any, Literal

from reflectrm.core import prompts
from reflectrm.core.prompts import DEFAULT_CONTROL_SUFFIX, Task
from reflectrm.core.types import ChatMessage, Choice, Judgment, PreferencePair, Rollout, messages_to_dicts
from reflectrm.errors import InputError

Mark = Literal["right", "wrong"]
ROW_FIELDS = ("prompt", "label", "task", "origin", "pair_id")
"""The columns a row's identity covers (stores may add provenance such as `example_id`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rendering:
    """How examples are shown to the judge: the same choices the judge is used with (`JudgeConfig`)."""

    control_suffix: str = DEFAULT_CONTROL_SUFFIX  # appended to every prompt (Qwen3's /no_think)
    critique_includes_verdict: bool = False  # show each critique's verdict (Eq. 3 lists analyses only)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> Rendering:
        """The rendering a judgment (or data) config used; missing keys take the defaults."""
        config = config or {}
        return cls(control_suffix=config.get("control_suffix", DEFAULT_CONTROL_SUFFIX),
                   critique_includes_verdict=bool(config.get("critique_includes_verdict", False)))


@dataclass(frozen=True, slots=True)
class Analysis:
    """One stage-1 analysis as the recipe sees it.

    Attributes:
        key: the caller's handle on it (a rollout index, a sample row id).
        analysis: the analysis text.
        prediction: its verdict, None when unparseable.
    """

    key: int
    analysis: str
    prediction: Choice | None


@dataclass(frozen=True, slots=True)
class ReflectionChoice:
    """Two analyses in the order a reflection prompt shows them, and the one that is right (1 or 2)."""

    critique_1: int  # Analysis.key shown as Critique 1
    critique_2: int
    label: Choice


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingExample:
    """One GRPO prompt with the verdict the reward checks.

    Attributes:
        prompt: the chat prompt (one user turn for either task).
        label: the candidate the reward expects (1 or 2).
        task: response preference (Eq. 2) or analysis preference (Eq. 3).
        origin: "preference", "reflection", "correction", or the name given to rows from elsewhere.
        pair_id: the pair it was built from ("" when unknown).
    """

    prompt: tuple[ChatMessage, ...]
    label: Choice
    task: Task
    origin: str
    pair_id: str = ""

    @property
    def key(self) -> str:
        """Identity for deduplication: the task and the prompt's content (not the label)."""
        payload = json.dumps([self.task.value, messages_to_dicts(self.prompt)], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()

    def to_row(self) -> dict[str, Any]:
        """The TRL row, exactly as trained on."""
        return {"prompt": messages_to_dicts(self.prompt), "label": self.label, "task": self.task.value,
                "origin": self.origin, "pair_id": self.pair_id}


# --- which analyses make a reflection pair ---------------------------------------------------------


def classify(analysis: Analysis, *, verdict: Choice, mark: Mark | None = None,
             unparseable_is_wrong: bool = False) -> Mark | None:
    """Right, wrong, or None (takes no part). A mark overrides the prediction-based rule."""
    if not analysis.analysis.strip():
        return None
    if mark is not None:
        return mark
    if analysis.prediction is None:
        return "wrong" if unparseable_is_wrong else None
    return "right" if analysis.prediction == verdict else "wrong"


def shown_critique(analysis: Analysis, rendering: Rendering) -> str:
    """An analysis as a reflection prompt shows it."""
    return prompts.format_critique(analysis.analysis, analysis.prediction,
                                   include_verdict=rendering.critique_includes_verdict)


def choose_reflection_pairs(
    analyses: Sequence[Analysis],
    *,
    verdict: Choice,
    marks: Mapping[int, Mark] | None = None,
    max_pairs: int,
    seed: int,
    rendering: Rendering = Rendering(),
    unparseable_is_wrong: bool = False,
) -> list[ReflectionChoice]:
    """Up to `max_pairs` (right, wrong) pairs of `analyses`, each in a seeded random order (Eq. 3).

    Every (right, wrong) combination whose shown texts differ is a candidate; a seeded shuffle picks
    `max_pairs` of them. Analyses shown with the same text count once (the first).
    """
    marks = marks or {}
    kinds = {a.key: classify(a, verdict=verdict, mark=marks.get(a.key), unparseable_is_wrong=unparseable_is_wrong)
             for a in analyses}
    right = _distinct((a for a in analyses if kinds[a.key] == "right"), rendering)
    wrong = _distinct((a for a in analyses if kinds[a.key] == "wrong"), rendering)
    rng = random.Random(seed)
    candidates = [(g.key, b.key) for g, b in product(right, wrong)
                  if shown_critique(g, rendering) != shown_critique(b, rendering)]
    rng.shuffle(candidates)
    out = []
    for good, bad in sorted(candidates[:max_pairs]):
        first_is_right = rng.random() < 0.5
        out.append(ReflectionChoice(critique_1=good, critique_2=bad, label=1) if first_is_right
                   else ReflectionChoice(critique_1=bad, critique_2=good, label=2))
    return out


def _distinct(analyses: Iterable[Analysis], rendering: Rendering) -> list[Analysis]:
    seen: set[str] = set()
    out = []
    for a in analyses:
        if (text := shown_critique(a, rendering)) not in seen:
            seen.add(text)
            out.append(a)
    return out


# --- rendering ------------------------------------------------------------------------------------


def preference_example(pair: PreferencePair, *, label: Choice, rendering: Rendering = Rendering(),
                       origin: str = "preference") -> TrainingExample:
    """The response-preference example of a pair (Eq. 2) with the verdict `label`."""
    prompt = prompts.response_prompt(pair, control_suffix=rendering.control_suffix)
    return TrainingExample(prompt=tuple(prompt), label=label, task=Task.RESPONSE, origin=origin, pair_id=pair.id)


def reflection_example(pair: PreferencePair, critiques: tuple[Analysis, Analysis], *, label: Choice,
                       rendering: Rendering = Rendering(), origin: str = "reflection") -> TrainingExample:
    """The analysis-preference example (Eq. 3): two critiques of `pair`, `label` the right one."""
    shown = [shown_critique(c, rendering) for c in critiques]
    prompt = prompts.reflection_prompt(pair, *shown, control_suffix=rendering.control_suffix)
    return TrainingExample(prompt=tuple(prompt), label=label, task=Task.ANALYSIS, origin=origin, pair_id=pair.id)


def other_order(pair: PreferencePair, *, label: Choice, critiques: tuple[Analysis, Analysis] | None = None,
                rendering: Rendering = Rendering(), origin: str) -> TrainingExample:
    """An example in the other order: a preference example with the responses exchanged, or (with `critiques`, the
    order the example shows them in) a reflection example with the critiques exchanged; the label follows the
    right candidate, and the row keeps the pair's own id."""
    other: Choice = 3 - label  # type: ignore[assignment]
    if critiques is None:
        ex = preference_example(pair.swapped(), label=other, rendering=rendering, origin=origin)
    else:
        ex = reflection_example(pair, (critiques[1], critiques[0]), label=other, rendering=rendering, origin=origin)
    return TrainingExample(prompt=ex.prompt, label=ex.label, task=ex.task, origin=ex.origin, pair_id=pair.id)


TWIN_FIELDS = ("twin_key", "order")
"""The columns of rows written in both orders: `twin_key` is shared by an example and its other order (the first
row's identity hash), `order` is 0 for the example as derived and 1 for the other order. GRPO's both-orders option
(`TrainConfig.both_orders`) rolls out both in one step and pays a verdict only when both are right."""


def in_both_orders(row: Mapping[str, Any], twin: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`row` and its other order `twin` as two rows sharing a `twin_key` (orders 0 and 1), in that order."""
    key = rows_hash([row])
    return [{**row, "twin_key": key, "order": 0}, {**twin, "twin_key": key, "order": 1}]


@dataclass(frozen=True, slots=True, kw_only=True)
class DerivedExamples:
    """What one item (a judged pair and a verdict) gives: a preference example and reflection pairs."""

    preference: TrainingExample
    reflection: tuple[tuple[ReflectionChoice, TrainingExample], ...]


def derive_examples(
    pair: PreferencePair,
    analyses: Sequence[Analysis],
    *,
    verdict: Choice,
    marks: Mapping[int, Mark] | None = None,
    max_pairs: int,
    seed: int,
    rendering: Rendering = Rendering(),
    unparseable_is_wrong: bool = False,
    origins: tuple[str, str] = ("preference", "reflection"),
) -> DerivedExamples:
    """The recipe for one item: the benchmark path and the correction path differ only in arguments."""
    by_key = {a.key: a for a in analyses}
    chosen = choose_reflection_pairs(analyses, verdict=verdict, marks=marks, max_pairs=max_pairs, seed=seed,
                                     rendering=rendering, unparseable_is_wrong=unparseable_is_wrong)
    reflection = tuple(
        (c, reflection_example(pair, (by_key[c.critique_1], by_key[c.critique_2]), label=c.label,
                               rendering=rendering, origin=origins[1]))
        for c in chosen
    )
    preference = preference_example(pair, label=verdict, rendering=rendering, origin=origins[0])
    return DerivedExamples(preference=preference, reflection=reflection)


def derive_seed(seed: int, key: str, purpose: str) -> int:
    """A seed for one `purpose` on one item `key` under the run's `seed` (stable across processes)."""
    digest = hashlib.sha256(f"{seed}\x00{key}\x00{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def sampled(j: Judgment) -> list[Rollout]:
    """The sampled rollouts of a judgment (the greedy one is not a training sample)."""
    return [r for r in j.rollouts if not r.greedy]


def labelled_dropped(j: Judgment, *, keep_all_wrong: bool = True) -> str | None:
    """Why the paper's recipe takes nothing from a labelled, judged pair ("easy": every sample right; "all_wrong":
    no sample right, when `keep_all_wrong` is off), or None when it derives examples from it."""
    samples = sampled(j)
    right = sum(r.prediction == j.pair.label for r in samples)
    if samples and right == len(samples):
        return "easy"
    if right == 0 and not keep_all_wrong:
        return "all_wrong"
    return None


def labelled_examples(j: Judgment, *, seed: int, rendering: Rendering = Rendering(),
                      unparseable_is_wrong: bool = False,
                      origins: tuple[str, str] = ("preference", "reflection")) -> DerivedExamples:
    """The paper's recipe on one labelled, judged pair: `derive_examples` with the label as the verdict, no marks
    and one reflection pair, over the sampled rollouts (keyed by `Rollout.index`), seeded per pair."""
    if j.pair.label is None:
        raise InputError(f"pair {j.pair.id!r} has no label: the paper's recipe needs labelled pairs")
    analyses = [Analysis(r.index, r.analysis, r.prediction) for r in sampled(j)]
    return derive_examples(
        j.pair, analyses, verdict=j.pair.label, max_pairs=1, rendering=rendering,
        seed=derive_seed(seed, j.pair.fingerprint(), "reflection"),
        unparseable_is_wrong=unparseable_is_wrong, origins=origins)


# --- identity -------------------------------------------------------------------------------------


def row_json(row: Mapping[str, Any]) -> str:
    """The canonical JSON of a row's identity columns."""
    return json.dumps({k: row[k] for k in ROW_FIELDS}, ensure_ascii=False, sort_keys=True)


def rows_hash(rows: Iterable[Mapping[str, Any]]) -> str:
    """sha256 of the rows' canonical JSON, in order (order is part of a snapshot's content)."""
    h = hashlib.sha256()
    for row in rows:
        h.update(row_json(row).encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()


def example_hash(example: TrainingExample) -> str:
    """The identity of one example: the hash of its row (prompt, label, task, origin, pair)."""
    return rows_hash([example.to_row()])


def check_max_pairs(max_pairs: object) -> None:
    if not isinstance(max_pairs, int) or isinstance(max_pairs, bool) or max_pairs < 0:
        raise InputError(f"max_pairs must be an integer >= 0, got {max_pairs!r}")
