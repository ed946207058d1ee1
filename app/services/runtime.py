"""What every room of the app shares: one `Runtime` built at start-up, shared by every user.

It holds the store, the settings, the model (`reflectrm_app.resources.ModelHolder`), the generation lock every
backend call takes, the cancel tokens Stop sets, the export folders and the data root users name files in. The
per-tab services (`judging`, `audit`, `review`, `curation`, `history`, `training`, `evaluation`) each hold it;
none holds another.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reflectrm_app.records import model_name
from reflectrm_app.resources import CancelTokens, GuardedBackend, ModelHolder, warm_up_generation
from reflectrm_app.settings import AppSettings
from reflectrm_db.services import JudgmentStore
from reflectrm.backends.base import Backend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import PreferencePair
from reflectrm.defaults import default_model
from reflectrm.errors import InputError
from reflectrm.files.inputs import confine

DATA_ROOT_FIX = "ask whoever runs the app to move it (reflectrm app --data-root, or REFLECTRM_DATA_ROOT)"
"""How the data root moves, for the refusals of a path outside it."""


@dataclass
class Runtime:
    """The app's shared resources.

    Args:
        store: the judgment store.
        settings: the app settings.
        model: loads the backend (once) and switches it.
        data_root: the folder users may name files in; None: the settings' (`ServeSettings.data_root`), else
            `data/` beside a SQLite store.
    """

    store: JudgmentStore
    settings: AppSettings
    model: ModelHolder
    data_root: Path | None = None
    cancels: CancelTokens = field(default_factory=CancelTokens)
    exports: ExportFolders = field(default_factory=lambda: ExportFolders())
    generation_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.data_root is None:
            self.data_root = Path(self.settings.app.data_root or default_runs_dir(self.store_url, name="data")).resolve()

    @classmethod
    def start(cls, settings: AppSettings, *, backend: Backend | None = None) -> Runtime:
        """Open the store and (in the background) the model the settings name."""
        store = JudgmentStore.open(settings=settings.store)
        if backend is not None:
            holder = ModelHolder(lambda: backend, name=backend.model_id)
        else:
            holder = ModelHolder(lambda: _load_backend(settings), warm=warm_up_generation if settings.app.warm_up else None,
                                 name=default_model(settings.generation.model))
            if settings.app.warm_up:
                holder.warm_up()
        return cls(store=store, settings=settings, model=holder)

    def close(self) -> None:
        self.model.close()  # a vLLM engine's processes go now, not at an interpreter exit that would wait on them
        self.exports.remove_all()
        self.store.close()

    @property
    def store_url(self) -> str:
        return self.store.engine.url.render_as_string(hide_password=False)

    def user_path(self, text: str) -> Path:
        """A file or folder a user named, resolved inside the data root; refused in one line when it is not.

        Every path the app reads on a user's behalf passes here (`reflectrm.files.inputs.confine`): a `..`, an
        absolute path elsewhere or a link out of the root is refused alike, whether or not it exists.
        """
        return confine(text, root=self.data_root, setting=DATA_ROOT_FIX)

    # --- the judge ---------------------------------------------------------------------------------------

    def active_judge(self) -> str:
        """The model the app judges with now (a path or Hugging Face id)."""
        return self.model.name or default_model(self.settings.generation.model)

    def active_judge_label(self) -> str:
        """The active judge as the header shows it: its name and weights revision, not the host's absolute path;
        and, when it failed to load (damaged weights, found in the background at start-up), why."""
        label = judge_label(self.active_judge())
        return f"{label} · failed to load: {self.model.error}" if self.model.error else label

    def use_judge(self, model: str | Path) -> str:
        """Make `model` (a training run's checkpoint) the judge every later judgment uses; returns its path.

        The model loads while the current judge keeps serving; judgments under way finish on it.
        """
        path = str(model)
        self.model.switch(lambda: _load_backend(self.settings, model=path), name=path)
        return path

    def backend(self, cancel: threading.Event | None = None) -> GuardedBackend:
        """The active judge behind the generation lock, stopped by `cancel`."""
        return GuardedBackend(self.model.get(), self.generation_lock, cancel)

    def model_backend(self, model: str, cancel: threading.Event | None = None) -> GuardedBackend:
        """Another model (a checkpoint) on the app's backend settings, sharing its generation lock and Stop."""
        return GuardedBackend(_load_backend(self.settings, model=model), self.generation_lock, cancel)

    def judge_config(self, strategy: str | None = None, seed: int | None = None) -> JudgeConfig:
        """The settings' judge config, with a form's strategy and seed when given."""
        changes: dict[str, Any] = {}
        if strategy:
            changes["strategy"] = strategy
        if seed is not None:
            changes["seed"] = int(seed)
        return self.settings.judge_config(**changes)


def refuse_a_contradicting_label(store: JudgmentStore, pair: PreferencePair) -> None:
    """Refuse a pair whose texts are stored already (in either order) with the other known label.

    Recording it would store a second pair with the same texts and the opposite label (a pair's identity is its
    content and its label: `repository.pair_key`), and both would feed training. A label is corrected by a
    person's verdict in the Review tab. Judging and auditing both record pairs, so both check here first.
    """
    if pair.label is None:
        return
    flipped = pair.swapped()
    for stored in store.pairs_with_content([pair.fingerprint(), flipped.fingerprint()]):
        same_order = stored.pair.fingerprint() == pair.fingerprint()
        known, asked = stored.pair.label, pair.label if same_order else flipped.label
        if known is not None and known != asked:
            order = "" if same_order else " with the responses in the other order"
            stored_as = known if same_order else 3 - known  # the stored label in this form's order
            raise InputError(
                f"these texts are stored already as pair {stored.id}{order}, where Response {stored_as} is the "
                f"known better one: judging them as Response {pair.label} would add a second copy with the "
                f"opposite label; judge them as Response {stored_as} and, if that label is wrong, correct it "
                "in the Review tab (save your verdict on the judgment)")


@functools.lru_cache(maxsize=32)
def judge_label(model: str) -> str:
    """A model path or Hub id as people name it: "demo judge", a run's "run/checkpoint-40", or the Hub id, with
    the revision of its weights (a short sha256 of a local folder's weight files; a Hub snapshot id)."""
    from reflectrm.backends.transformers_backend import weights_revision  # stdlib and our code only: cheap

    if not Path(model).is_dir():
        return model
    name = model_name(model)
    revision = weights_revision(model)
    return f"{name} · {revision[:19]}" if revision else name


def default_runs_dir(database_url: str, *, name: str = "runs") -> Path:
    """`runs/` (or `name`) beside a SQLite store's file; `./runs` for an in-memory or server database."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return Path(url.database).resolve().parent / name
    return Path(name).resolve()


def _load_backend(settings: AppSettings, *, model: str | None = None) -> Backend:
    from reflectrm.backends import load_backend

    return load_backend(*settings.backend_configs(model=model))  # torch's CPU threads: `BackendConfig.threads`


class ExportFolders:
    """Where exports are written for download: one temporary folder per app, removed at close; an
    export's own folder is removed once it is older than `keep_s` (the browser has fetched it by then)."""

    def __init__(self, keep_s: float = 600.0) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="reflectrm-exports-"))
        self.keep_s = keep_s

    def new_folder(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self.root))

    def prune(self) -> None:
        cutoff = time.time() - self.keep_s
        for folder in self.root.iterdir():
            if folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)

    def remove_all(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
