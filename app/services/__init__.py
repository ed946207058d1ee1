"""What the app's handlers call: one service per tab over one shared `Runtime`, built at start-up.

    services = Services.start(settings)
    services.judging.judge(pair); services.review.correct(judgment_id, verdict=1, author="ana")

The runtime (`runtime.py`) holds what every room shares: the store, the settings, the model, the generation
lock, cancel tokens, export folders and the data root. Each room holds the runtime and nothing of another room:
`judging` (the Judge tab and its data sets), `audit`, `review`, `rounds` (review rounds: reviewers, assignment,
agreement, adjudication), `curation`, `history`, `training` and
`evaluation`. Per-user state stays in the UI's `gr.State`. Every method handles one user action and returns
values (`reflectrm` and `db` types, or `reflectrm_app.records`), never UI components.
"""

from __future__ import annotations

from dataclasses import dataclass

from reflectrm_app.services.audit import AuditService
from reflectrm_app.services.curation import CurationService
from reflectrm_app.services.evaluation import EvaluationService
from reflectrm_app.services.history import HistoryService
from reflectrm_app.services.judging import JudgingService
from reflectrm_app.services.review import ReviewService
from reflectrm_app.services.rounds import RoundService
from reflectrm_app.services.runtime import Runtime
from reflectrm_app.services.training import TrainingService
from reflectrm_app.settings import AppSettings
from reflectrm.backends.base import Backend


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """The app's rooms, one per tab, over one runtime (shared by every user)."""

    runtime: Runtime
    judging: JudgingService
    audit: AuditService
    review: ReviewService
    rounds: RoundService
    curation: CurationService
    history: HistoryService
    training: TrainingService
    evaluation: EvaluationService

    @classmethod
    def over(cls, runtime: Runtime) -> Services:
        """Every room over `runtime` (training's runs left going by a stopped app are marked interrupted)."""
        return cls(runtime=runtime, judging=JudgingService(runtime), audit=AuditService(runtime),
                   review=ReviewService(runtime), rounds=RoundService.over(runtime),
                   curation=CurationService(runtime), history=HistoryService(runtime),
                   training=TrainingService.over(runtime), evaluation=EvaluationService(runtime))

    @classmethod
    def start(cls, settings: AppSettings, *, backend: Backend | None = None) -> Services:
        """Open the store and (in the background) the model the settings name, and the rooms over them."""
        return cls.over(Runtime.start(settings, backend=backend))

    def close(self) -> None:
        self.runtime.close()
