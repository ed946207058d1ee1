"""The demo judge: a tiny Qwen3-architecture model the project builds and ships as the embedded default.

It judges a synthetic, verifiable domain (arithmetic answers), so every judgment can be checked
exactly. The package holds four things, each in its own place:

    model/       the weights (an asset; its path lives in `reflectrm.defaults`, low in the layers)
    tasks.py     the task domain: problems, pairs and worked analyses (pure, over the core)
    rewards.py   a reward plugin for GRPO (`reflectrm.training.rewards` loads it by name, never imports it)
    build.py     the build tool: `python -m reflectrm.demo.build`

Nothing below this package imports it: it sits above training in the layer order.
"""

from reflectrm.defaults import DEMO_MODEL_DIR

__all__ = ["DEMO_MODEL_DIR"]
