"""`JudgeConfig`: every inference choice the paper leaves open, named, documented, validated."""

from __future__ import annotations

import argparse

import math
from dataclasses import asdict, dataclass, field, fields, replace
from collections.abc import Mapping
from typing import Any, TypeVar

from reflectrm.core.confidence import DEFAULT_BOTTOM_FRAC
from reflectrm.core.prompts import DEFAULT_CONTROL_SUFFIX
from reflectrm.errors import ConfigError

MAX_SAMPLES = 64
"""Stage-1 samples per pair, at most (the paper uses 8, its matched-compute baseline 15): memory grows with
n x batch size, and n = 10,000 grew past 6 GB before one judgment came out."""

MAX_SEED = 2**63 - 1
"""The largest seed: a seed is stored in a 64-bit signed column (SQLite INTEGER, PostgreSQL BIGINT) and
handed to torch; `--seed 1e29` used to judge for minutes and then fail when the judgment was stored."""

MAX_ROW_ID = 2**63 - 1
"""The largest row id a store can hold (a 64-bit signed key): a larger one is refused before any query."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeConfig:
    """How one judgment is made. Defaults follow the paper and, where it is silent, PAPER.md 10."""

    strategy: str = "reflectrm"  # one of reflectrm.core.strategies.STRATEGIES
    n: int = 8  # stage-1 samples N (paper: 8)
    temperature: float = 1.0  # stage-1 sampling temperature (paper: 1.0)
    top_k: int = 0  # stage-1 top-k truncation; 0 = none (plain sampling)
    top_p: float = 1.0  # stage-1 nucleus truncation; 1.0 = none
    max_new_tokens: int = 1024  # per stage-1 output (paper: 1024)
    bottom_frac: float = DEFAULT_BOTTOM_FRAC  # Eq. 5 share of lowest-log-prob tokens
    reflection_temperature: float = 0.0  # stage-2 decoding; 0 = greedy (paper: "greedy otherwise")
    reflection_max_new_tokens: int = 1024  # per stage-2 reflection
    critique_includes_verdict: bool = False  # show each critique's verdict beside its analysis (Eq. 7: analysis only)
    skip_unanimous: bool = False  # skip stage 2 when every parseable output agrees (it cannot change the verdict)
    matched_compute_n: int = 15  # samples of `majority@15`, the matched-compute baseline (8 + 7)
    # seeds sampling, critique order and random strategies; same seed, same judgment (0 to 2**63-1)
    seed: int = field(default=0, metadata={"parse": lambda text: seed_number(text)})
    control_suffix: str = DEFAULT_CONTROL_SUFFIX  # appended to every prompt ("/no_think" for Qwen3)

    def __post_init__(self) -> None:
        from reflectrm.core.strategies import STRATEGIES  # late: strategies import this module's users

        if self.strategy not in STRATEGIES:
            raise ConfigError(f"strategy {self.strategy!r} is unknown: use one of {', '.join(STRATEGIES)}")
        for name in ("n", "max_new_tokens", "reflection_max_new_tokens", "matched_compute_n"):
            check_positive_int(name, getattr(self, name))
        for name in ("n", "matched_compute_n"):
            if getattr(self, name) > MAX_SAMPLES:
                raise ConfigError(
                    f"{name} is {getattr(self, name)}, over the limit of {MAX_SAMPLES}: each sample is a full "
                    f"generation held in memory for the whole batch (the paper uses 8); lower {name}"
                )
        for name in ("temperature", "reflection_temperature"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0 (0 = greedy), got {value!r}")
        if not (isinstance(self.top_k, int) and self.top_k >= 0):
            raise ConfigError(f"top_k must be an integer >= 0 (0 = no truncation), got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1] (1 = no truncation), got {self.top_p!r}")
        if not 0.0 < self.bottom_frac <= 1.0:
            raise ConfigError(f"bottom_frac must be in (0, 1] (paper: 0.10), got {self.bottom_frac!r}")
        if self.strategy in ("reflectrm", "random-anchor", "random-winners") and self.n < 2:
            raise ConfigError(f"strategy {self.strategy!r} compares samples with an anchor: n must be >= 2, got {self.n}")
        check_seed("seed", self.seed)

    def with_(self, **changes: Any) -> JudgeConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JudgeConfig:
        return strict_from_dict(cls, d)


# Shared by the library's config dataclasses (JudgeConfig here, TrainConfig in training), written once.


def check_positive_int(name: str, value: Any) -> None:
    """Raise `ConfigError` unless `value` is an int >= 1 (a bool is not a count)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def check_seed(name: str, value: Any) -> None:
    """Raise `ConfigError` unless `value` is an int in [0, MAX_SEED] (a bool is not a seed)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEED:
        raise ConfigError(f"{name} must be a whole number from 0 to 2**63-1, got {_short(value)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def strict_from_dict(cls: type[T], d: Mapping[str, Any]) -> T:
    """`cls(**d)`, refusing a key that is not a field (a stored config from another version says so, by name)."""
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(d) - known)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} field {unknown[0]!r}: known fields are {', '.join(sorted(known))}")
    return cls(**d)


def counting(text: str) -> int:
    """An argparse type: a whole number of at least 1 (anything else is argparse's one-line error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def share(text: str) -> float:
    """An argparse type: a number in [0, 1] (anything else, nan included, is argparse's one-line error)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1")
    return value


def _bounded_int(text: str, *, low: int, high: int) -> int | None:
    """`text` as a whole number in [low, high]; None when it is not one (a 5,000-digit number included)."""
    text = text.strip()
    if not text or len(text) > 25:  # int() of a huge digit string is slow, and no bound here has 25 digits
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if low <= value <= high else None


def seed_number(text: str) -> int:
    """An argparse type: a seed, a whole number from 0 to 2**63-1 (`MAX_SEED`)."""
    value = _bounded_int(text, low=0, high=MAX_SEED)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a seed: give a whole number from 0 to 2**63-1")
    return value


def row_id(text: str) -> int:
    """An argparse type: a stored row's id, a whole number from 1 to 2**63-1 (`MAX_ROW_ID`)."""
    value = _bounded_int(text, low=1, high=MAX_ROW_ID)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an id: give a whole number from 1 to 2**63-1")
    return value
