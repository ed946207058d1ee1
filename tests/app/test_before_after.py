"""The Audit tab's before/after: two models judge the same labelled pairs of a stored data set in both orders, each
as a stored evaluation run, and their position bias is compared pair by pair.

Real SQLite stores and the repo's real demo judge: a copy of its folder is the "after" model (the same weights:
no difference), or the after of a judge that always picks the first response (a real change)."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.core.types import PreferencePair
from reflectrm.demo import DEMO_MODEL_DIR, demo_domain
from reflectrm.errors import Cancelled, InputError
from reflectrm_app.resources import GuardedBackend, ModelHolder
from reflectrm_app.services import Services
from reflectrm_app.services.runtime import Runtime
from reflectrm_app.settings import load_settings
from reflectrm_db.services import JudgmentStore
from tests.app.conftest import first_position_output


def _settings(tmp_path: Path, *, batch: int = 6):  # noqa: ANN202
    # the demo judge's own output budget (its analyses fit), on one CPU thread; `batch` pairs judged together
    return load_settings(warm_up=False, device="cpu", threads=1, model=str(DEMO_MODEL_DIR), audit_batch_size=batch,
                         max_new_tokens=demo_domain().output_tokens, database_url=f"sqlite:///{tmp_path / 'app.db'}")


def _biased(tmp_path: Path) -> Services:
    """Services whose active judge always picks the first response (scripted, named "biased judge"), two pairs a batch
    (Stop acts between batches)."""
    settings = _settings(tmp_path, batch=2)
    holder = ModelHolder(lambda: ScriptedBackend(first_position_output, model_id="biased judge"), name="biased judge")
    return Services.over(Runtime(store=JudgmentStore.open(settings.store.database_url), settings=settings,
                                 model=holder))


def _model_folder(path: Path) -> Path:
    """A folder that passes for a model without being loaded (the refusals and Stop never load it)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}", encoding="utf-8")
    return path


@pytest.fixture
def biased(tmp_path: Path) -> Iterator[Services]:
    s = _biased(tmp_path)
    (tmp_path / "data").mkdir()
    s.judging.add_demo_pairs(6)
    yield s
    s.close()


@pytest.mark.slow
def test_the_same_weights_before_and_after_say_no_difference(tmp_path: Path) -> None:
    s = Services.start(_settings(tmp_path))
    try:
        s.judging.add_demo_pairs(5)
        run_dir = tmp_path / "runs" / "run-1"  # a training run whose final model is the demo judge's weights
        shutil.copytree(DEMO_MODEL_DIR, run_dir / "final")
        s.runtime.store.add_training_run(snapshot_id=None, base_model=str(DEMO_MODEL_DIR), run_dir=str(run_dir),
                                         config={}, status="completed")
        assert s.audit.model_choices() == [("active judge: demo judge", ""),
                                           ("run #1 step 0: final model (run-1/final)", str(run_dir / "final"))]
        result = s.audit.before_after(s.judging.demo_source(), before="", after=str(run_dir / "final"), limit=3)

        assert (result.pairs, result.before_model, result.after_model) == (3, "demo judge", "run-1/final")
        for f in result.figures:
            assert f.before == f.after, f.name
        for f in (result.flip_rate, result.both_orders_accuracy):
            assert (f.change.difference.value, f.change.mcnemar_p, f.change.word) == (0.0, 1.0, "no difference")
        assert result.summary().count("(no difference)") == 2
        assert result.first_slot_win_rate.before.n == 6 and result.first_critique_share.before.n > 0

        # both runs kept: completed, both orders, the same pairs, listed, and compared by the Evaluate tab's compare
        evals = s.evaluation.evals
        runs = {r.id: r for r in evals.runs()}
        assert sorted(runs) == sorted([result.before_run, result.after_run])
        assert {(r.status, r.config["both_orders"], r.items_done) for r in runs.values()} == {("completed", True, 6)}
        assert len({r.config["pairs_fingerprint"] for r in runs.values()}) == 1
        assert "| reflectrm | overall | 3 |" in s.evaluation.compare(result.before_run, result.after_run)
        # the figures are the runs' own: the Evaluate tab's report of the same run says the same
        report = evals.report(result.before_run)["strategies"]["reflectrm"]["both_orders"]
        assert report["flip_rate"]["value"] == result.flip_rate.before.value
        assert report["accuracy"]["value"] == result.both_orders_accuracy.before.value
        # asked again: the same runs, nothing judged twice
        again = s.audit.before_after(s.judging.demo_source(), before="", after=str(run_dir / "final"), limit=3)
        assert again.to_dict() == result.to_dict() and len(evals.runs()) == 2
    finally:
        s.close()


