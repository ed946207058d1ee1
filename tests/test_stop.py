"""Stop inside generation: the real demo judge, asked for thousands of tokens, stops within a second."""

from __future__ import annotations

import threading
import time

import pytest

from reflectrm.backends import BackendConfig, ScriptedBackend, load_backend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import PreferencePair
from reflectrm.errors import Cancelled, GenerationCancelled
from reflectrm.pipeline import Progress, Stage, judge_many

PAIR = PreferencePair.from_query("What is 17 + 8?", "The answer is 25.", "The answer is 35.")


@pytest.fixture
def endless_judge():
    """The demo judge with no stop token, so stage 1 runs to max_new_tokens (a real judge writing at length)."""
    import torch

    threads = torch.get_num_threads()
    # One thread, as the app runs the demo judge: on a busy 2-core machine two threads spin-wait each other and a
    # decode step of this 3 M-parameter model grows from ~12 ms to ~250 ms (measured at load 9).
    torch.set_num_threads(1)
    backend = load_backend(BackendConfig(device="cpu"))
    backend.stop_ids = {-1}  # no token id is -1: every row decodes its whole budget
    # Warm up at this shape: the first decode steps of a process are slow (one-time kernel set-up), not Stop's cost.
    list(judge_many([PAIR], backend, JudgeConfig(n=8, max_new_tokens=64, strategy="majority")))
    yield backend
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_stop_ends_a_long_stage_1_within_a_second(endless_judge) -> None:
    stop = threading.Event()
    seen: list[Progress] = []
    config = JudgeConfig(n=8, max_new_tokens=3500)  # 8 x 3500 tokens: tens of seconds on a CPU
    forwards = {"before": 0, "after": 0}

    def count(*_: object) -> None:  # a forward pass ends: one decode step (or the prompt's)
        forwards["after" if stop.is_set() else "before"] += 1

    def press_stop() -> None:
        time.sleep(1.0)
        stop.set()

    hook = endless_judge.model.register_forward_hook(count)
    threading.Thread(target=press_stop, daemon=True).start()
    try:
        with pytest.raises(GenerationCancelled):
            list(judge_many([PAIR], endless_judge, config, progress=seen.append, should_stop=stop.is_set))
    finally:
        hook.remove()
    assert forwards["before"] > 1  # it was decoding when Stop came
    assert forwards["after"] <= 1, f"{forwards['after']} decode steps ran after Stop"  # at most the one under way
    assert [(e.stage, e.done) for e in seen] == [(Stage.SAMPLING, 0)]  # it was inside stage 1 when stopped


@pytest.mark.slow
def test_without_stop_the_same_judge_runs_on(endless_judge) -> None:
    """The control: the judge above really would keep generating (so the stop test measures Stop)."""
    calls = 0

    def count() -> bool:
        nonlocal calls
        calls += 1
        return calls > 200  # stop after 200 decode steps, far short of the budget

    with pytest.raises(GenerationCancelled, match="after 199 of up to"):
        list(judge_many([PAIR], endless_judge, JudgeConfig(n=8, max_new_tokens=3500), should_stop=count))


def test_scripted_backend_honours_should_stop() -> None:
    outputs = 0

    def responder(text: str, seed: int, params: object) -> str:
        nonlocal outputs
        outputs += 1
        return "<Analysis>a</Analysis><Result>Response 1 is better than Response 2</Result>"

    backend = ScriptedBackend(responder)
    with pytest.raises(Cancelled):
        list(judge_many([PAIR], backend, JudgeConfig(), should_stop=lambda: outputs >= 3))
    assert outputs == 3  # the fourth sample was never generated
