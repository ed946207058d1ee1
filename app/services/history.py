"""The History tab's service: the stored judgments, newest first, searched and limited in SQL."""

from __future__ import annotations

from dataclasses import dataclass

from reflectrm_app.services.runtime import Runtime
from reflectrm_db.records import JudgmentSummary


@dataclass
class HistoryService:
    """Stored judgments as the History tab lists them (a judgment opens through `JudgingService.open`)."""

    runtime: Runtime

    def history(self, *, search: str = "", limit: int = 200) -> list[JudgmentSummary]:
        """Stored judgments, newest first (filtered and limited in SQL)."""
        return self.runtime.store.history(search=search, limit=limit)
