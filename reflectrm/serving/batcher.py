"""Batching across requests: one worker thread owns the backend and judges every waiting request together.

A request is a `Job`: the pairs it needs judged and a `finish` that turns their judgments into its
answer (scores them, stores them). The worker takes every job waiting when the backend comes free
(or, when it was idle, those that arrive within `window_s` of the first) and judges all their pairs
in one `judge_many` call: one stage-1 batch and one stage-2 batch. Each pair's seeds derive from its
own content (`pipeline.derive_seed`), so a job's judgments are the same alone or batched.

Failures stay with their job: a backend failure (`BackendError`) fails every job of the round with
it; any other failure in a round of several jobs re-runs each job alone, so only the bad one fails.
A job whose client left is dropped before its round; a round whose every job left stops within a
decode step (`should_stop`); a job with live batchmates is judged to the end of its round.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from reflectrm.backends.base import Backend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import Judgment, PreferencePair
from reflectrm.errors import BackendError, Cancelled, GenerationCancelled, InputError, ReflectRMError

log = logging.getLogger(__name__)


class Busy(ReflectRMError):
    """The queue is full: the client should retry later (429)."""


class Draining(ReflectRMError):
    """The service is shutting down: the client should retry, on this server after its restart or another (503)."""


class ClientLeft(Cancelled):
    """The client disconnected before its judgments were done."""


@dataclass(eq=False)
class Job:
    """One request's pairs and what to do with their judgments (`finish` runs in the worker; its result answers)."""

    pairs: list[PreferencePair]
    finish: Callable[[list[Judgment]], Any]
    future: Future = field(default_factory=Future)
    judged: list[Judgment] = field(default_factory=list)
    left: bool = False  # the client disconnected

    def cancel(self) -> None:
        """The client left: drop the job before its round, or stop its round if no batchmate remains."""
        self.left = True

    @property
    def remaining(self) -> list[PreferencePair]:
        return self.pairs[len(self.judged):]


