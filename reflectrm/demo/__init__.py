"""The demo judge: a tiny Qwen3-architecture model the project builds and ships as the embedded default.

It judges a synthetic, verifiable task domain, so every judgment can be checked exactly. Each domain is
one `Domain` registered by key in `domains.py` (`arithmetic`, `running-sums`); the shipped judge's
`demo_card.json` names the one it was built on ("domain"; no key means `arithmetic`, the first judge's;
older cards name the module, `reflectrm.demo.tasks` or `reflectrm.demo.steps`, and still read), and
everything that means "the demo judge's domain" asks `demo_domain()`, so swapping the model folder is
all it takes to ship a judge on another domain. The package holds:

    model/          the weights (an asset; its path lives in `reflectrm.defaults`, low in the layers)
    domains.py      the `Domain` type and its registry: pairs, examples, data-set name, token budget, reward
    tasks.py        the arithmetic domain: problems, pairs and worked analyses (pure, over the core)
    steps.py        the running-sum domain
    rewards.py      a reward plugin for GRPO (`reflectrm.training.rewards` loads it by name, never imports it)
    heldout.py      what a running-sum judge's build trained on (its card's stages), so which pairs are held out

The build tools (the builders, the replay of a judge's recorded stages, the stage plans) are not installed:
they live in the repository's `research/demojudge/`.

Nothing below this package imports it: it sits above training in the layer order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm.defaults import DEMO_MODEL_DIR
from reflectrm.demo.domains import DEFAULT_DOMAIN, DOMAINS, RUNNING_SUMS, Domain, domain_by_key
from reflectrm.errors import ConfigError, InputError

__all__ = ["CARD", "MeasuredStage2", "measured_stage2", "running_sum_card", "DEFAULT_DOMAIN", "DEMO_MODEL_DIR", "DOMAINS", "Domain", "demo_domain", "domain_of",
           "judge_domain", "read_card"]

CARD = "demo_card.json"
"""The file a demo judge's folder describes its build in (written by the build tools)."""


def read_card(model_dir: str | Path) -> dict:
    """The demo card of the judge in `model_dir` ({} when it has none); an unreadable one is a `ConfigError`."""
    path = Path(model_dir) / CARD
    if not path.is_file():
        return {}
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable demo card ({exc}): rebuild the model or fix the file") from None
    if not isinstance(card, dict):
        raise ConfigError(f"{path}: a demo card is a JSON object: rebuild the model or fix the file")
    return card


def domain_of(model_dir: str | Path) -> Domain:
    """The domain the demo judge in `model_dir` was built on, as its card names it.

    A folder without a card, or a card without "domain", means `arithmetic`; a card naming anything not
    registered (or not JSON) is a `ConfigError` naming the value. A card never makes us import a string it holds.
    """
    card = read_card(model_dir)
    if "domain" not in card:
        return DEFAULT_DOMAIN
    domain = domain_by_key(card["domain"])
    if domain is None:
        raise ConfigError(f"{Path(model_dir) / CARD}: unknown demo domain {card['domain']!r}: "
                          f"use one of {', '.join(DOMAINS)}")
    return domain


def demo_domain() -> Domain:
    """The domain of the shipped demo judge (`DEMO_MODEL_DIR`): where demo pairs and the demo benchmark come from."""
    return domain_of(DEMO_MODEL_DIR)


def judge_domain(model: str | Path) -> Domain | None:
    """The domain of the judge `model` (a path or a Hugging Face id) when it is a demo judge, i.e. a folder
    holding a demo card; None for any other model. A card naming an unknown domain is a `ConfigError`."""
    return domain_of(model) if (Path(model) / CARD).is_file() else None


def running_sum_card(model_dir: str | Path, pairs: int) -> dict[str, Any]:
    """The card of the running-sum judge in `model_dir`, for a bench that asks `pairs` held-out pairs of it:
    a `ConfigError` when it is not one, an `InputError` when that is more pairs than a bench judges."""
    if domain_of(model_dir) is not RUNNING_SUMS:
        raise ConfigError(f"{model_dir}: not a running-sum demo judge (its demo_card.json must name "
                          f"{RUNNING_SUMS.key}): build one with the repository's research/demojudge/steps_build.py")
    from reflectrm.demo.heldout import MAX_HELDOUT_PAIRS

    if pairs > MAX_HELDOUT_PAIRS:
        raise InputError(f"--pairs {pairs} is more than a demo bench judges ({MAX_HELDOUT_PAIRS}): ask for fewer")
    return read_card(model_dir)


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredStage2:
    """What a demo judge's card says its stage 2 measured (`research/demo_reflection.py --card`): shares in [0, 1],
    intervals as (low, high)."""

    pairs: int  # held-out pairs judged
    two_stage: float  # ReflectRM's accuracy
    greedy: float  # greedy decoding's, on the same pairs
    gain: tuple[float, float, float]  # two-stage minus greedy: (value, low, high), a paired bootstrap 95 % interval
    decisive: int  # reflections whose two critiques reach different verdicts
    picks_right: tuple[float, float, float]  # of them, the share that chose the right critique (value, Wilson interval)
    same_pick: tuple[float, float, float]  # ... and the share that chose the same critique with the two exchanged


def measured_stage2(model_dir: str | Path) -> MeasuredStage2 | None:
    """The stage-2 figures the card of the judge in `model_dir` records; None when it records none, or holds
    anything but numbers where they belong (a card is read as data: a value that is not a number is not shown)."""
    ev = read_card(model_dir).get("eval") if (Path(model_dir) / CARD).is_file() else None
    if not isinstance(ev, dict):
        return None

    def share(x: Any) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not -1 <= x <= 1:
            raise ValueError(x)
        return float(x)

    def count(x: Any) -> int:
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise ValueError(x)
        return x

    def with_interval(value: Any, interval: Any) -> tuple[float, float, float]:
        if not isinstance(interval, (list, tuple)) or len(interval) != 2:
            raise ValueError(interval)
        return share(value), share(interval[0]), share(interval[1])

    try:
        acc, refl, gain = ev["accuracy"], ev["reflection"], ev["reflectrm_minus"]["greedy"]
        return MeasuredStage2(
            pairs=count(ev["heldout_pairs"]), two_stage=share(acc["reflectrm"]), greedy=share(acc["greedy"]),
            gain=with_interval(gain["diff"], (gain["lo"], gain["hi"])), decisive=count(refl["decisive_reflections"]),
            picks_right=with_interval(refl["picks_right"], refl["picks_right_interval"]),
            same_pick=with_interval(refl["same_pick_both_orders"], refl["same_pick_interval"]))
    except (KeyError, TypeError, ValueError):
        return None
