"""End to end: the Train tab of the real `reflectrm app` (demo judge, SQLite), driven by Chromium.

The store holds a snapshot of corrected judgments before the server starts; the browser starts a
short GRPO run on it, watches its progress, and makes its final model the active judge through the promotion
gate: stored runs that find it worse than the active judge block it until a named reviewer overrides, and the
pairs that comparison flipped each open in the anatomy.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import expect, sync_playwright  # noqa: E402

from reflectrm_db.services import JudgmentStore  # noqa: E402
from reflectrm.backends import ScriptedBackend  # noqa: E402
from reflectrm.core.config import JudgeConfig  # noqa: E402
from reflectrm.core.types import PreferencePair  # noqa: E402
from reflectrm.defaults import default_model  # noqa: E402
from reflectrm.demo.tasks import make_pairs  # noqa: E402
from reflectrm.training.runs import list_checkpoints  # noqa: E402
from reflectrm_app.services.evaluation import Evaluations  # noqa: E402
from reflectrm.pipeline import judge_many  # noqa: E402
from tests.app.browser import CHROMIUM, launch_chromium, running_app  # noqa: E402
from tests.app.test_e2e import new_page, open_tab, table, value, wait_value  # noqa: E402
from tests.app.test_promotion import CONFIG, RIGHT, WRONG, _request  # noqa: E402
from tests.db.helpers import scripted_output  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's Chromium at {CHROMIUM}"),
]

STEPS = 6  # long enough that the 2-second refresh sees the run between its steps


def _seed_snapshot(url: str) -> None:
    """Corrected judgments of demo-arithmetic pairs (a scripted judge), frozen as snapshot "seeded"."""
    pairs = make_pairs(8, seed=7, source="demo-arith")
    judgments = list(judge_many(pairs, ScriptedBackend(scripted_output), JudgeConfig(max_new_tokens=16)))
    with JudgmentStore.open(url) as store:
        for jid, pair in zip(store.record(judgments, swapped=False), pairs):
            store.correct(jid, verdict=pair.label, author="seed")
        store.snapshot("seeded")


def _seed_a_worse_comparison(url: str, root: Path, *, checkpoint: str) -> None:
    """Stored runs on the same pairs: the active judge always right, the checkpoint always wrong (scripted); and a
    correction of a pair of the same template as theirs ("question #"), which the flipped pairs' view relates."""
    request = _request(root)
    same_shape = PreferencePair(conversation=({"role": "user", "content": "question 99"},), response_1="GOOD x",
                                response_2="BAD x", label=1, source="elsewhere")
    with JudgmentStore.open(url) as store:
        for model, judge in ((default_model(None), RIGHT), (checkpoint, WRONG)):
            Evaluations(store).run(request, backend=ScriptedBackend(judge, model_id=model), config=CONFIG)
        [jid] = store.record(list(judge_many([same_shape], ScriptedBackend(RIGHT), CONFIG)), swapped=False)
        store.correct(jid, verdict=1, author="bo")


def _the_flipped_pairs_open_in_the_anatomy(page, url: str, *, checkpoint: str) -> None:  # noqa: ANN001
    """Under the refused promotion: the 16 pair-orders the checkpoint broke, the related correction, and a row
    that opens the checkpoint's judgment and the judge's, each in the full anatomy."""
    note = wait_value(page, "train-flips-note", r"^(runs|error|not compared)")
    assert re.fullmatch(r"runs \d+ \(the judge\) and \d+ \(the checkpoint\): 16 flipped \(pair, strategy, order\): "
                        r"0 fixed, 16 broken; select a row to open both judgments", note), note
    flipped = table(page, "train-flips")
    assert len(flipped) == 16 and {(r["direction"], r["strategy"]) for r in flipped} == {("broken", "greedy")}
    assert flipped[0]["pair"] == "p0" and flipped[0]["order"] == "as given" and flipped[0]["query"] == "question 0"
    [related] = table(page, "train-related")
    assert (related["author"], related["verdict"], related["shares"]) == ("bo", "Response 1", "template")
    assert related["with flipped pair(s)"] == "p0, p1, p2, p3, p4 and 3 more"
    mine, theirs = flipped[0]["checkpoint's judgment"], flipped[0]["judge's judgment"]
    page.locator("#train-flips [role=gridcell]", has_text=re.compile(rf"^\s*{mine}\s*$")).first.click()
    wait_value(page, "train-flip-status", r"^pair p0 \(greedy, as given\): broken$")
    for elem, jid in (("train-flip-checkpoint", mine), ("train-flip-judge", theirs)):
        expect(page.locator(f"#{elem} .rr-anatomy[data-judgment-id='{jid}']")).to_be_visible()
    with JudgmentStore.open(url) as store:
        models = [store.load(int(j)).judgment.model for j in (mine, theirs)]
    assert models == [checkpoint, default_model(None)]
    expect(page.locator("#train-flip-checkpoint")).to_contain_text("The checkpoint's judgment: judgment #" + mine)


