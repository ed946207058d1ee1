"""Where the bundled default model lives, and the CPU threads a judge may run on: one small module low in the layers.

The backends load it when no model is named, the CLIs and the app show it; none of them needs to
import `reflectrm.demo` (the demo's task domain, reward plugin and build tool) for a path.
"""

from __future__ import annotations

import os
from pathlib import Path

from reflectrm.errors import ConfigError

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "demo" / "model"
"""The demo judge's weights and tokenizer (built by the repository's `research/demojudge/`, shipped as package data)."""


def default_model(model: str | None) -> str:
    """`model`, or the bundled demo judge's folder when none is named."""
    return model or str(DEMO_MODEL_DIR)


def default_threads(model: str | None, device: str = "auto") -> int | None:
    """torch CPU threads for the transformers backend when none is asked for (None: torch's own setting).

    One for the bundled demo judge on a CPU: at 3.5 M parameters a second thread barely helps, and on a
    busy machine OpenMP threads wait on each other at every barrier (`bench/cli_threads.py` measures
    both). A real model keeps torch's setting, and so does everything when OMP_NUM_THREADS is set: the
    user chose.
    """
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    return 1 if model is None and device in ("auto", "cpu") else None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_threads(count: int, *, name: str = "threads") -> int:
    """`count` as a torch CPU thread count: 1 up to the usable CPUs (more never helps; 100,000 crashed torch)."""
    cpus = usable_cpus()
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= cpus:
        raise ConfigError(f"{name} is {count!r}: give a thread count from 1 to {cpus} (the CPUs this process may use)")
    return count
