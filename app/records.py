"""What the app's services return: small frozen values (besides `reflectrm` and `db` types)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import date, datetime
from types import MappingProxyType
from typing import Any

from reflectrm_db.records import CorrectionRecord, ExampleKind, JudgmentSummary, StoredJudgment, TrainingRunRecord
from reflectrm.core.contest import contest_reason  # noqa: F401  (re-exported: the app's name for it)
from reflectrm.core.types import Choice, Judgment
from reflectrm.audit import SubsetStats  # noqa: F401  (re-exported: the app's records name it)
from reflectrm.errors import InputError
from reflectrm.pipeline import orders_agree
from reflectrm.training.grpo import TIME_DECAY, TrainConfig
from reflectrm.training.runs import Checkpoint, RunProgress

def model_name(model: str) -> str:
    """A model path or Hub id as people name it: "demo judge", a run's "run/checkpoint-40", or the Hub id as is.

    Never the host's absolute path, not even of a folder removed since (a deleted checkpoint a stored run names)."""
    from pathlib import Path

    from reflectrm.demo import DEMO_MODEL_DIR

    path = Path(model)
    if not model or not (path.is_absolute() or path.is_dir()):
        return model
    return "demo judge" if path.resolve() == Path(DEMO_MODEL_DIR).resolve() else "/".join(path.resolve().parts[-2:])


PAPER_MIX = (4, 1)
"""The paper's preference : reflection mix of training data (it found that even 2:1 hurts)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeResult:
    """A judgment as the Judge tab shows it.

    Attributes:
        judgment_id: its row in the store (the recorded judgment; a re-aggregated view shares it).
        judgment: what is shown (the recorded one, or a re-aggregation of its rollouts).
        reaggregated: True when `judgment` is a re-aggregation with another strategy.
        generated: generation calls made for this result (0 for a re-aggregation of stored rollouts).
        recorded_strategy: the strategy the stored judgment was recorded with.
    """

    judgment_id: int
    judgment: Judgment
    reaggregated: bool = False
    generated: int = 0
    recorded_strategy: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditResult:
    """Both orders of one pair: the original and the swapped judgment, recorded as twins."""

    original: JudgeResult
    swapped: JudgeResult

    @property
    def agree(self) -> bool | None:
        """True: consistent; False: flipped; None: a judgment abstained."""
        return orders_agree(self.original.judgment, self.swapped.judgment)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlippedItem:
    """A pair whose two orders picked different answers; verdicts and label in the original numbering."""

    judgment_id: int
    twin_id: int
    subset: str
    query: str
    verdict: Choice | None  # the original order's pick
    swapped_verdict: Choice | None  # the swapped order's pick, translated back to the original numbering
    label: Choice | None
    response_1: str = ""
    response_2: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchAuditReport:
    """What a batch audit found: figures per subset (the last row is "all") and the flipped pairs."""

    source: str
    subsets: tuple[SubsetStats, ...]
    flipped: tuple[FlippedItem, ...]
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewItem:
    """The judgment a reviewer looks at, and where it stands in the queue."""

    stored: StoredJudgment
    summary: JudgmentSummary
    remaining: int
    correction: CorrectionRecord | None
    wrapped: bool = False  # Next went past the queue's last item and started again from its first


@dataclass(frozen=True, slots=True, kw_only=True)
class ExampleRow:
    """A derived training example with the texts it was made from (for browsing)."""

    kind: ExampleKind
    id: int
    state: str
    source: str
    subset: str
    query: str
    response_1: str
    response_2: str
    label: Choice
    judge_verdict: Choice | None
    human_verdict: Choice | None
    critique_1: str = ""
    critique_2: str = ""
    judgment_id: int | None = None
    correction_id: int | None = None
    created_at: datetime | None = None
    known_label: Choice | None = None  # the pair's own label (in the judgment's numbering), not the example's
    contested: str = ""  # why the person's verdict is contested ("" when it is not): see `contest_reason`

    @property
    def agrees_with_judge(self) -> bool | None:
        """Whether the person's verdict matches the judge's (None when either is missing)."""
        if self.judge_verdict is None or self.human_verdict is None:
            return None
        return self.judge_verdict == self.human_verdict

    def matches(self, text: str) -> bool:
        needle = text.casefold()
        return any(needle in t.casefold() for t in (self.query, self.response_1, self.response_2,
                                                       self.critique_1, self.critique_2))


@dataclass(frozen=True, slots=True, kw_only=True)
class ExampleFilter:
    """What Curate shows. Empty fields filter nothing.

    Attributes:
        agreement: "any", "agrees" or "disagrees" (the person's verdict against the judge's).
        since / until: creation dates, inclusive.
    """

    source: str = ""
    states: tuple[str, ...] = ("active",)
    since: date | None = None
    until: date | None = None
    agreement: str = "any"
    search: str = ""

    def keeps(self, row: ExampleRow) -> bool:
        if self.source and row.source != self.source:
            return False
        day = row.created_at.date() if row.created_at else None
        if day and ((self.since and day < self.since) or (self.until and day > self.until)):
            return False
        if self.agreement != "any" and row.agrees_with_judge is not (self.agreement == "agrees"):
            return False
        return not self.search or row.matches(self.search)


@dataclass(frozen=True, slots=True, kw_only=True)
class Mix:
    """Active examples per kind against the paper's 4:1 preference:reflection mix."""

    preference: int
    reflection: int

    @property
    def ratio(self) -> float | None:
        """Preference examples per reflection pair."""
        return self.preference / self.reflection if self.reflection else None

    def advice(self) -> str:
        want_pref, want_refl = PAPER_MIX
        if not self.preference and not self.reflection:
            return ("No active examples yet: correct judgments in the Review queue, or add the paper's examples "
                    "from a labelled data set's judgments.")
        if self.preference * want_refl == self.reflection * want_pref:
            return "The mix matches the paper's 4:1."
        if self.preference * want_refl > self.reflection * want_pref:
            extra = self.preference - self.reflection * want_pref // want_refl
            return f"More preference examples than 4:1: exclude {extra} or add reflection pairs."
        short = self.reflection * want_pref // want_refl - self.preference
        return f"More reflection pairs than 4:1: add {short} preference examples (or exclude reflection pairs)."


