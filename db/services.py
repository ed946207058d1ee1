"""The store's services: what the CLI and the app call. Each method handles one user action in one
transaction (`with sessions.begin():`, retried as a whole on a lock conflict) and returns values.

    store = JudgmentStore.open("sqlite:///reflectrm.db")      # or REFLECTRM_DATABASE_URL
    [jid] = store.record([judgment], swapped=False)
    assert store.load(jid).judgment == judgment
    store.correct(jid, verdict=2, author="ana", marks={3: "right"})
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from db import curation, exporting, repository, schema, training
from db.derivation import DEFAULT_MAX_PAIRS, Mark
from db.engine import make_engine, run_transaction, session_factories
from db.formats import check_export
from db.importing import read_pair_file
from db.records import (
    CorrectionRecord,
    ExampleKind,
    ExampleRecord,
    ImportReport,
    JudgmentSummary,
    SnapshotRecord,
    StoredJudgment,
    StoredPair,
    TrainingRunRecord,
)
from db.settings import Settings, normalise_url
from reflectrm.core.types import Choice, Judgment, PreferencePair
from reflectrm.errors import ConfigError, InputError

T = TypeVar("T")


def load_settings() -> Settings:
    """Settings from the environment (REFLECTRM_*), validated."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"setting {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc


@contextmanager
def reachable(engine: Engine) -> Iterator[None]:
    """Turn "cannot connect" into a `ConfigError` that names the database and what to check."""
    try:
        yield
    except OperationalError as exc:
        engine.dispose()
        url = engine.url.render_as_string(hide_password=True)
        raise ConfigError(
            f"cannot open the store at {url} ({str(exc.orig).strip()}): check the URL, that the file's folder "
            "exists, or that the database server is running"
        ) from exc


class JudgmentStore:
    """Judgments, corrections and training data in one database (SQLite or PostgreSQL).

    Thread-safe: share one store between threads (the app builds one at start-up).
    """

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self._writes, self._reads = session_factories(engine)

    @classmethod
    def open(cls, url: str | None = None, *, settings: Settings | None = None) -> JudgmentStore:
        """Open the store at `url` (default: REFLECTRM_DATABASE_URL, else ./reflectrm.db).

        A new database gets the schema; one at an older schema revision must be upgraded first
        (`reflectrm db upgrade`), which `ConfigError` says.
        """
        settings = settings or load_settings()
        engine = make_engine(settings.database_url if url is None else normalise_url(url), settings)
        with reachable(engine):
            schema.ensure_schema(engine)
        return cls(engine, settings)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> JudgmentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, work: Callable[[Session], T]) -> T:
        return run_transaction(self._writes, work, retry_s=self.settings.lock_retry_s)

    def _read(self, work: Callable[[Session], T]) -> T:
        return run_transaction(self._reads, work, retry_s=self.settings.lock_retry_s)

    # --- pairs and judgments ------------------------------------------------------------------------

    def add_pairs(self, pairs: Sequence[PreferencePair]) -> ImportReport:
        """Store pairs (identical ones once)."""
        ids, added = self._write(lambda s: repository.add_pairs(s, pairs=pairs))
        return ImportReport(added=added, already_present=len(set(ids)) - added, pair_ids=tuple(ids))

    def import_pairs(
        self, path: Path, *, mapping: Mapping[str, str] | None = None, source: str | None = None,
        labels: str = "auto", split: str | None = None,
    ) -> ImportReport:
        """Import a file of pairs (JSONL, JSON, CSV, Parquet, `datasets`): all rows or, on the first bad row, none."""
        return self.add_pairs(read_pair_file(path, mapping=mapping, source=source, labels=labels, split=split))

    def list_pairs(self, *, source: str | None = None, limit: int = 100, offset: int = 0) -> list[StoredPair]:
        return self._read(lambda s: repository.list_pairs(s, source=source, limit=limit, offset=offset))

    def record(self, judgments: Sequence[Judgment], *, swapped: bool) -> list[int]:
        """Store judgments with their samples and reflections; returns their row ids, in order.

        With `swapped=True` the list holds [original, swapped] pairs one after the other (as
        `judge_both_orders` returns them), and the two judgments of each are linked.
        """
        _check_swapped(judgments, swapped=swapped)
        return self._write(lambda s: repository.add_judgments(s, judgments=judgments, swapped=swapped))

    def load(self, judgment_id: int) -> StoredJudgment:
        """A judgment exactly as recorded (`load(id).judgment == recorded`)."""
        found = self._read(lambda s: repository.get_judgments(s, judgment_ids=[judgment_id]))
        if not found:
            raise InputError(f"judgment {judgment_id} does not exist: pick one from the judgment list")
        return found[0]

    def load_many(self, judgment_ids: Sequence[int]) -> list[StoredJudgment]:
        return self._read(lambda s: repository.get_judgments(s, judgment_ids=judgment_ids))

    def review_queue(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        include_corrected: bool = False,
        flagged_only: bool = False,
        source: str | None = None,
    ) -> list[JudgmentSummary]:
        """Judgments most worth a person's review first.

        Order: most review flags first (`REVIEW_FLAGS`: the judge abstained, the verdict disagrees
        with the pair's label, the swapped-order twin picked the other response, reflection
        overturned the anchor's own prediction, the vote was split), then the lowest anchor
        confidence (none or -inf first), then the oldest. Corrected judgments are left out unless asked.
        """
        return self._read(
            lambda s: repository.review_queue(
                s,
                include_corrected=include_corrected,
                flagged_only=flagged_only,
                source=source,
                limit=limit,
                offset=offset,
            )
        )

    # --- corrections --------------------------------------------------------------------------------

    def correct(
        self,
        judgment_id: int,
        *,
        verdict: Choice,
        author: str,
        note: str = "",
        marks: Mapping[int, Mark] | None = None,
        max_pairs: int = DEFAULT_MAX_PAIRS,
        seed: int | None = None,
    ) -> CorrectionRecord:
        """Record a person's verdict on a judgment and derive its training examples.

        Args:
            verdict: the better response (1 or 2) in the judgment's order.
            marks: rollout position (in `Judgment.rollouts`) -> "right" / "wrong"; overrides the
                prediction-based rule for those analyses.
            max_pairs: reflection pairs derived at most.
            seed: seeds the choice of reflection pairs and their critique order; recorded (default: random).
        """
        seed = secrets.randbits(62) if seed is None else seed

        def work(s: Session) -> CorrectionRecord:
            cid = curation.add_correction(
                s,
                judgment_id=judgment_id,
                author=author,
                verdict=verdict,
                note=note,
                marks=dict(marks or {}),
                max_pairs=max_pairs,
                seed=seed,
            )
            return curation.get_corrections(s, correction_ids=[cid])[0]

        return self._write(work)

    def edit_correction(
        self,
        correction_id: int,
        *,
        author: str,
        verdict: Choice | None = None,
        note: str | None = None,
        marks: Mapping[int, Mark] | None = None,
    ) -> CorrectionRecord:
        """Change a correction (None keeps a field; `marks` replaces all marks); its examples follow."""

        def work(s: Session) -> CorrectionRecord:
            curation.edit_correction(
                s,
                correction_id=correction_id,
                author=author,
                verdict=verdict,
                note=note,
                marks=None if marks is None else dict(marks),
            )
            return curation.get_corrections(s, correction_ids=[correction_id])[0]

        return self._write(work)

    def withdraw_correction(self, correction_id: int, *, author: str) -> CorrectionRecord:
        """Withdraw a correction; every example it derived is withdrawn with it."""

        def work(s: Session) -> CorrectionRecord:
            curation.withdraw_correction(s, correction_id=correction_id, author=author)
            return curation.get_corrections(s, correction_ids=[correction_id])[0]

        return self._write(work)

    def corrections(self, *, judgment_id: int | None = None, include_withdrawn: bool = True) -> list[CorrectionRecord]:
        return self._read(
            lambda s: curation.get_corrections(s, judgment_id=judgment_id, include_withdrawn=include_withdrawn)
        )

    # --- training examples and snapshots -------------------------------------------------------------

    def examples(
        self,
        kind: ExampleKind,
        *,
        states: Sequence[str] | None = ("active",),
        correction_id: int | None = None,
        limit: int | None = 100,
        offset: int = 0,
    ) -> list[ExampleRecord]:
        """Derived examples of one kind ("preference" / "reflection"); `states=None` lists every state."""
        return self._read(
            lambda s: curation.list_examples(
                s, kind=kind, states=states, correction_id=correction_id, limit=limit, offset=offset
            )
        )

    def exclude_examples(self, kind: ExampleKind, example_ids: Sequence[int]) -> int:
        """Set examples aside (snapshots skip them); returns how many changed."""
        return self._write(
            lambda s: curation.set_example_state(s, kind=kind, example_ids=example_ids, state="excluded")
        )

    def restore_examples(self, kind: ExampleKind, example_ids: Sequence[int]) -> int:
        """Bring excluded examples back; returns how many changed."""
        return self._write(lambda s: curation.set_example_state(s, kind=kind, example_ids=example_ids, state="active"))

    def snapshot(self, name: str, *, note: str = "") -> SnapshotRecord:
        """Freeze every active example into a named, content-hashed snapshot."""
        return self._write(lambda s: curation.create_snapshot(s, name=name, note=note))

    def snapshots(self) -> list[SnapshotRecord]:
        return self._read(curation.list_snapshots)

    def snapshot_members(self, snapshot_id: int) -> dict[ExampleKind, list[int]]:
        return self._read(lambda s: curation.snapshot_member_ids(s, snapshot_id=snapshot_id))

    def verify_snapshot(self, snapshot_id: int) -> bool:
        """Whether a snapshot's members still hash to its recorded hash."""

        def work(s: Session) -> bool:
            stored = curation.get_snapshot(s, snapshot_id=snapshot_id)
            return curation.snapshot_hash(s, snapshot_id=snapshot_id) == stored.content_hash

        return self._read(work)

    # --- training runs -------------------------------------------------------------------------------

    def add_training_run(
        self,
        *,
        snapshot_id: int | None,
        base_model: str,
        run_dir: str,
        config: Mapping[str, Any],
        status: str = "starting",
    ) -> TrainingRunRecord:
        """Record a training run on a snapshot (its folder, model and `TrainConfig` dict)."""

        def work(s: Session) -> TrainingRunRecord:
            run_id = training.add_training_run(s, snapshot_id=snapshot_id, base_model=base_model, run_dir=run_dir,
                                               config=config, status=status)
            return training.get_training_runs(s, run_ids=[run_id])[0]

        return self._write(work)

    def update_training_run(self, run_id: int, **changes: Any) -> TrainingRunRecord:
        """Change a run's status, step, figures, error, log or output model (see `db.training.UPDATABLE`)."""

        def work(s: Session) -> TrainingRunRecord:
            training.update_training_run(s, run_id=run_id, changes=changes)
            return training.get_training_runs(s, run_ids=[run_id])[0]

        return self._write(work)

    def training_runs(self, *, statuses: Sequence[str] | None = None) -> list[TrainingRunRecord]:
        """Recorded runs, oldest first (only those in `statuses` when given)."""
        return self._read(lambda s: training.get_training_runs(s, statuses=statuses))

    def training_run(self, run_id: int) -> TrainingRunRecord:
        found = self._read(lambda s: training.get_training_runs(s, run_ids=[run_id]))
        if not found:
            raise InputError(f"training run {run_id} does not exist: pick one from the list")
        return found[0]

    # --- export and maintenance ---------------------------------------------------------------------

    def export(
        self,
        kind: str,
        *,
        fmt: str,
        out: Path,
        include_inactive: bool = False,
        snapshot: str | None = None,
    ) -> int:
        """Write one kind of record to `out` (see `db.exporting`); returns the row count.

        Args:
            include_inactive: also export excluded and withdrawn examples (they carry a `state` column).
            snapshot: export that snapshot's examples (by name) instead of the active ones.
        """
        check_export(kind, fmt)
        states = ("active", "excluded", "withdrawn") if include_inactive else ("active",)

        def work(s: Session) -> int:
            snapshot_id = None if snapshot is None else curation.get_snapshot(s, name=snapshot).id
            rows = exporting.export_rows(s, kind=kind, fmt=fmt, states=states, snapshot_id=snapshot_id)
            return exporting.write_rows(rows, fmt=fmt, out=Path(out), schema=exporting.arrow_schema(kind, fmt))

        return self._read(work)

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        return self._read(repository.count_rows)

    def backup(self, path: Path) -> None:
        """Copy a SQLite store to `path` with SQLite's online backup API (safe while others write)."""
        path = Path(path)
        if self.engine.dialect.name != "sqlite":
            raise InputError("backup copies SQLite files: back up PostgreSQL with pg_dump")
        if path.exists():
            raise InputError(f"{path} already exists: pass a new backup path")
        if not path.parent.is_dir():
            raise InputError(f"the folder of {path} does not exist: create it first")
        raw = self.engine.raw_connection()
        try:
            target = sqlite3.connect(path)
            try:
                raw.driver_connection.backup(target)  # type: ignore[union-attr]
            finally:
                target.close()
        finally:
            raw.close()


def _check_swapped(judgments: Sequence[Judgment], *, swapped: bool) -> None:
    if not swapped:
        return
    if len(judgments) % 2:
        raise InputError(f"swapped=True needs [original, swapped] pairs, got {len(judgments)} judgments")
    for k in range(0, len(judgments), 2):
        original, other = judgments[k], judgments[k + 1]
        if original.pair.swapped().fingerprint() != other.pair.fingerprint():
            raise InputError(f"judgments {k} and {k + 1} are not the two orders of one pair: pass [original, swapped]")


__all__ = ["JudgmentStore", "load_settings", "reachable"]