def test_start_a_run_watch_it_and_use_its_checkpoint_as_the_judge(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'app.db'}"
    _seed_snapshot(db_url)
    with running_app(db_url, log=tmp_path / "app.log") as url, sync_playwright() as pw:
        browser = launch_chromium(pw)
        page = new_page(browser, url)
        assert value(page, "active-judge").startswith("demo judge · sha256:")  # its name and revision, not a path
        open_tab(page, "Train")
        expect(page.locator("#train-snapshot input")).to_have_value("seeded")
        assert value(page, "train-base-model").endswith("reflectrm/demo/model")  # the active judge by default
        page.fill("#train-max-steps input", str(STEPS))
        page.fill("#train-minutes input", "30")  # a budget these steps never reach, its rate decayed over it
        page.get_by_text("More settings").click()
        page.check("#train-decay input")
        page.check("#train-both-orders input")  # each example with its other order, paid by the other order's share
        page.click("#train-start")
        wait_value(page, "train-status", r"^(started run #1|error)")
        # the paper's 4:1 by default: all 8 preference examples, a quarter as many reflection pairs
        assert re.fullmatch(r"started run #1 on snapshot 'seeded' \(8 preference example\(s\), [0-2] reflection "
                            r"pair\(s\)\)", value(page, "train-status")), value(page, "train-status")

        seen = _progress_lines(page, until=rf"^run #1 (completed|failed|interrupted)")
        assert seen[-1].startswith(f"run #1 completed: step {STEPS} / {STEPS}"), (seen, value(page, "train-log"))
        running = rf"run #1 running: step [1-{STEPS - 1}] / {STEPS} · (~\d|estimating)"
        assert any(re.match(running, s) for s in seen), seen
        # the status box follows the run to its end (a cancel's "stops after the step in progress" used to stay)
        wait_value(page, "train-status", r"^run #1 completed")
        expect(page.locator("#train-log textarea")).to_have_value(re.compile(rf"completed at step {STEPS}"))
        page.wait_for_timeout(300)
        at_end = "(t) => t.scrollHeight - t.scrollTop - t.clientHeight < 4"
        assert page.locator("#train-log textarea").evaluate(at_end), "the log does not show its end"
        assert table(page, "train-completions"), "no recent completions shown"
        runs = table(page, "train-runs")
        assert (runs[0]["run"], runs[0]["snapshot"], runs[0]["status"]) == ("1", "seeded", "completed")
        final = runs[0]["output"]  # the run's folder and checkpoint, not the host's absolute path
        assert re.fullmatch(r"[^/]+/final", final), final
        expect(page.locator("#train-checkpoint input")).to_have_value(re.compile(rf"step {STEPS}: final model"))

        with JudgmentStore.open(db_url) as store:
            checkpoint = str(list_checkpoints(store.training_run(1).run_dir)[-1].path)
            assert store.training_run(1).config["both_orders"] is True
        _seed_a_worse_comparison(db_url, tmp_path, checkpoint=checkpoint)
        page.click("#train-use")  # the gate finds it worse: refused, the reason said, the judge unchanged
        wait_value(page, "train-status", r"^(refused|error|the judge is now)")
        refused = value(page, "train-status")
        assert refused.startswith("refused: not promoted: the checkpoint is significantly worse than the active "
                                  "judge on greedy / overall"), refused
        assert value(page, "train-gate").startswith("gate: worse on greedy / overall")
        assert "greedy / overall: worse (A 100.0 %, B 0.0 %" in value(page, "train-gate")
        assert value(page, "active-judge").startswith("demo judge")
        assert table(page, "train-promotions") == []
        _the_flipped_pairs_open_in_the_anatomy(page, db_url, checkpoint=checkpoint)
        page.check("#train-override input")
        page.fill("#train-reviewer textarea", "ana")
        page.click("#train-use")
        wait_value(page, "train-status", r"^(?!refused: not promoted: the checkpoint)")  # until the refusal goes
        assert value(page, "train-status").startswith(f"the judge is now {final}")
        assert value(page, "train-status").endswith("(gate: worse, overridden by ana)")
        expect(page.locator("#train-override input")).not_to_be_checked()  # an override is for one promotion
        expect(page.locator("#train-promotions")).to_contain_text("ana")
        [promoted] = table(page, "train-promotions")
        assert (promoted["who"], promoted["model"], promoted["previous judge"], promoted["verdict"]) == \
            ("ana", final, "demo judge", "worse")
        assert promoted["overridden"].lower() in ("true", "✓"), promoted
        # the header names the checkpoint by its run folder and revision, not the host's absolute path
        assert value(page, "active-judge").startswith(final + " · sha256:")
        with JudgmentStore.open(db_url) as store:
            stored, records = store.training_run(1), store.promotions()
        assert (stored.status, stored.step) == ("completed", STEPS) and stored.output_model.endswith("/" + final)
        assert (stored.config["max_time_s"], stored.config["lr_scheduler"]) == (1800.0, "linear-time")
        assert stored.config["data_mix"]["choice"] == "paper"
        [record] = records
        assert (record.promoted_by, record.overridden, record.model) == ("ana", True, checkpoint)
        browser.close()


def _progress_lines(page, *, until: str, timeout_s: float = 300) -> list[str]:  # noqa: ANN001
    """Every distinct line the Progress box showed, until one matches `until`."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = value(page, "train-progress")
        if line and (not seen or seen[-1] != line):
            seen.append(line)
        if re.match(until, line):
            return seen
        page.wait_for_timeout(250)
    raise AssertionError(f"the run did not finish within {timeout_s:.0f}s: {seen}")