PRECISIONS = MappingProxyType({"auto": None, "bf16": True, "fp32": False})
"""The Train form's precision choices, as `TrainConfig.bf16`: "auto" (bf16 on a GPU, fp32 on a CPU), "bf16" (on a
CPU: bf16 autocast over fp32 weights, which pays on CPUs with AMX / AVX512-BF16) or "fp32"."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainRequest:
    """What the Train form asks for: a GRPO run of `config` on a snapshot.

    The run's settings are `config`'s, its defaults and checks included: nothing here restates a `TrainConfig`
    field. The service sets only where the run goes (`device`, `threads`: the app's settings) and the pass
    size (`per_device_batch_size`: the largest, up to the config's, that divides a step's completions). The form
    spells three settings its own way: `from_form` takes them, and the properties of the same names read them back.

    Attributes:
        snapshot: the snapshot's name.
        base_model: the model to train (a local folder or a Hugging Face id); the form offers the active judge.
        config: the run's settings; a run from the form is bounded by `config.max_steps` (at least 1).
        mix: "paper" (default): a snapshot with more than one reflection pair per 4 preference examples has its
            reflection pairs subsampled (seeded by `mix_seed`) to the paper's 4:1; "as_is": every row is trained on.
        mix_seed: seeds which reflection pairs the paper's mix keeps.
    """

    snapshot: str
    base_model: str
    config: TrainConfig
    mix: str = "paper"
    mix_seed: int = 0

    def __post_init__(self) -> None:
        _check_steps(self.config.max_steps)

    @classmethod
    def from_form(cls, *, max_minutes: float | None = None, decay_over_time: bool = False,
                  precision: str | None = None, **fields: Any) -> TrainRequest:
        """A request from the form's fields: this class's own by name, every other a `TrainConfig` field by name,
        and the form's spellings of three of them.

        Args:
            max_minutes: a time budget (`max_time_s` in minutes); the run stops, completed and checkpointed,
                after the step that passes it. 0 or None: none, `max_steps` alone bounds the run.
            decay_over_time: decay the learning rate linearly to 0 over the budget (`lr_scheduler` "linear-time").
            precision: a key of `PRECISIONS` (`bf16`); None: the config's.

        Raises:
            InputError: a form field is out of range (steps, minutes, a decay without a budget, a precision).
            ConfigError: a `TrainConfig` field is (its own check, e.g. a group of one).
        """
        own = {f.name for f in dataclasses.fields(cls)} - {"config"}
        settings = {k: v for k, v in fields.items() if k not in own}
        if "max_steps" in settings:  # the form's words, before the config's ("or -1: run for epochs")
            _check_steps(settings["max_steps"])
        if max_minutes is not None and not (isinstance(max_minutes, (int, float)) and math.isfinite(max_minutes)
                                            and max_minutes >= 0):
            raise InputError(f"the time budget must be a number of minutes >= 0 (0 = none), got {max_minutes!r}")
        if max_minutes:
            settings["max_time_s"] = max_minutes * 60
        if decay_over_time:
            if not max_minutes:
                raise InputError("decaying the rate over the time budget needs a budget: set the minutes, or untick "
                                 "the decay")
            settings["lr_scheduler"] = TIME_DECAY
        if precision is not None:
            if precision not in PRECISIONS:
                raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
            settings["bf16"] = PRECISIONS[precision]
        return cls(**{k: v for k, v in fields.items() if k in own}, config=TrainConfig(**settings))

    @property
    def max_minutes(self) -> float:
        """The time budget in minutes, as the form shows it (0: none)."""
        return (self.config.max_time_s or 0) / 60

    @property
    def decay_over_time(self) -> bool:
        """Whether the rate decays to 0 over the time budget."""
        return self.config.lr_scheduler == TIME_DECAY

    @property
    def precision(self) -> str:
        """The config's `bf16` as a key of `PRECISIONS`."""
        return next(name for name, bf16 in PRECISIONS.items() if bf16 is self.config.bf16)


def _check_steps(steps: Any) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"max steps must be a whole number of at least 1, got {steps!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingRunView:
    """One training run as the Train tab shows it: the stored row, and its folder's live progress."""

    run: TrainingRunRecord
    progress: RunProgress

    @property
    def checkpoints(self) -> tuple[Checkpoint, ...]:
        return self.progress.checkpoints
