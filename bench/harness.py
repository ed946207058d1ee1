"""What every benchmark script shares: its argument parser, a timer, the machine's load, ratios, the final line.

    from harness import finish, load_line, parser, ratio, timer

    ap = parser(__doc__)                     # the description is the docstring's first line
    with timer() as t:
        work()
    print(load_line())                       # "load average 1.9 2.1 2.3 on 2 CPUs"
    finish({"seconds": t.seconds, "speedup": ratio(slow, fast)})   # the last line: one JSON object

Benchmarks print figures; nothing here asserts a speed. Accuracy figures and their intervals come from
`reflectrm.eval` (`paired_difference`, `mcnemar_exact`, `paired_bootstrap`), never from a copy here.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser whose description is the script docstring's first line."""
    return argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)


@dataclass
class Timer:
    """Wall-clock seconds of a `with timer()` block; `seconds` reads the time so far inside it."""

    started: float
    stopped: float | None = None

    def stop(self) -> float:
        self.stopped = time.perf_counter()
        return self.seconds

    @property
    def seconds(self) -> float:
        return (self.stopped if self.stopped is not None else time.perf_counter()) - self.started


def stopwatch() -> Timer:
    """A started timer whose `seconds` grows until `stop()`; `timer()` is the same as a `with` block."""
    return Timer(started=time.perf_counter())


@contextmanager
def timer() -> Iterator[Timer]:
    t = stopwatch()
    try:
        yield t
    finally:
        t.stopped = time.perf_counter()


def load() -> dict[str, Any]:
    """The 1, 5 and 15 minute load averages and the CPUs this process may use (the machine may be shared)."""
    one, five, fifteen = os.getloadavg()
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return {"load_1m": round(one, 2), "load_5m": round(five, 2), "load_15m": round(fifteen, 2), "cpus": cpus}


def load_line() -> str:
    """`load average 1.90 2.10 2.30 on 2 CPUs`: what `uptime` says that matters to a timing."""
    now = load()
    return f"load average {now['load_1m']:.2f} {now['load_5m']:.2f} {now['load_15m']:.2f} on {now['cpus']} CPUs"


def ratio(numerator: float, denominator: float, *, digits: int = 2) -> float | None:
    """numerator / denominator rounded, or None when the denominator is 0 (no figure rather than inf)."""
    if not denominator:
        return None
    return round(numerator / denominator, digits)


def finish(figures: dict[str, Any], *, with_load: bool = True) -> int:
    """Print the final line, one JSON object (the load at the end added under "load"); returns exit code 0."""
    line = dict(figures)
    if with_load and "load" not in line:
        line["load"] = load()
    print(json.dumps(line, allow_nan=False, default=str), flush=True)
    return 0
