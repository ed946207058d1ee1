"""The demo judge: a tiny Qwen3-architecture model the project builds and ships as the embedded default.

It judges a synthetic, verifiable task domain, so every judgment can be checked exactly. Two domains
exist: `tasks` (arithmetic answers) and `steps` (multi-step running sums); the shipped judge's
`demo_card.json` names the one it was built on ("domain"; no key means `tasks`, the first judge's),
and everything that means "the demo judge's domain" asks `demo_domain()`, so swapping the model
folder is all it takes to ship a judge on another domain. The package holds:

    model/          the weights (an asset; its path lives in `reflectrm.defaults`, low in the layers)
    tasks.py        the arithmetic domain: problems, pairs and worked analyses (pure, over the core)
    steps.py        the running-sum domain, with the same API (`KINDS`, `make_pairs`, `fresh_pairs`,
                    `other_problems`, `problem_of`, `response_example`, `EXAMPLES`)
    rewards.py      a reward plugin for GRPO (`reflectrm.training.rewards` loads it by name, never imports it)
    build.py        the build tool: `python -m reflectrm.demo.build` (steps_build.py for the steps domain)

Nothing below this package imports it: it sits above training in the layer order.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from reflectrm.defaults import DEMO_MODEL_DIR
from reflectrm.errors import ConfigError

__all__ = ["CARD", "DEFAULT_DOMAIN", "DEMO_MODEL_DIR", "DOMAINS", "OUTPUT_TOKENS", "demo_domain", "domain_name",
           "domain_of", "judge_domain", "output_tokens", "pair_source", "read_card"]

CARD = "demo_card.json"
"""The file a demo judge's folder describes its build in (written by the build tools)."""

DEFAULT_DOMAIN = "reflectrm.demo.tasks"
"""The domain of a judge whose card names none: the first demo judge's cards had no "domain" key."""

DOMAINS: dict[str, str] = {"reflectrm.demo.tasks": "demo-arith", "reflectrm.demo.steps": "demo-steps"}
"""The domains a demo card may name, each with the data-set name (`source`) its demo pairs get."""

OUTPUT_TOKENS: dict[str, int] = {"reflectrm.demo.tasks": 96, "reflectrm.demo.steps": 256}
"""Tokens one analysis or reflection of each domain's judge needs at most (arithmetic 40-70; running sums: an
analysis up to 122, a reflection that walks six steps, subtracting their values, and reads the question again up
to 207)."""


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


def domain_name(model_dir: str | Path) -> str:
    """The domain the demo judge in `model_dir` was built on, as its card names it (checked against `DOMAINS`)."""
    name = read_card(model_dir).get("domain", DEFAULT_DOMAIN)
    if name not in DOMAINS:
        path = Path(model_dir) / CARD
        raise ConfigError(f"{path}: unknown demo domain {name!r}: use one of {', '.join(sorted(DOMAINS))}")
    return name


def _module(name: str) -> ModuleType:
    """The domain module called `name`, imported by a fixed table: a card never makes us import a string it holds."""
    if name == "reflectrm.demo.steps":
        from reflectrm.demo import steps

        return steps
    from reflectrm.demo import tasks

    return tasks


def domain_of(model_dir: str | Path) -> ModuleType:
    """The task-domain module (`reflectrm.demo.tasks` or `reflectrm.demo.steps`) of the demo judge in `model_dir`.

    A folder without a card, or a card without "domain", means `tasks`; a card naming anything else
    (or not JSON) is a `ConfigError` naming the value.
    """
    return _module(domain_name(model_dir))


def demo_domain() -> ModuleType:
    """The domain of the shipped demo judge (`DEMO_MODEL_DIR`): where demo pairs and the demo benchmark come from."""
    return domain_of(DEMO_MODEL_DIR)


def judge_domain(model: str | Path) -> ModuleType | None:
    """The domain of the judge `model` (a path or a Hugging Face id) when it is a demo judge, i.e. a folder
    holding a demo card; None for any other model. A card naming an unknown domain is a `ConfigError`."""
    return domain_of(model) if (Path(model) / CARD).is_file() else None


def pair_source(domain: ModuleType) -> str:
    """The data-set name demo pairs of `domain` are stored under ("demo-arith", "demo-steps")."""
    return DOMAINS[domain.__name__]


def output_tokens(domain: ModuleType) -> int:
    """A `max_new_tokens` that fits any analysis or reflection of `domain`'s judge (short ones keep CPU runs quick)."""
    return OUTPUT_TOKENS[domain.__name__]
