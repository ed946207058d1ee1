"""The Curate tab's service: browse the derived examples, derive the paper's examples from a labelled data set's
judgments, exclude or restore, the mix, snapshots and exports (to the runtime's export folders)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm_app.records import ExampleFilter, ExampleRow, Mix, contest_reason
from reflectrm_app.services.runtime import Runtime
from reflectrm_db.records import ExampleKind, LabelledDerivation, SnapshotRecord, StoredJudgment
from reflectrm.core.types import Choice
from reflectrm.errors import InputError

BROWSE_SCAN_PAGES = 20
"""Pages Curate reads at most to fill one page under a text or agreement filter (those need the texts)."""


@dataclass
class CurationService:
    """The training examples: what the Curate tab lists, changes, snapshots and exports."""

    runtime: Runtime

    def browse(
        self, kind: ExampleKind, filters: ExampleFilter = ExampleFilter(), *, limit: int = 500
    ) -> list[ExampleRow]:
        """Derived examples of one kind with their texts, newest first, filtered.

        State, source and days filter in SQL; the agreement and text filters need the judgments' texts, so
        pages of `limit` are read until `limit` rows are kept (at most `BROWSE_SCAN_PAGES` pages).
        """
        kept: list[ExampleRow] = []
        for page in range(BROWSE_SCAN_PAGES):
            records = self.runtime.store.examples(kind, states=filters.states or None, source=filters.source or None,
                                          since=filters.since, until=filters.until, newest_first=True,
                                          limit=limit, offset=page * limit)
            kept.extend(row for row in self._example_rows(records) if filters.keeps(row))
            if len(kept) >= limit or len(records) < limit:
                break
        return kept[:limit]

    def _example_rows(self, records: Sequence[Any]) -> list[ExampleRow]:
        stored = {s.id: s for s in self.runtime.store.load_many(sorted({r.judgment_id for r in records if r.judgment_id}))}
        wanted = sorted({r.correction_id for r in records if r.correction_id})
        verdicts = {c.id: c.verdict for c in self.runtime.store.corrections(correction_ids=wanted)} if wanted else {}
        return [_example_row(r, stored.get(r.judgment_id or -1), verdicts.get(r.correction_id or -1))
                for r in records]

    def derive_from_labels(self, source: str, *, seed: int = 0) -> LabelledDerivation:
        """The paper's training data from the active judge's own judgments of a labelled data set's pairs (judge them
        first: Evaluate the data set, or audit it): a preference example per pair the judge's samples did not all
        get right, and one reflection pair (a right against a wrong analysis) where they disagree. Pairs a person
        corrected keep only their correction's examples; a second run adds only what is new."""
        if not source:
            raise InputError("pick a labelled data set whose judgments to learn from (Evaluate it first)")
        if source not in self.runtime.store.sources():
            raise InputError(f"data set {source!r} does not exist: pick one from the list")
        report = self.runtime.store.derive_from_labels(source=source, model=self.runtime.backend().model_id, seed=seed)
        if not report.judgments:
            raise InputError(f"data set {source!r} has no labelled pairs judged with samples by the active judge "
                             f"({self.runtime.active_judge_label()}): evaluate it with the reflectrm or majority strategy first")
        return report

    def set_excluded(self, kind: ExampleKind, ids: Sequence[int], *, excluded: bool) -> int:
        if not ids:
            raise InputError("no examples given: select rows or type their ids")
        if excluded:
            return self.runtime.store.exclude_examples(kind, ids)
        return self.runtime.store.restore_examples(kind, ids)

    def mix(self) -> Mix:
        counts = self.runtime.store.example_counts()
        return Mix(preference=counts["preference"], reflection=counts["reflection"])

    def snapshot(self, name: str, *, note: str = "") -> SnapshotRecord:
        return self.runtime.store.snapshot(name.strip(), note=note)

    def snapshots(self) -> list[SnapshotRecord]:
        return self.runtime.store.snapshots()

    def export(self, kind: str, *, fmt: str, snapshot: str = "", include_inactive: bool = False) -> Path:
        """Export to a new temporary file (a .zip for the `hf` folder format) and return its path."""
        self.runtime.exports.prune()
        folder = self.runtime.exports.new_folder()
        suffix = {"jsonl": ".jsonl", "parquet": ".parquet", "hf": ""}.get(fmt, "")
        out = folder / f"{kind}{'-' + snapshot if snapshot else ''}{suffix}"
        try:
            self.runtime.store.export(kind, fmt=fmt, out=out, include_inactive=include_inactive, snapshot=snapshot or None)
            if fmt == "hf":
                archive = Path(shutil.make_archive(str(out), "zip", root_dir=out))
                shutil.rmtree(out)  # the zip is what is downloaded
                return archive
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return out


def _example_row(record: Any, stored: StoredJudgment | None, human: Choice | None) -> ExampleRow:
    texts: dict[int, str] = {}
    pair = None
    judge_verdict = None
    if stored is not None:
        pair, judge_verdict = stored.judgment.pair, stored.judgment.verdict
        texts = {sid: r.analysis for sid, r in zip(stored.sample_ids, stored.judgment.rollouts)}
    critiques = [texts.get(c, f"(sample {c})") for c in record.critiques] + ["", ""]
    return ExampleRow(
        kind=record.kind, id=record.id, state=record.state,
        source=pair.source if pair else "", subset=pair.subset if pair else "",
        query=pair.query if pair else "", response_1=pair.response_1 if pair else "",
        response_2=pair.response_2 if pair else "", label=record.label,
        judge_verdict=judge_verdict, human_verdict=human, critique_1=critiques[0], critique_2=critiques[1],
        judgment_id=record.judgment_id, correction_id=record.correction_id, created_at=record.created_at,
        known_label=pair.label if pair else None,
        contested=contest_reason(stored.judgment, human) if stored is not None and human else "",
    )
