"""The Train tab's service: GRPO runs on a store snapshot, each in its own process (`reflectrm.training.jobs`).

    run = training.start(TrainRequest.from_form(snapshot="train-1", base_model=str(DEMO_MODEL_DIR), max_steps=100))
    view = training.watch(run.id)       # TrainingRunView: the stored run and its folder's live progress
    training.cancel(run.id)             # stops after the step in progress, with a checkpoint
    training.resume(run.id)             # continues from the last checkpoint

A run's folder is its live record; `watch` and `runs` copy its state and figures into the store's
`training_runs` row, and `reconcile` (run when the app starts) marks runs whose process went away
as interrupted. One run trains at a time: runs share the machine with the judge the app serves.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any

from reflectrm_app.records import PAPER_MIX, TrainingRunView, TrainRequest
from reflectrm_app.services.runtime import DATA_ROOT_FIX, Runtime, default_runs_dir
from reflectrm_app.settings import AppSettings
from reflectrm_db.records import SnapshotRecord, TrainingRunRecord
from reflectrm_db.services import JudgmentStore
from reflectrm.errors import InputError
from reflectrm.files.inputs import confine
from reflectrm.training import jobs
from reflectrm.training.grpo import TrainConfig, check_model
from reflectrm.training.runs import (
    Checkpoint, RunFiles, RunProgress, last_checkpoint, list_checkpoints, read_progress,
)

log = logging.getLogger(__name__)

DATA_FOLDER = "data"  # inside the runs folder: snapshots exported as `datasets` folders named by their rows' hash
LOG_CHARS = 6000  # the end of a worker's log shown, and kept in the store when a run ends
_DEMO_DEFAULTS = MappingProxyType({"learning_rate": 5e-5, "batch_size": 4, "num_generations": 4, "save_steps": 20})
"""Form defaults for the bundled demo judge (3.6 M parameters, on a CPU): small steps that finish in seconds.
Other models get the paper's (`TrainConfig`)."""
FORM_STEPS = 100  # the form's first max steps (a run from the form is bounded by steps, not TrainConfig's epochs)
REPLAY_SEARCH = 2000  # the newest stored judgments searched for replay examples (the paper's mix, below 4:1)

HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")
"""A Hugging Face model id as typed (`org/name` or `name`); anything else named as a base model is a local path."""
MIXES = MappingProxyType({"paper": "the paper's 4:1 (reflection pairs subsampled)", "as_is": "train as is"})
"""The Train form's mix choices, as `TrainRequest.mix`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataMix:
    """What a run trains on: a snapshot's examples of each kind, and how many of each the chosen mix keeps.

    Attributes:
        choice: a key of `MIXES`.
        preference, reflection: the snapshot's examples of each kind.
        kept_preference, kept_reflection: how many of the snapshot's examples of each kind the run trains on.
        replay: preference examples added from the judge's own rollouts of other labelled pairs in the store.
        seed: seeds which reflection pairs are kept when some are cut, and which replay examples are added.
    """

    choice: str
    preference: int
    reflection: int
    kept_preference: int
    kept_reflection: int
    replay: int = 0
    seed: int = 0

    @property
    def cut(self) -> int:
        """Reflection pairs left out (the paper's mix cuts reflection pairs only)."""
        return self.reflection - self.kept_reflection

    def to_dict(self) -> dict[str, Any]:
        return {"choice": self.choice, "mix": list(PAPER_MIX) if self.choice == "paper" else None,
                "preference": self.kept_preference, "reflection": self.kept_reflection, "replay": self.replay,
                "snapshot_preference": self.preference, "snapshot_reflection": self.reflection,
                "reflection_cut": self.cut, "seed": self.seed}


def plan_mix(preference: int, reflection: int, *, choice: str = "paper", seed: int = 0,
             replay_available: int = 0) -> DataMix:
    """How many examples of each kind a run keeps: under "paper", too few preference examples for 4:1 are first
    made up with up to `replay_available` replayed ones, then reflection pairs beyond a quarter of all preference
    examples are cut (never preference examples: too few reflection pairs are kept as they are)."""
    if choice not in MIXES:
        raise InputError(f"the mix must be one of {', '.join(MIXES)}, got {choice!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise InputError(f"the mix seed must be a whole number >= 0, got {seed!r}")
    from reflectrm.training.data import mix_counts

    if choice == "as_is":
        return DataMix(choice=choice, preference=preference, reflection=reflection, kept_preference=preference,
                       kept_reflection=reflection, seed=seed)
    want = reflection * PAPER_MIX[0] // PAPER_MIX[1] - preference
    replay = max(0, min(replay_available, want))
    keep_p, keep_r = mix_counts(preference + replay, reflection, PAPER_MIX)
    return DataMix(choice=choice, preference=preference, reflection=reflection, kept_preference=keep_p - replay,
                   kept_reflection=keep_r, replay=replay, seed=seed)


def slug(text: str, *, limit: int = 40) -> str:
    """`text` as a safe piece of a folder name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:limit] or "snapshot"


def train_config(request: TrainRequest, settings: AppSettings) -> TrainConfig:
    """The request's `TrainConfig` on the device and CPU threads the app runs with, in passes that divide a step."""
    config = request.config
    # the largest pass, up to the config's (TrainConfig's default of 8), that divides a step's completions
    return replace(config, per_device_batch_size=math.gcd(config.completions_per_step, config.per_device_batch_size),
                   device=settings.generation.device, threads=settings.generation.fixed_threads())


@dataclass
class TrainingService:
    """Start, watch, cancel and resume training runs; shared by every user (one lock guards starts).

    Args:
        store: where runs are recorded.
        settings: the app settings (device, CPU threads, the judge's model).
        runs_dir: where run folders (and exported snapshots) live.
        active_judge: the model the app judges with now (a path or id; "" for the bundled demo judge).
        data_root: the folder a base model typed as a path must lie in (else in `runs_dir`); None: `runs_dir` only.
        data_root_fix: how the operator moves `data_root`, for the refusal of a path outside it.
    """

    store: JudgmentStore
    settings: AppSettings
    runs_dir: Path
    active_judge: Callable[[], str] | None = None
    data_root: Path | None = None
    data_root_fix: str = "set REFLECTRM_DATA_ROOT"
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _jobs: dict[int, jobs.TrainJob] = field(default_factory=dict)  # runs this process started: it reaps them

    @classmethod
    def over(cls, runtime: Runtime) -> TrainingService:
        """The app's training service: runs in the settings' runs folder (else `runs/` beside a SQLite store),
        base models confined to the runtime's data root; runs that were going when the app last stopped are
        marked interrupted."""
        runs_dir = Path(runtime.settings.app.runs_dir or default_runs_dir(runtime.store_url)).resolve()
        service = cls(store=runtime.store, settings=runtime.settings, runs_dir=runs_dir,
                      active_judge=lambda: runtime.model.name, data_root=runtime.data_root, data_root_fix=DATA_ROOT_FIX)
        service.reconcile()
        return service

    # --- the form --------------------------------------------------------------------------------------

    def defaults(self) -> TrainRequest:
        """What the form shows first: the active judge as the base model, sizes that suit it."""
        from reflectrm.defaults import default_model

        model = (self.active_judge() if self.active_judge else "") or default_model(self.settings.generation.model)
        demo = _is_demo(model)
        config = TrainConfig(max_steps=FORM_STEPS, max_completion_length=self.settings.judge.max_new_tokens,
                             gradient_checkpointing=not demo, **(_DEMO_DEFAULTS if demo else {}))
        return TrainRequest(snapshot="", base_model=model, config=config)

    # --- start, cancel, resume ------------------------------------------------------------------------

    def start(self, request: TrainRequest) -> TrainingRunRecord:
        """Start a run on a snapshot in its own process; returns the stored run (status `starting`)."""
        with self._lock:
            self._refuse_if_training()
            snapshot = self._snapshot(request.snapshot)
            base_model = self.base_model(request.base_model)
            check_model(base_model)
            config = train_config(request, self.settings)
            both = config.both_orders
            data, mix = self._mixed_data(self._snapshot_data(snapshot, both_orders=both), snapshot,
                                         choice=request.mix, seed=request.mix_seed, both_orders=both)
            run_dir = self.runs_dir / f"run-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
            run = self.store.add_training_run(snapshot_id=snapshot.id, base_model=base_model, run_dir=str(run_dir),
                                              config={**config.to_dict(), "data_mix": mix.to_dict()})
            try:
                self._jobs[run.id] = jobs.start_run(run_dir, data=data, model=base_model, config=config,
                                                    env=self._worker_env())
            except Exception as exc:
                self.store.update_training_run(run.id, status="failed", error=f"{type(exc).__name__}: {exc}",
                                               finished_at=_now())
                raise
            log.info("started training run %d in %s on snapshot %r (%d preference + %d replayed, %d reflection "
                     "examples)", run.id, run_dir, snapshot.name, mix.kept_preference, mix.replay, mix.kept_reflection)
            return self.store.training_run(run.id)

    def base_model(self, text: str) -> str:
        """The model a run starts from: the app's own models as they are, a Hub id, or a folder confined to the
        data root (or the runs folder, where checkpoints live); a path elsewhere is refused whether or not it exists.
        """
        from reflectrm.demo import DEMO_MODEL_DIR

        text = text.strip()
        if not text:
            raise InputError("give a base model to train: a model folder or a Hugging Face id (the active judge "
                             "is filled in by default)")
        if text in {self.defaults().base_model, self.settings.generation.model, str(DEMO_MODEL_DIR)}:
            return text  # the operator's own choices (the active judge, the configured model, the demo judge)
        inside = self.data_root is not None and os.path.lexists(os.path.join(self.data_root, text))
        if not inside and HUB_ID.fullmatch(text) and not os.path.lexists(text):
            return text  # a Hub id, and no local folder of that name the loader would take instead
        refusals = []
        # a relative path is the data root's; an absolute one may also name a checkpoint in the runs folder
        roots = [self.data_root or self.runs_dir, *([self.runs_dir] if self.data_root and os.path.isabs(text) else [])]
        for root in roots:
            try:
                return str(confine(text, root=root, setting=self.data_root_fix))
            except InputError as exc:
                refusals.append(exc)
        raise refusals[0]  # the data root's: a user names models there (a checkpoint is picked, not typed)

    def cancel(self, run_id: int) -> bool:
        """Ask a running run to stop after its step (with a checkpoint); asked again, stop it at once.

        Returns:
            True when the run was killed at once (its last checkpoint stays; the step in progress is lost).
        """
        view = self.watch(run_id)
        if not view.run.active:
            raise InputError(f"run #{run_id} is {view.run.status}, not running: nothing to cancel")
        force = RunFiles(Path(view.run.run_dir)).cancel.exists()  # a second Cancel
        jobs.cancel_run(view.run.run_dir, force=force)
        self.watch(run_id)
        return force

    def resume(self, run_id: int, *, max_steps: int | None = None) -> TrainingRunRecord:
        """Continue a run that stopped (cancelled, failed, interrupted) from its last checkpoint.

        `max_steps` changes how many steps it takes in all; a completed run needs more steps than it took.
        """
        with self._lock:
            self._refuse_if_training()
            run = self.watch(run_id).run
            if not (Path(run.run_dir) / "run.json").exists():
                raise InputError(f"run #{run_id}'s folder {run.run_dir} is gone: start a new run")
            configured = run.config.get("max_steps")
            steps = max_steps if max_steps is not None and max_steps != configured else None
            if run.status == "completed" and (steps is None or steps <= run.step):
                raise InputError(f"run #{run_id} completed all its {run.step} steps: set max steps above {run.step} "
                                 "to train it further")
            if steps is not None and steps < 1:
                raise InputError(f"max steps must be a whole number of at least 1, got {steps!r}")
            self._jobs[run_id] = jobs.resume_run(run.run_dir, max_steps=steps, env=self._worker_env())
            changes: dict[str, Any] = {"status": "starting", "error": "", "log_tail": "", "finished_at": None}
            if steps is not None:
                changes["config"] = {**run.config, "max_steps": steps}
            return self.store.update_training_run(run_id, **changes)

    def resume_from_form(self, run_id: int, *, form_steps: int) -> TrainingRunRecord:
        """Resume as the Train tab's Resume button does: a stopped run keeps its own recorded plan (the form's Max
        steps is the next new run's: it once turned an interrupted 12-step run into "step 26 / 100"); only a
        completed run takes the form's Max steps, as how far to train it further."""
        completed = self.store.training_run(int(run_id)).status == "completed"
        return self.resume(run_id, max_steps=form_steps if completed else None)

    def resume_point(self, run_id: int) -> int | None:
        """The step of the checkpoint a resume of the run starts from; None: it has none (it starts at step 0)."""
        checkpoint = last_checkpoint(self.store.training_run(int(run_id)).run_dir)
        return None if checkpoint is None else checkpoint.step

    def _refuse_if_training(self) -> None:
        for run in self.runs():
            if run.active:
                raise InputError(f"run #{run.id} is still {run.status} (step {run.step} of {run.total_steps or '?'}): "
                                 "cancel it or wait for it to finish; one run trains at a time")

    def _snapshot(self, name: str) -> SnapshotRecord:
        if not name:
            raise InputError("choose a snapshot to train on (take one in the Curate tab)")
        found = {s.name: s for s in self.store.snapshots()}
        if name not in found:
            raise InputError(f"snapshot {name!r} does not exist: pick one from the list (Refresh lists new ones)")
        snapshot = found[name]
        if snapshot.num_preference + snapshot.num_reflection == 0:
            raise InputError(f"snapshot {name!r} holds no examples: correct judgments in the Review queue, then take "
                             "a new snapshot in Curate")
        return snapshot

    def _snapshot_data(self, snapshot: SnapshotRecord, *, both_orders: bool = False) -> Path:
        """The snapshot's training rows as a `datasets` folder, named by the hash of the rows as exported now
        (`both_orders`: each example followed by its other order, a folder of its own).

        The rows are rendered afresh at every start and an existing folder is reused only when its rows
        are the same: after a change to the prompt template a stale export is never trained on.
        """
        from reflectrm.training.data import snapshot_hash

        folder = self.runs_dir / DATA_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        fresh = folder / f".{slug(snapshot.name)}-{secrets.token_hex(4)}.export"
        self.store.export("training", fmt="hf", out=fresh, snapshot=snapshot.name, both_orders=both_orders)
        digest = snapshot_hash(fresh)  # the hash of the rows as they will be trained on
        if both_orders:
            digest = f"both-{digest}"  # the snapshot's own hash is of its rows in one order
        elif digest != snapshot.content_hash:
            log.warning("snapshot %r renders differently from when it was taken (the prompt template or recipe "
                        "changed): training on the rows as rendered now (%s)", snapshot.name, digest[:12])
        path = folder / f"{slug(snapshot.name)}-{digest[:12]}"
        if path.is_dir():  # the same rows were exported before: the rename below makes present mean complete
            shutil.rmtree(fresh)
        else:
            fresh.rename(path)
        return path

    def data_mix(self, name: str, choice: str = "paper", *, seed: int = 0) -> DataMix | None:
        """What a run on snapshot `name` would train on under `choice`, from the snapshot's counts (None: no such
        snapshot)."""
        found = next((s for s in self.store.snapshots() if s.name == name), None)
        if found is None:
            return None
        available = len(self.replay_pool(found)) if choice == "paper" else 0
        return plan_mix(found.num_preference, found.num_reflection, choice=choice, seed=seed,
                        replay_available=available)

    def replay_pool(self, snapshot: SnapshotRecord, *, exclude: frozenset[str] = frozenset(),
                    both_orders: bool = False) -> list[Any]:
        """Preference examples replayed from the judge's own rollouts: for each labelled pair the snapshot does not
        hold, its newest judgment (in the pair's own order) whose sampled rollouts were not all right (the paper
        drops easy items); none whose prompt key is in `exclude`, and none whose conversation an evaluation run
        judged (training on it would inflate what that run measures). Newest first. `both_orders`: each item is
        (example, the example in the other order)."""
        from reflectrm_db.evaluation import EvalStore
        from reflectrm.training.data import context_key
        from reflectrm.training.recipe import Rendering, other_order, preference_example

        measured = {context_key(p) for p in EvalStore(self.store).evaluated_pairs()}
        members = self.store.snapshot_members(snapshot.id)
        held: set[int] = set()
        for kind, ids in members.items():
            wanted = set(ids)
            held |= {e.pair_id for e in self.store.examples(kind, states=None, limit=None) if e.id in wanted}
        ids = [s.id for s in self.store.history(limit=REPLAY_SEARCH)
               if not s.swapped and s.label is not None and s.pair_id not in held]
        pool: list[Any] = []
        pairs: set[int] = set()
        keys = set(exclude)
        for stored in sorted(self.store.load_many(ids), key=lambda j: -j.id):
            j = stored.judgment
            samples = [r for r in j.rollouts if not r.greedy]
            if stored.pair_id in pairs or j.pair.label is None or all(r.prediction == j.pair.label for r in samples):
                continue  # `all` of no samples is True: a greedy judgment has no rollouts to learn from
            if measured and context_key(j.pair) in measured:
                continue
            rendering = Rendering.from_config(j.config)
            example = preference_example(j.pair, label=j.pair.label, rendering=rendering, origin="replay")
            if example.key not in keys:
                pairs.add(stored.pair_id)
                keys.add(example.key)
                pool.append((example, other_order(j.pair, label=j.pair.label, rendering=rendering, origin="replay"))
                            if both_orders else example)
        return pool

    def _mixed_data(self, data: Path, snapshot: SnapshotRecord, *, choice: str, seed: int,
                    both_orders: bool = False) -> tuple[Path, DataMix]:
        """The exported rows `data` as the mix keeps them: the same folder when nothing changes, else a folder
        beside it holding every preference example, replayed ones where the snapshot has too few, and a seeded
        sample of the reflection pairs; its manifest says which mix and seed made it. With `both_orders` the mix
        counts examples, each one two rows (it and its other order), kept or cut together."""
        import random

        from reflectrm.core.prompts import Task
        from reflectrm.errors import require
        from reflectrm.training.data import SNAPSHOT_MANIFEST, load_snapshot, read_examples, snapshot_hash
        from reflectrm.training.recipe import in_both_orders, rows_hash

        ds = load_snapshot(data)
        units = _example_units(ds, both_orders=both_orders)  # row indexes of each example, in order
        tasks = list(ds["task"])
        reflection = [k for k, rows in enumerate(units) if tasks[rows[0]] == Task.ANALYSIS.value]
        preference = len(units) - len(reflection)
        short = choice == "paper" and len(reflection) * PAPER_MIX[0] > preference * PAPER_MIX[1]
        pool = self.replay_pool(snapshot, exclude=frozenset(e.key for e in read_examples(data)),
                                both_orders=both_orders) if short else []
        mix = plan_mix(preference, len(reflection), choice=choice, seed=seed, replay_available=len(pool))
        if not mix.kept_preference + mix.kept_reflection:
            raise InputError("the paper's 4:1 mix keeps no rows of this snapshot: it holds no preference examples and "
                             "the store has no judged labelled pairs to replay (judge labelled pairs, or choose "
                             "'train as is')")
        if not mix.cut and not mix.replay:
            return data, mix
        datasets = require("datasets", extra="train")
        rng = random.Random(seed)
        kept_refl = set(rng.sample(reflection, mix.kept_reflection))
        replayed = [pool[i] for i in sorted(rng.sample(range(len(pool)), mix.replay))]
        cut = set(reflection) - kept_refl
        picked = ds.select([i for k, rows in enumerate(units) if k not in cut for i in rows])
        rows = [{**r, "origin": r.get("origin", ""), "pair_id": str(r.get("pair_id", ""))} for r in picked]
        for item in replayed:
            rows += (in_both_orders({**item[0].to_row(), "example_id": None}, {**item[1].to_row(), "example_id": None})
                     if both_orders else [{**item.to_row(), "example_id": None}])
        digest = rows_hash(rows)
        path = data.with_name(f"{data.name}-mix{PAPER_MIX[0]}to{PAPER_MIX[1]}-{digest[:12]}")
        if path.is_dir():  # the same rows were mixed before: present means complete (the rename below)
            return path, mix
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
        datasets.Dataset.from_list(rows).save_to_disk(str(tmp))
        manifest = {"name": path.name, "content_hash": digest, "rows": len(rows), "both_orders": both_orders,
                    "source": {"folder": data.name, "content_hash": snapshot_hash(data)}, "data_mix": mix.to_dict()}
        (tmp / SNAPSHOT_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        tmp.rename(path)
        return path, mix

    def _worker_env(self) -> dict[str, str]:
        threads = self.settings.generation.fixed_threads()
        return {"OMP_NUM_THREADS": str(threads)} if threads else {}

    # --- watching --------------------------------------------------------------------------------------

    def watch(self, run_id: int, *, completions: int = 16) -> TrainingRunView:
        """A run's live progress; the store's row is brought up to date with it."""
        run = self.store.training_run(int(run_id))
        job = self._jobs.get(run.id)
        if job is not None:
            job.progress(completions=0)  # reaps an exited worker, so a crash is not taken for a live process
        progress = read_progress(run.run_dir, completions=completions, log_chars=LOG_CHARS)
        return TrainingRunView(run=self._sync(run, progress), progress=progress)

    def runs(self) -> list[TrainingRunRecord]:
        """Every recorded run, newest first; runs last seen active are brought up to date."""
        return [self.watch(r.id, completions=0).run if r.active else r for r in reversed(self.store.training_runs())]

    def reconcile(self) -> list[TrainingRunRecord]:
        """Mark runs recorded as active whose process is gone as interrupted (the app calls this at start)."""
        found = []
        for run in self.store.training_runs(statuses=["starting", "running"]):
            if (Path(run.run_dir) / "status.json").exists():
                jobs.reconcile(run.run_dir)
            view = self.watch(run.id, completions=0)
            if view.run.status == "interrupted":
                found.append(view.run)
        if found:
            log.warning("marked %d training run(s) interrupted: %s", len(found), ", ".join(f"#{r.id}" for r in found))
        return found

    def checkpoint(self, run_id: int, path: str) -> Checkpoint:
        """One of a run's checkpoints (or its final model), by path."""
        run = self.store.training_run(int(run_id))
        for c in list_checkpoints(run.run_dir):
            if str(c.path) == str(path):
                return c
        raise InputError(f"{path!r} is not a checkpoint of run #{run_id}: pick one from the run's list")

    def _sync(self, run: TrainingRunRecord, p: RunProgress) -> TrainingRunRecord:
        """Copy what changed in the run folder into the store's row (writes only when something did)."""
        if not (Path(run.run_dir) / "run.json").exists():
            if not run.active:
                return run
            return self.store.update_training_run(run.id, status="failed", finished_at=_now(),
                                                  error=f"the run folder {run.run_dir} is gone")
        changes = {k: v for k, v in _row_fields(p).items() if getattr(run, k) != v}
        if p.finished:
            if run.finished_at is None or "status" in changes:
                changes["finished_at"] = _now()
            if p.log_tail != run.log_tail:
                changes["log_tail"] = p.log_tail
        return self.store.update_training_run(run.id, **changes) if changes else run


def _row_fields(p: RunProgress) -> dict[str, Any]:
    """The store's copy of a run's progress (figures change only with the step)."""
    output = p.checkpoints[-1].path if p.checkpoints else None
    fields: dict[str, Any] = {"status": p.state, "step": p.step, "total_steps": p.total_steps, "error": p.error,
                              "output_model": str(output) if output else ""}
    fields["metrics"] = run_metrics(p)
    return fields


def run_metrics(p: RunProgress) -> dict[str, Any]:
    """The latest loss and reward, the mean reward over the run, and steps logged."""
    out: dict[str, Any] = {"logged_steps": len(p.metrics)}
    if p.loss:
        out["loss"] = p.loss[-1][1]
    if p.reward:
        out["reward"] = p.reward[-1][1]
        out["mean_reward"] = sum(r for _, r in p.reward) / len(p.reward)
    return out


def _example_units(ds: Any, *, both_orders: bool) -> list[list[int]]:
    """The row indexes of each example in `ds`, in order: one row each, or (both orders) the two rows sharing a
    `twin_key`, as the snapshot export writes them, one after the other."""
    if not both_orders:
        return [[i] for i in range(len(ds))]
    keys, orders = list(ds["twin_key"]), list(ds["order"])
    units = [[i, i + 1] for i in range(0, len(keys) - 1, 2) if keys[i] == keys[i + 1] and orders[i:i + 2] == [0, 1]]
    if 2 * len(units) != len(keys):
        raise InputError("the snapshot's rows in both orders are not in (example, other order) pairs: take the run "
                         "again (the export is written afresh)")
    return units


def _is_demo(model: str) -> bool:
    """Whether `model` is the bundled demo judge or a model of its shape (a checkpoint trained from it)."""
    from reflectrm.demo import DEMO_MODEL_DIR

    shape = ("hidden_size", "num_hidden_layers", "vocab_size")
    ours, theirs = _model_config(DEMO_MODEL_DIR), _model_config(Path(model))
    return bool(ours) and all(ours.get(k) == theirs.get(k) for k in shape)


def _model_config(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _now() -> datetime:
    return datetime.now(timezone.utc)
