"""The store's services: what the CLI and the app call. Each method handles one user action in one
transaction (`with sessions.begin():`, retried as a whole on a lock conflict) and returns values.

    store = JudgmentStore.open("sqlite:///reflectrm.db")      # or REFLECTRM_DATABASE_URL
    [jid] = store.record([judgment], swapped=False)
    assert store.load(jid).judgment == judgment
    store.correct(jid, verdict=2, author="ana", marks={3: "right"})
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, make_url, text
from sqlalchemy.exc import DatabaseError, DBAPIError, OperationalError
from sqlalchemy.orm import Session

from reflectrm_db import curation, exporting, repository, rounds, schema, sqlite_files, training
from reflectrm_db.derivation import DEFAULT_MAX_PAIRS, Mark
from reflectrm_db.engine import make_engine, run_transaction, session_factories
from reflectrm_db.formats import check_export
from reflectrm_db.importing import read_pair_file
from reflectrm_db.records import (
    AnswerRecord,
    CorrectedPair,
    CorrectionRecord,
    ExampleKind,
    ExampleRecord,
    ImportReport,
    JudgmentSummary,
    LabelledDerivation,
    PromotionRecord,
    ReviewerRecord,
    RoundLabelRecord,
    RoundProgress,
    RoundRecord,
    SnapshotRecord,
    StoredJudgment,
    StoredPair,
    TrainingRunRecord,
)
from reflectrm_db.rounds import RoundConfig, SnapshotRule
from reflectrm_db.settings import StoreSettings, load_store_settings, normalise_url, sqlite_options, without_query
from reflectrm.core.types import Choice, Judgment, PreferencePair
from reflectrm.errors import ConfigError, InputError, first_line

T = TypeVar("T")


@contextmanager
def reachable(engine: Engine) -> Iterator[None]:
    """Turn "cannot connect" (or "not a database") into a `ConfigError` naming the database and what to do."""
    try:
        yield
    except DatabaseError as exc:  # OperationalError (cannot connect) is one; so is SQLite's "file is not a database"
        engine.dispose()
        url = schema.shown_url(engine.url)
        if isinstance(exc.orig, sqlite3.Error):  # a file's problem: damaged, read-only, busy, ... (never a server)
            raise ConfigError(sqlite_files.problem(url, exc.orig)) from exc
        first = first_line(exc.orig)
        raise ConfigError(
            f"cannot open the store at {url} ({first}): check the URL and that the database server is running"
        ) from exc


def _shown_url(url: str) -> str:
    """`url` as messages show it: its password hidden."""
    return schema.shown_url(make_url(url))


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    if parsed.database.startswith("file:"):  # a URI filename (?mode=ro&uri=true): SQLite resolves it itself
        return None
    return Path(parsed.database)


def in_memory(url: str) -> bool:
    """Whether `url` is an in-memory SQLite database (gone when the process exits)."""
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def check_before_connect(url: str, settings: StoreSettings, *, create: bool, writes: bool, older_ok: bool = False,
                         in_memory_ok: bool = True) -> None:
    """Everything that can be decided about `url` (normalised) before the first connection, which may write.

    Raises:
        ConfigError: an in-memory database where one is refused, a URL whose `?mode=` forbids what the command
            does, or a SQLite file that is not a store this command may use as it is (`sqlite_files`).
    """
    options = sqlite_options(url)
    shown = _shown_url(url)
    if in_memory(url) and not in_memory_ok:
        raise ConfigError(f"{shown} is an in-memory database: what this command stores would vanish when it exits; "
                          "pass a file (--db store.db) or a server URL")
    if writes and options.mode == "ro":
        raise ConfigError(f"the store at {_shown_url(without_query(url))} cannot be written: the URL opens it "
                          "read-only (?mode=ro); drop ?mode=ro for a command that writes")
    path = sqlite_path(url)
    if path is None:
        return
    if options.mode == "rw" and not path.exists():
        raise ConfigError(f"the database {str(path)!r} does not exist, and the URL's ?mode=rw never creates one: "
                          "check --db")
    sqlite_files.check_sqlite_file(path, create=create, writes=writes, older_ok=older_ok,
                                   timeout_s=options.timeout_s or settings.sqlite_busy_timeout_s)


def upgrade_store(url: str | None = None, *, settings: StoreSettings | None = None,
                  in_memory_ok: bool = True) -> tuple[str, str | None, str | None]:
    """Migrate the store at `url` to this version's schema (creating a new one); (shown URL, before, after).

    The migration runs in one transaction, in the SQLite file's own journal mode (no WAL switch first):
    a migration that fails (a full disk, a constraint) rolls back and leaves the file as it was.

    Raises:
        ConfigError: not a store (see `check_before_connect`), a newer store, or the migration failed.
    """
    settings = settings or load_store_settings()
    url = settings.database_url if url is None else normalise_url(url)
    check_before_connect(url, settings, create=True, writes=True, older_ok=True, in_memory_ok=in_memory_ok)
    engine = make_engine(url, settings, wal=False)
    shown = schema.shown_url(engine.url)
    try:
        with reachable(engine):
            before = schema.current_revision(engine)
            try:
                schema.upgrade(engine)
            except DBAPIError as exc:
                first = first_line(exc.orig)
                raise ConfigError(f"the upgrade of {shown} from revision {before or 'empty'} failed ({first}): it "
                                  "ran in one transaction, so nothing was changed; fix the cause (disk space, "
                                  "permissions) and run `reflectrm db upgrade` again") from exc
            return shown, before, schema.current_revision(engine)
    finally:
        engine.dispose()


class JudgmentStore:
    """Judgments, corrections and training data in one database (SQLite or PostgreSQL).

    Thread-safe: share one store between threads (the app builds one at start-up).
    """

    def __init__(self, engine: Engine, settings: StoreSettings) -> None:
        self.engine = engine
        self.settings = settings
        self._writes, self._reads = session_factories(engine)

    @classmethod
    def open(cls, url: str | None = None, *, settings: StoreSettings | None = None, create: bool = True,
             read_only: bool = False, older_ok: bool = False, in_memory_ok: bool = True) -> JudgmentStore:
        """Open the store at `url` (default: the store section's URL, REFLECTRM_DATABASE_URL, else ./reflectrm.db).

        A new database gets the schema (unless `create` is False: a command that only reads a store
        never creates one); one at an older schema revision must be upgraded first
        (`reflectrm db upgrade`), which `ConfigError` says. `read_only` (implies `create=False`): the
        database is opened read-only (SQLite `mode=ro`, a read-only PostgreSQL session), for commands
        that only read it (export, compare, backup's source). `older_ok` (with `read_only`): a store at an
        older revision opens too (a backup copies it as it is). `in_memory_ok=False` refuses an in-memory
        SQLite URL (a command's records would vanish when it exits). Everything that can be decided before
        connecting is (`check_before_connect`): a refused SQLite file is left byte for byte as it was.
        """
        settings = settings or load_store_settings()
        url = settings.database_url if url is None else normalise_url(url)
        create = create and not read_only
        check_before_connect(url, settings, create=create, writes=not read_only, older_ok=older_ok and read_only,
                             in_memory_ok=in_memory_ok)
        engine = make_engine(url, settings, read_only=read_only)
        with reachable(engine):
            if not create and schema.current_revision(engine) is None:
                engine.dispose()
                raise ConfigError(f"{_shown_url(url)} holds no ReflectRM store: "
                                  "check --db (a reading command never creates one)")
            if read_only:
                schema.check_current(engine, shown=_shown_url(url), older_ok=older_ok)
            else:
                schema.ensure_schema(engine)
        return cls(engine, settings)

    def check_writable(self) -> None:
        """Refuse a store this process cannot write (a read-only file, folder or server), before any work.

        Runs an UPDATE that matches no row on each table a judgment writes: the database checks write
        permission (and a read-only file or transaction) without changing anything.
        """

        def probe(s: Session) -> None:
            for table in ("pairs", "judgments", "samples", "reflections"):
                s.execute(text(f"UPDATE {table} SET id = id WHERE 1 = 0"))

        try:
            self._write(probe)
        except DBAPIError as exc:
            url = schema.shown_url(self.engine.url)
            first = first_line(exc.orig)
            raise ConfigError(f"the store at {url} cannot be written ({first}): fix its permissions "
                              "(file and folder) or pass a writable --db") from exc

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> JudgmentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, work: Callable[[Session], T]) -> T:
        with self._file_problems():
            return run_transaction(self._writes, work, retry_s=self.settings.lock_retry_s)

    def _read(self, work: Callable[[Session], T]) -> T:
        with self._file_problems():
            return run_transaction(self._reads, work, retry_s=self.settings.lock_retry_s)

    @contextmanager
    def _file_problems(self) -> Iterator[None]:
        """A SQLite file's failure met mid-work (a damaged page, a full disk) as one line saying what to do."""
        try:
            yield
        except (OperationalError, DatabaseError) as exc:  # not IntegrityError & co: those are the caller's
            if type(exc) not in (OperationalError, DatabaseError) or not isinstance(exc.orig, sqlite3.Error):
                raise
            raise ConfigError(sqlite_files.problem(schema.shown_url(self.engine.url), exc.orig)) from exc

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

    def pairs_with_content(self, fingerprints: Sequence[str], *, limit: int = 50) -> list[StoredPair]:
        """Stored pairs with one of these contents (`PreferencePair.fingerprint`), any label; in id order."""
        return self._read(lambda s: repository.pairs_with_content(s, fingerprints=fingerprints, limit=limit))

    def sources(self) -> list[str]:
        """The data sets (pair sources) in the store, sorted."""
        return self._read(repository.list_sources)

    def pair_ids(self, source: str) -> list[int]:
        """Row ids of one data set's pairs, in id order."""
        return self._read(lambda s: repository.source_pair_ids(s, source=source))

    def record_promotion(self, *, model: str, previous: str, promoted_by: str, verdict: str, overridden: bool,
                         lines: Sequence[str], judge_run_id: int | None = None,
                         checkpoint_run_id: int | None = None) -> PromotionRecord:
        """Record that `model` became the judge (who, over which model, the gate's verdict and lines), in one
        transaction."""
        return self._write(lambda s: repository.add_promotion(
            s, model=model, previous=previous, promoted_by=promoted_by, verdict=verdict, overridden=overridden,
            lines=lines, judge_run_id=judge_run_id, checkpoint_run_id=checkpoint_run_id))

    def promotions(self, *, limit: int = 100) -> list[PromotionRecord]:
        """Recorded promotions, newest first."""
        return self._read(lambda s: repository.list_promotions(s, limit=limit))

    def pairs_by_id(self, pair_ids: Sequence[int]) -> list[PreferencePair]:
        """Stored pairs by row id, in the order asked."""
        found = self._read(lambda s: repository.get_pairs(s, pair_ids=pair_ids))
        return [found[i] for i in pair_ids if i in found]

    def judgment_pairs(self, judgment_ids: Sequence[int]) -> dict[int, PreferencePair]:
        """The stored pair of each judgment, by judgment id (a missing judgment is left out)."""
        return self._read(lambda s: repository.judgment_pairs(s, judgment_ids=judgment_ids))

    def record(self, judgments: Sequence[Judgment], *, swapped: bool, idempotent: bool = False) -> list[int]:
        """Store judgments with their samples and reflections; returns their row ids, in order.

        With `swapped=True` the list holds [original, swapped] pairs one after the other (as
        `judge_both_orders` returns them), and the two judgments of each are linked.

        With `idempotent=True` (a resumable run) each judgment is keyed by its pair, model, config
        and order (`repository.judgment_key`, a unique column): recording it again, after a crash
        between storing and writing its output, returns the existing id instead of a second row.
        """
        _check_swapped(judgments, swapped=swapped)
        return self._write(
            lambda s: repository.add_judgments(s, judgments=judgments, swapped=swapped, idempotent=idempotent)
        )

    def record_keyed(self, judgments: Sequence[Judgment], *, swapped: bool, keys: Sequence[str]) -> list[int]:
        """`record` with the reward service's cache keys (`reflectrm.serving.cache.request_key`, one per judgment).

        A judgment whose key is stored already (by any process on this store, even one that stored it
        between this one's look-up and its insert) is not stored again: its row id is returned in its place.
        """
        _check_swapped(judgments, swapped=swapped)
        return self._write(
            lambda s: repository.add_judgments(s, judgments=judgments, swapped=swapped, cache_keys=keys)
        )

    def cached(self, keys: Sequence[str]) -> dict[str, tuple[int, Judgment]]:
        """The stored (row id, judgment) of each cache key found (`record_keyed`); keys not stored are left out."""
        found = self._read(lambda s: repository.cached_judgments(s, keys=keys))
        return {key: (stored.id, stored.judgment) for key, stored in found.items()}

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

    def history(self, *, search: str = "", limit: int = 200, before: int | None = None) -> list[JudgmentSummary]:
        """Judgments newest first, filtered by text in the query or source (in SQL)."""
        return self._read(lambda s: repository.history(s, search=search, limit=limit, before=before))

    def summary(self, judgment_id: int) -> JudgmentSummary:
        """One judgment's summary (flags, label as the judgment saw it, active correction)."""
        found = self._read(lambda s: repository.judgment_summary(s, judgment_id=judgment_id))
        if found is None:
            raise InputError(f"judgment {judgment_id} does not exist: pick one from the judgment list")
        return found

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
        edit_active: bool = False,
    ) -> CorrectionRecord:
        """Record a person's verdict on a judgment and derive its training examples.

        One transaction. Two people correcting one judgment at once race to insert; the loser's transaction
        is rerun (`run_transaction`) and meets the winner's correction like any later writer does.

        Args:
            verdict: the better response (1 or 2) in the judgment's order.
            marks: rollout position (in `Judgment.rollouts`) -> "right" / "wrong"; overrides the
                prediction-based rule for those analyses.
            max_pairs: reflection pairs derived at most.
            seed: seeds the choice of reflection pairs and their critique order; recorded (default: random).
            edit_active: when the judgment has an active correction, edit it (with history; `max_pairs` and
                `seed` stay as it has them) instead of refusing.

        Raises:
            CorrectionExists: the judgment has an active correction and `edit_active` is False.
        """
        seed = secrets.randbits(62) if seed is None else seed

        def work(s: Session) -> CorrectionRecord:
            # one check of the active correction, inside add_correction (before it writes anything): a second
            # check here could see none and the first see another writer's, committed in between
            try:
                cid = curation.add_correction(s, judgment_id=judgment_id, author=author, verdict=verdict, note=note,
                                              marks=dict(marks or {}), max_pairs=max_pairs, seed=seed)
            except curation.CorrectionExists as exists:
                if not edit_active:
                    raise
                cid = exists.correction_id
                curation.edit_correction(s, correction_id=cid, author=author, verdict=verdict, note=note,
                                         marks=dict(marks or {}))
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

    def corrections(
        self,
        *,
        judgment_id: int | None = None,
        include_withdrawn: bool = True,
        correction_ids: Sequence[int] | None = None,
    ) -> list[CorrectionRecord]:
        return self._read(
            lambda s: curation.get_corrections(
                s, correction_ids=correction_ids, judgment_id=judgment_id, include_withdrawn=include_withdrawn
            )
        )

    def corrected_pairs(self, *, limit: int = 500, before: int | None = None) -> list[CorrectedPair]:
        """Active corrections with the pairs they correct, newest first; `before` (a correction id) pages on."""
        return self._read(lambda s: curation.corrected_pairs(s, limit=limit, before=before))

    # --- training examples and snapshots -------------------------------------------------------------

    def examples(
        self,
        kind: ExampleKind,
        *,
        states: Sequence[str] | None = ("active",),
        correction_id: int | None = None,
        limit: int | None = 100,
        offset: int = 0,
        source: str | None = None,
        since: date | None = None,
        until: date | None = None,
        newest_first: bool = False,
    ) -> list[ExampleRecord]:
        """Derived examples of one kind ("preference" / "reflection"); `states=None` lists every state.

        `source`, `since` and `until` (creation days, inclusive, UTC) filter in SQL.
        """
        return self._read(
            lambda s: curation.list_examples(
                s, kind=kind, states=states, correction_id=correction_id, limit=limit, offset=offset,
                source=source, since=since, until=until, newest_first=newest_first,
            )
        )

    def derive_from_labels(self, *, source: str | None = None, model: str | None = None,
                           seed: int = 0) -> LabelledDerivation:
        """The paper's training examples from the judge's rollouts of labelled pairs (`curation.derive_from_labels`):
        a preference example per pair whose samples were not all right, a reflection pair where they disagree.
        `source` and `model` narrow which judgments are read; `seed` picks the reflection pairs. One transaction."""
        return self._write(lambda s: curation.derive_from_labels(s, source=source, model=model, seed=seed))

    def example_counts(self, *, states: Sequence[str] = ("active",)) -> dict[ExampleKind, int]:
        """Examples per kind in `states`."""
        return self._read(lambda s: curation.count_examples(s, states=states))

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
        """Change a run's status, step, figures, error, log or output model (see `reflectrm_db.training.UPDATABLE`)."""

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

    # --- review rounds (`reflectrm_db.rounds`): reviewers, assignment, answers, labels ---------------------------

    def set_reviewer(self, name: str, *, role: str) -> tuple[ReviewerRecord, str | None]:
        """Add a reviewer or change their role; (the reviewer, their role before or None when new)."""
        return self._write(lambda s: rounds.set_reviewer(s, name=name, role=role))

    def reviewer(self, name: str) -> ReviewerRecord | None:
        """The reviewer of that login name, or None (a login without a reviewer row works as before rounds)."""
        return self._read(lambda s: rounds.get_reviewer(s, name=name))

    def reviewers(self) -> list[ReviewerRecord]:
        return self._read(rounds.list_reviewers)

    def open_round(self, config: RoundConfig, *, opened_by: str) -> RoundRecord:
        """Open a review round over the judgments `config` selects (one transaction: all its items, or none)."""
        return self._write(lambda s: rounds.open_round(s, config=config, opened_by=opened_by))

    def round(self, name: str) -> RoundRecord:
        return self._read(lambda s: rounds.get_round(s, name=name))

    def rounds(self) -> list[RoundRecord]:
        return self._read(rounds.list_rounds)

    def take_round_item(self, name: str, *, reviewer: str) -> int | None:
        """The judgment `reviewer` works on next in the round (one transaction; see `rounds.take_next`)."""
        return self._write(lambda s: rounds.take_next(s, rnd=rounds.get_round(s, name=name), reviewer=reviewer))

    def round_assignment(self, name: str, judgment_id: int, *, reviewer: str) -> AnswerRecord | None:
        """The reviewer's assignment (and answer) of one item of the round; None when it is not theirs."""
        return self._read(lambda s: rounds.assignment(s, rnd=rounds.get_round(s, name=name), judgment_id=judgment_id,
                                                      reviewer=reviewer))

    def round_answers(self, name: str, *, judgment_id: int | None = None,
                      answered_only: bool = True) -> list[AnswerRecord]:
        """The round's answers (one item's with `judgment_id`; open assignments too unless `answered_only`)."""
        return self._read(lambda s: rounds.answers(s, rnd=rounds.get_round(s, name=name), judgment_id=judgment_id,
                                                   answered_only=answered_only))

    def answer_round_item(self, name: str, judgment_id: int, *, reviewer: str, verdict: Choice,
                          marks: Mapping[int, Mark] | None = None,
                          note: str = "") -> tuple[AnswerRecord, RoundLabelRecord | None]:
        """Save a reviewer's answer; when it is the item's last and every answer agrees, label the item (its
        correction written) in the same transaction. Returns (the answer, the label or None)."""

        def work(s: Session) -> tuple[AnswerRecord, RoundLabelRecord | None]:
            rnd = rounds.get_round(s, name=name)
            rounds.require_member(s, rnd=rnd, reviewer=reviewer)
            answer = rounds.record_answer(s, rnd=rnd, judgment_id=judgment_id, reviewer=reviewer, verdict=verdict,
                                          marks=dict(marks or {}), note=note)
            return answer, rounds.settle_item(s, rnd=rnd, judgment_id=judgment_id)

        return self._write(work)

    def release_round_items(self, name: str, *, reviewer: str, judgment_id: int | None = None) -> list[int]:
        """Take back a reviewer's unanswered items in the round (one with `judgment_id`); their judgment ids."""
        return self._write(lambda s: rounds.release(s, rnd=rounds.get_round(s, name=name), reviewer=reviewer,
                                                    judgment_id=judgment_id))

    def reassign_round_item(self, name: str, judgment_id: int, *, reviewer: str, to: str) -> AnswerRecord:
        """Move a reviewer's unanswered item to another reviewer of the round."""
        return self._write(lambda s: rounds.reassign(s, rnd=rounds.get_round(s, name=name), judgment_id=judgment_id,
                                                     reviewer=reviewer, to=to))

    def round_progress(self, name: str) -> RoundProgress:
        return self._read(lambda s: rounds.progress(s, rnd=rounds.get_round(s, name=name)))

    def disputed_items(self, name: str) -> list[int]:
        """The round's items waiting for an adjudicator, in the round's order."""
        return self._read(lambda s: rounds.disputed(s, rnd=rounds.get_round(s, name=name)))

    def adjudicate(self, name: str, judgment_id: int, *, by: str, verdict: Choice,
                   marks: Mapping[int, Mark] | None = None, note: str = "") -> RoundLabelRecord:
        """An adjudicator's decision on a disputed item: the item's label and correction, in one transaction."""
        return self._write(lambda s: rounds.adjudicate(s, rnd=rounds.get_round(s, name=name), judgment_id=judgment_id,
                                                       by=by, verdict=verdict, marks=dict(marks or {}), note=note))

    def round_labels(self, name: str) -> list[RoundLabelRecord]:
        return self._read(lambda s: rounds.labels(s, rnd=rounds.get_round(s, name=name)))

    def round_label(self, name: str, judgment_id: int) -> RoundLabelRecord | None:
        return self._read(lambda s: rounds.label(s, rnd=rounds.get_round(s, name=name), judgment_id=judgment_id))

    def snapshot_by_rule(self, name: str, *, rule: SnapshotRule, note: str = "") -> SnapshotRecord:
        """Freeze the active examples of the round labels `rule` takes (agreed, adjudicated, a minimum agreement)
        into a snapshot that records its rule."""
        return self._write(lambda s: curation.create_snapshot(
            s, name=name, note=note, rule=rule.to_dict(), correction_ids=rounds.labelled_corrections(s, rule=rule)))

    # --- export and maintenance ---------------------------------------------------------------------

    def export(
        self,
        kind: str,
        *,
        fmt: str,
        out: Path,
        include_inactive: bool = False,
        snapshot: str | None = None,
        both_orders: bool = False,
    ) -> int:
        """Write one kind of record to `out` (see `reflectrm_db.exporting`); returns the row count.

        Args:
            include_inactive: also export excluded and withdrawn examples (they carry a `state` column).
            snapshot: export that snapshot's examples (by name) instead of the active ones.
            both_orders: training rows only: each example followed by its other order (responses, or a reflection
                pair's critiques, exchanged), the two sharing a `twin_key`, for GRPO's both-orders option.
        """
        check_export(kind, fmt)
        if both_orders and not (kind == "training" or fmt == "hf"):
            raise InputError(f"both orders applies to training rows: export `training` (or --format hf), not {kind}")
        states = ("active", "excluded", "withdrawn") if include_inactive else ("active",)

        def work(s: Session) -> int:
            snapshot_id = None if snapshot is None else curation.get_snapshot(s, name=snapshot).id
            rows = exporting.export_rows(s, kind=kind, fmt=fmt, states=states, snapshot_id=snapshot_id,
                                         both_orders=both_orders)
            where = f"snapshot {snapshot!r}" if snapshot is not None else "the store"
            which = "" if include_inactive or snapshot or kind in ("pairs", "judgments", "corrections") else " active"
            what = "training examples" if kind == "training" or fmt == "hf" else kind.replace("-", " ")
            return exporting.write_rows(rows, fmt=fmt, out=Path(out),
                                        schema=exporting.arrow_schema(kind, fmt, both_orders=both_orders),
                                        nothing=f"{where} holds no{which} {what} to export")

        return self._read(work)

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        return self._read(repository.count_rows)

    def backup(self, path: Path) -> None:
        """Copy a SQLite store to `path` with SQLite's online backup API (safe while others write)."""
        path = Path(path)
        if self.engine.dialect.name != "sqlite":
            raise InputError("backup copies SQLite files: back up PostgreSQL with pg_dump")
        if path.exists() or path.is_symlink():
            raise InputError(f"{path} already exists: pass a new backup path")
        if not path.parent.is_dir():
            raise InputError(f"the folder of {path} does not exist: create it first")
        # Written to a hidden sibling and renamed when whole: a full disk or a read-only folder leaves no
        # half or empty "backup" behind to block the retry (or to be mistaken for a good copy).
        partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
        raw = self.engine.raw_connection()
        try:
            _copy_sqlite(raw.driver_connection, partial, final=path)
            os.link(partial, path)  # fails, rather than overwrite, if `path` appeared meanwhile
        except OSError as exc:
            raise InputError(f"cannot write the backup {str(path)!r} ({exc.strerror or exc}): check that its folder "
                             "is writable and has room; nothing was written") from exc
        finally:
            raw.close()
            with contextlib.suppress(OSError):
                partial.unlink()


def _copy_sqlite(source: Any, target_path: Path, *, final: Path) -> None:
    """SQLite's online backup of `source` (a driver connection) into a new file; OSError on any failure."""
    try:
        target = sqlite3.connect(target_path)
        try:
            source.backup(target)
        finally:
            target.close()
    except sqlite3.Error as exc:  # "disk I/O error", "unable to open database file", "database or disk is full"
        raise OSError(errno.EIO, str(exc), str(final)) from exc


def _check_swapped(judgments: Sequence[Judgment], *, swapped: bool) -> None:
    if not swapped:
        return
    if len(judgments) % 2:
        raise InputError(f"swapped=True needs [original, swapped] pairs, got {len(judgments)} judgments")
    for k in range(0, len(judgments), 2):
        original, other = judgments[k], judgments[k + 1]
        if original.pair.swapped() != other.pair:
            raise InputError(f"judgments {k} and {k + 1} are not the two orders of one pair: pass [original, swapped]")


__all__ = ["JudgmentStore", "load_store_settings", "reachable"]
