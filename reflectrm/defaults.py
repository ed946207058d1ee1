"""Where the bundled default model lives: one small module low in the layers, importing nothing.

The backends load it when no model is named, the CLIs and the app show it; none of them needs to
import `reflectrm.demo` (the demo's task domain, reward plugin and build tool) for a path.
"""

from __future__ import annotations

from pathlib import Path

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "demo" / "model"
"""The demo judge's weights and tokenizer (built by `python -m reflectrm.demo.build`, shipped as package data)."""


def default_model(model: str | None) -> str:
    """`model`, or the bundled demo judge's folder when none is named."""
    return model or str(DEMO_MODEL_DIR)