@pytest.mark.slow
def test_a_judge_that_always_picks_the_first_response_against_the_demo_judge(biased: Services, tmp_path: Path) -> None:
    shutil.copytree(DEMO_MODEL_DIR, tmp_path / "data" / "judge copy")
    seen: list[tuple[int, int]] = []
    result = biased.audit.before_after(biased.judging.demo_source(), before="", after="judge copy", limit=6,
                                       progress=lambda done, total: seen.append((done, total)))
    assert (result.before_model, result.after_model, result.pairs) == ("biased judge", "data/judge copy", 6)
    flips, first, both = result.flip_rate, result.first_slot_win_rate, result.both_orders_accuracy
    assert (flips.before.value, first.before.value, both.before.value) == (1.0, 1.0, 0.0)  # every pair flips
    assert (flips.after.value, both.after.value) == (0.0, 1.0)  # the demo judge: right in both orders on these
    assert (flips.change.word, both.change.word) == ("lower", "higher")
    assert result.summary().startswith("after vs before on 6 pairs in both orders: flip rate 100.0 % -> 0.0 %, "
                                       "-100.0 points [")
    assert seen[0] == (0, 12) and seen[-1] == (12, 12)  # pairs over both runs


NO_LABELS = "unlabelled"


@pytest.fixture
def refusing(biased: Services, tmp_path: Path) -> Services:
    """The biased services with a data set without labels, model-shaped folders and links in the data root."""
    biased.judging.judge(PreferencePair.from_query("What is 2 + 2?", "4", "5", source=NO_LABELS))
    data = tmp_path / "data"
    _model_folder(data / "copy")
    (data / "empty").mkdir()
    _model_folder(tmp_path / "outside")
    (data / "link-out").symlink_to(tmp_path / "outside")
    return biased


DEMO = demo_domain().source  # the shipped judge's domain: the data set `add_demo_pairs` fills
# data set, before, after, pairs at most; then the words of the one-line refusal
REFUSALS = [
    pytest.param("", "", "copy", None, "pick a data set of labelled pairs", id="no-data-set"),
    pytest.param("nope", "", "copy", None, "there is no data set 'nope'", id="unknown-data-set"),
    pytest.param(NO_LABELS, "", "copy", None, "has no labelled pairs", id="data-set-without-labels"),
    pytest.param(DEMO, "", "missing", None, "the after model 'missing' is not a model folder", id="missing-folder"),
    # trap: a folder that exists but holds no model is refused before anything loads
    pytest.param(DEMO, "empty", "copy", None, "the before model 'empty' is not a model folder", id="not-a-model"),
    pytest.param(DEMO, "", "../outside", None, "outside the app's data folder", id="dot-dot-out"),
    pytest.param(DEMO, "", str(DEMO_MODEL_DIR.parent), None, "outside the app's data folder", id="absolute-elsewhere"),
    # trap: a link inside the data root to a model outside it is outside, wherever it is named from
    pytest.param(DEMO, "", "link-out", None, "outside the app's data folder", id="link-out-of-the-root"),
    pytest.param(DEMO, "", "co\x00py", None, "control character", id="nul-in-path"),
    pytest.param(DEMO, "", "", None, "before and after are the same model (biased judge)", id="active-judge-twice"),
    pytest.param(DEMO, "biased judge", " ", None, "are the same model", id="active-judge-by-name-and-empty"),
    # trap: one folder spelt two ways is one model
    pytest.param(DEMO, "copy", "./copy/", None, "are the same model", id="one-folder-two-spellings"),
    pytest.param(DEMO, "", "copy", 0, '"Pairs at most" must be a whole number of at least 1', id="zero-pairs"),
    pytest.param(DEMO, "", "copy", 2.5, '"Pairs at most" must be a whole number', id="fractional-pairs"),
]


@pytest.mark.parametrize(("data_set", "before", "after", "limit", "words"), REFUSALS)
def test_before_after_refusals(refusing: Services, data_set: str, before: str, after: str, limit, words: str) -> None:
    loaded: list[str] = []
    refusing.runtime.model_backend = lambda model, cancel=None: loaded.append(model)  # type: ignore[method-assign]
    with pytest.raises(InputError) as caught:
        refusing.audit.before_after(data_set, before=before, after=after, limit=limit)
    message = str(caught.value)
    assert words in message and "\n" not in message
    assert loaded == [] and refusing.evaluation.evals.runs() == []  # refused before anything loads or is stored


def test_stop_keeps_the_before_run_and_the_next_run_goes_on_from_it(biased: Services, tmp_path: Path) -> None:
    _model_folder(tmp_path / "data" / "after")
    loaded: list[str] = []

    def scripted_after(model: str, cancel: threading.Event | None = None) -> GuardedBackend:
        loaded.append(model)
        return GuardedBackend(ScriptedBackend(first_position_output, model_id=model), biased.runtime.generation_lock,
                              cancel)

    biased.runtime.model_backend = scripted_after  # type: ignore[method-assign]
    cancel = threading.Event()
    with pytest.raises(Cancelled, match="the pairs judged so far are kept"):
        biased.audit.before_after(DEMO, before="", after="after", limit=4, cancel=cancel,
                                  progress=lambda done, total: cancel.set() if done == 2 else None)
    [kept] = biased.evaluation.evals.runs()  # the before run, stopped after its first batch: resumable
    assert (kept.status, kept.items_done, kept.items_total, loaded) == ("stopped", 4, 8, [])
    result = biased.audit.before_after(DEMO, before="", after="after", limit=4)
    assert result.before_run == kept.id and biased.evaluation.evals.get(kept.id).status == "completed"
    assert loaded == [str(tmp_path / "data" / "after")] and result.pairs == 4