class Batcher:
    """Judges queued jobs in rounds on one worker thread (see the module docstring).

    Args:
        max_queue: jobs waiting for a round; `submit` raises `Busy` beyond it.
        window_s: how long an idle worker waits after a first job for batchmates.
        round_judgments: most pairs one round judges; a larger job is judged over several rounds.
        round_requests: most jobs one round holds (None: no limit; 1: one request at a time, the design
            before batching, kept to measure against).
    """

    def __init__(self, backend: Backend, judge_config: JudgeConfig, *, max_queue: int, window_s: float = 0.01,
                 round_judgments: int = 4096, round_requests: int | None = None,
                 counters: collections.Counter | None = None) -> None:
        self.backend, self.judge_config = backend, judge_config
        self.max_queue, self.window_s, self.round_judgments = max_queue, window_s, round_judgments
        self.round_requests = round_requests
        self.counters = counters if counters is not None else collections.Counter()
        self._waiting: collections.deque[Job] = collections.deque()
        self._running: list[Job] = []
        self._cond = threading.Condition()
        self._draining = self._stopping = False
        self._worker = threading.Thread(target=self._loop, name="reflectrm-batcher", daemon=True)
        self._worker.start()

    # -- what the routes call -------------------------------------------------------------------

    def submit(self, job: Job) -> Job:
        """Queue `job`; `Busy` when `max_queue` jobs already wait, `Draining` once shutdown began."""
        with self._cond:
            self._check_room()
            self._waiting.append(job)
            self._cond.notify_all()
        return job

    def check_room(self) -> None:
        """`Draining` or `Busy` if `submit` would refuse a job now (a route asks before reading a body;
        `submit` asks again and decides)."""
        with self._cond:
            self._check_room()

    def _check_room(self) -> None:
        if self._draining:
            raise Draining("the service is shutting down")
        if len(self._waiting) >= self.max_queue + (0 if self._running else 1):
            raise Busy(f"{self.max_queue} requests already queued")

    @property
    def queued(self) -> int:
        return len(self._waiting)

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def stopping(self) -> bool:
        """The drain's time-out has passed: a round in flight stops at its next decode step."""
        return self._stopping

    def drain(self, timeout_s: float) -> bool:
        """Refuse new jobs, finish the admitted ones within `timeout_s`, then fail the rest with `Draining`.

        Returns whether every admitted job was finished.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._draining = True
            while (self._waiting or self._running) and time.monotonic() < deadline:
                self._cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            finished = not (self._waiting or self._running)
            self._stopping = True  # a round still running stops at its next decode step
            for job in self._waiting:
                _fail(job, Draining("the service is shutting down"))
            self._waiting.clear()
            self._cond.notify_all()
            while self._running:  # bounded: the round stops within a decode step
                self._cond.wait(0.1)
        return finished

    # -- the worker -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            try:
                self._round(jobs)
            finally:
                with self._cond:
                    self._running = []
                    self._cond.notify_all()

    def _take(self) -> list[Job] | None:
        """The next round's jobs: all waiting (within `round_judgments`), after the idle window."""
        idle = False
        with self._cond:
            while not self._waiting:
                if self._stopping:
                    return None
                idle = True
                self._cond.wait(0.5)
        if idle and self.window_s > 0:
            time.sleep(self.window_s)  # the backend was idle: let the rest of a burst arrive
        with self._cond:
            jobs, room = [], self.round_judgments
            most = self.round_requests or len(self._waiting)
            while self._waiting and (room > 0 or not jobs) and len(jobs) < most:
                job = self._waiting.popleft()
                if job.left:
                    _fail(job, ClientLeft("the client left"))
                    self.counters["cancelled"] += 1
                    continue
                jobs.append(job)
                room -= len(job.remaining)
            self._running = jobs
            return jobs

    def _round(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        try:
            self._judge(jobs)
        except GenerationCancelled:
            for job in jobs:
                _fail(job, Draining("the service is shutting down") if self._stopping
                      else ClientLeft("the client left"))
            self.counters["cancelled"] += sum(job.left for job in jobs)
        except BackendError as exc:
            if isinstance(exc, InputError) and len(jobs) > 1:  # one request's prompt too long: only it fails
                self._isolate(jobs)
                return
            for job in jobs:
                _fail(job, exc)
        except Exception as exc:  # noqa: BLE001 - a bad request must not fail its batchmates: judge each alone
            if len(jobs) == 1:
                log.warning("a request failed: %s", exc)
                _fail(jobs[0], exc)
                return
            self._isolate(jobs)

    def _isolate(self, jobs: list[Job]) -> None:
        """A round failed for a reason one job may hold: judge each job alone, so only that one fails."""
        self.counters["isolated_rounds"] += 1
        for job in jobs:
            self._round([job])

    def _judge(self, jobs: list[Job]) -> None:
        """One round: every job's next slice of pairs in one `judge_many` batch; finished jobs answered."""
        from reflectrm.pipeline import judge_many

        slices, room = [], self.round_judgments
        for job in jobs:
            take = job.remaining[:max(room, 0)]  # `_take` leaves room for the first job: it gets a slice
            slices.append(take)
            room -= len(take)
        unique: dict[PreferencePair, int] = {}  # the same pair asked twice (two requests) is judged once
        for take in slices:
            for pair in take:
                unique.setdefault(pair, len(unique))
        pairs = list(unique)

        def stop() -> bool:
            return self._stopping or all(job.left for job in jobs)

        started = time.perf_counter()
        judgments = list(judge_many(pairs, self.backend, self.judge_config, batch_size=max(1, len(pairs)),
                                    should_stop=stop))
        self.counters["generation_seconds"] += time.perf_counter() - started
        self.counters["batches"] += 1
        self.counters["batched_requests"] += len(jobs)
        for job, take in zip(jobs, slices):
            job.judged.extend(judgments[unique[p]] for p in take)
        for job in jobs:
            if job.remaining:
                with self._cond:
                    self._waiting.appendleft(job)  # a large job: its next slice in the next round
            else:
                self._finish(job)

    def finish(self, job: Job) -> None:
        """Answer a job whose pairs are all judged (or that has none) without a round: `finish`, or its failure."""
        self._finish(job)

    def _finish(self, job: Job) -> None:
        if job.left:
            _fail(job, ClientLeft("the client left"))
            return
        try:
            job.future.set_result(job.finish(job.judged))
        except Exception as exc:  # noqa: BLE001 - e.g. the store failed: this request's answer, not the worker's end
            log.warning("a request failed after judging: %s", exc)
            _fail(job, exc)


def _fail(job: Job, exc: BaseException) -> None:
    if not job.future.done():
        job.future.set_exception(exc)

