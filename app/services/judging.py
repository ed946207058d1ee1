"""The Judge tab's service: judge a pair, re-aggregate or open a stored judgment, and the data sets to pick from
(the store's sources, the demo domain's pairs and examples, imported files)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from reflectrm_app.records import JudgeResult
from reflectrm_app.services.runtime import Runtime, refuse_a_contradicting_label
from reflectrm_db.records import ImportReport, StoredJudgment
from reflectrm.core.types import PreferencePair
from reflectrm.demo import Domain, demo_domain, judge_domain
from reflectrm.errors import ConfigError, ReflectRMError
from reflectrm.pipeline import ProgressCallback, judge_many, rejudge

log = logging.getLogger(__name__)


@dataclass
class JudgingService:
    """Judge, re-aggregate and open judgments; list and add the pairs to judge."""

    runtime: Runtime

    # --- data sets ---------------------------------------------------------------------------------------

    def sources(self) -> list[str]:
        """Names of the data sets (pair sources) in the store."""
        return self.runtime.store.sources()

    def pairs(self, source: str, *, limit: int = 500) -> list[tuple[int, PreferencePair]]:
        return [(p.id, p.pair) for p in self.runtime.store.list_pairs(source=source or None, limit=limit)]

    def import_file(self, path: Path, *, source: str | None = None) -> ImportReport:
        return self.runtime.store.import_pairs(Path(path), source=source or None)

    def demo_domain(self) -> Domain:
        """The demo task domain the app offers: the active judge's when it is a demo judge, else the shipped one's."""
        return judge_domain(self.runtime.active_judge()) or demo_domain()

    def demo_source(self) -> str:
        """The data set `add_demo_pairs` adds to ("demo-arith", "demo-steps": `demo_domain`'s)."""
        return self.demo_domain().source

    def add_demo_pairs(self, count: int, *, seed: int = 0) -> ImportReport:
        """Labelled pairs of the demo domain (`demo_domain`; data set `demo_source()`): checkable problems."""
        domain = self.demo_domain()
        return self.runtime.store.add_pairs(domain.make_pairs(count, seed=seed, source=domain.source))

    def judge_examples(self) -> tuple[tuple[str, str, str], ...]:
        """(query, response 1, response 2) examples for the Judge tab: the active judge's domain's when it is a
        demo judge, none for any other model (or a demo card naming an unknown domain, logged)."""
        try:
            domain = judge_domain(self.runtime.active_judge())
        except ReflectRMError as exc:
            log.warning("no judge examples: %s", exc)
            return ()
        return domain.examples if domain is not None else ()

    # --- judge -------------------------------------------------------------------------------------------

    def judge(
        self,
        pair: PreferencePair,
        *,
        strategy: str | None = None,
        seed: int | None = None,
        cancel: threading.Event | None = None,
        progress: ProgressCallback | None = None,
    ) -> JudgeResult:
        """Judge one pair and record it (refused, before any generation, when its texts are stored already under
        the other known label: `runtime.refuse_a_contradicting_label`)."""
        refuse_a_contradicting_label(self.runtime.store, pair)
        config = self.runtime.judge_config(strategy, seed)
        backend = self.runtime.backend(cancel)
        [judgment] = list(judge_many([pair], backend, config, progress=progress))
        [jid] = self.runtime.store.record([judgment], swapped=False)
        return JudgeResult(judgment_id=jid, judgment=judgment, generated=backend.calls)

    def reaggregate(self, judgment_id: int, strategy: str, *, cancel: threading.Event | None = None) -> JudgeResult:
        """A stored judgment's rollouts aggregated with `strategy` (the record itself is unchanged).

        Generates only what the strategy needs and the record lacks (a greedy output, more samples,
        reflections against another anchor); `generated` says how many generation calls that took.
        """
        stored = self.runtime.store.load(judgment_id)
        if strategy == stored.judgment.strategy:
            return JudgeResult(judgment_id=judgment_id, judgment=stored.judgment)
        try:  # the library keeps the record's model when nothing has to be generated (no model is loaded)
            judgment, calls = rejudge(stored.judgment, strategy), 0
        except ConfigError:  # the strategy needs outputs the record lacks: generate just those
            backend = self.runtime.backend(cancel)
            judgment, calls = rejudge(stored.judgment, strategy, backend), backend.calls
        return JudgeResult(judgment_id=judgment_id, judgment=judgment, reaggregated=True, generated=calls,
                           recorded_strategy=stored.judgment.strategy)

    def open(self, judgment_id: int) -> StoredJudgment:
        """A stored judgment exactly as recorded."""
        return self.runtime.store.load(int(judgment_id))
