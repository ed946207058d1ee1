"""What the app shows: escaping of hostile text, the anatomy's parts, tables; and the settings."""

from __future__ import annotations

import math
import re

import pytest

from reflectrm_app.services import Services
from reflectrm_app.settings import load_settings, parse_auth
from reflectrm_app.ui import views
from reflectrm_app.ui.views import anatomy_html, audit_frames, confidence_frame, esc, examples_frame, verdict_line
from reflectrm.core.types import PreferencePair
from reflectrm.errors import ConfigError

HOSTILE = [
    pytest.param("<img src=x onerror=alert(1)>", id="img-onerror"),
    pytest.param("<script>alert(1)</script>", id="script"),
    # gr.HTML fills its value into a JS template literal and a Handlebars template
    pytest.param("${alert(1)}", id="js-template"),
    pytest.param("{{constructor.constructor('alert(1)')()}}", id="handlebars"),
    pytest.param('" onmouseover="alert(1)', id="attribute-breakout"),
    pytest.param("`${alert(1)}`", id="backtick"),
    pytest.param("</div></details><svg onload=alert(1)>", id="close-and-svg"),
]


@pytest.mark.parametrize("text", HOSTILE)
def test_esc_leaves_no_markup_or_template_syntax(text: str) -> None:
    out = esc(text)
    assert not re.search(r"[<>\"'`${}]", out)


@pytest.mark.parametrize("text", HOSTILE)
def test_anatomy_shows_hostile_responses_and_outputs_as_text(services: Services, text: str) -> None:
    pair = PreferencePair.from_query(f"Is this safe? {text}", text, f"plain {text}", label=1)
    result = services.judging.judge(pair)
    page = anatomy_html(result, title=text)
    # the only tags are the ones the view writes itself
    tags = set(re.findall(r"<\s*([a-zA-Z0-9]+)", page))
    assert tags <= {"div", "span", "b", "details", "summary", "pre", "h3", "h4", "table", "thead", "tbody", "tr",
                    "th", "td"}
    assert not re.search(r"<(img|script|svg)", page)
    assert "${" not in page and "{{" not in page and "`" not in page


def test_anatomy_marks_the_anchor_the_winners_and_eight_cards(services: Services) -> None:
    pair = PreferencePair.from_query("What is 47 + 38?", "85", "75", label=1)
    result = services.judging.judge(pair)
    j = result.judgment
    page = anatomy_html(result)
    assert page.count('data-testid="analysis-card"') == 8
    assert page.count("rr-card rr-anchor") == (1 if j.anchor is not None else 0)
    assert f'data-index="{j.anchor}"' in page
    assert page.count('data-testid="reflection-row"') == len(j.reflections)
    assert page.count("rr-card rr-winner") == len(set(j.winners) - {j.anchor})
    assert "Critique 1 = #" in page and "highest confidence" in page
    assert verdict_line(j) in page or "ABSTAIN" in page


def test_reaggregated_view_says_nothing_was_regenerated(services: Services) -> None:
    pair = PreferencePair.from_query("What is 47 + 38?", "85", "75")
    jid = services.judging.judge(pair).judgment_id
    page = anatomy_html(services.judging.reaggregate(jid, "majority"))
    assert "nothing regenerated" in page and "the record keeps strategy reflectrm" in page


def test_confidence_frame_leaves_out_minus_infinity(services: Services) -> None:
    j = services.judging.judge(PreferencePair.from_query("q?", "a", "b")).judgment
    frame = confidence_frame(j)
    assert len(frame) == sum(math.isfinite(r.confidence) for r in j.rollouts)
    assert len(frame) < len(j.rollouts), "the scripted judge gives some empty outputs (confidence -inf)"
    assert set(frame["role"]) <= {"anchor", "winner", "sample", "unparseable"}


def test_tables_have_their_columns_even_when_empty(services: Services) -> None:
    assert list(examples_frame([]).columns)[:3] == ["id", "state", "source"]
    services.judging.add_demo_pairs(2)
    table, chart, flipped = audit_frames(services.audit.batch_audit(services.judging.demo_source()))
    assert table["subset"].iloc[-1] == "all"
    assert set(chart["metric"]) <= {"both-orders accuracy", "flip rate", "first-position win rate"}
    assert list(flipped.columns)[:2] == ["judgment", "swapped twin"]


# --- settings ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        pytest.param("", [], id="off"),
        pytest.param("ana:secret", [("ana", "secret")], id="one"),
        # a password may contain ':' (only the first one separates); spaces around entries are dropped
        pytest.param("ana:a:b, ben:x", [("ana", "a:b"), ("ben", "x")], id="colon-in-password"),
    ],
)
def test_parse_auth(value: str, expected: list) -> None:
    assert parse_auth(value) == expected


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFLECTRM_AUTH", "ana:secret")
    monkeypatch.setenv("REFLECTRM_MAX_NEW_TOKENS", "96")
    monkeypatch.setenv("REFLECTRM_DATABASE_URL", "sqlite:///x.db")
    s = load_settings(port=8123)
    assert s.app.credentials() == [("ana", "secret")]
    assert (s.app.port, s.app.host, s.store.database_url) == (8123, "127.0.0.1", "sqlite:///x.db")
    assert s.judge_config().max_new_tokens == 96 and s.judge_config().reflection_max_new_tokens == 96


@pytest.mark.parametrize(
    "env, fragment",
    [
        pytest.param({"REFLECTRM_AUTH": "ana"}, "user:password", id="auth-without-password"),
        pytest.param({"REFLECTRM_PORT": "99999"}, "REFLECTRM_PORT", id="port-range"),
        pytest.param({"REFLECTRM_STRATEGY": "best"}, "strategy 'best' is unknown: use one of", id="strategy"),
    ],
)
def test_bad_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch, env: dict, fragment: str) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match=fragment):
        load_settings()


def test_bad_auth_does_not_echo_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFLECTRM_AUTH", "ana:ok,bob")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "ok" not in str(info.value).replace("bob", "")


def test_more_threads_than_cpus_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="threads is 100000: give a thread count from 1 to"):
        load_settings(threads=100000)


@pytest.mark.parametrize(
    "fields, threads",
    [
        pytest.param({}, 1, id="demo-judge-one-thread"),
        pytest.param({"threads": 1, "model": "/models/judge"}, 1, id="explicit"),
        # a real model keeps torch's own choice unless told
        pytest.param({"model": "/models/judge"}, None, id="real-model"),
        pytest.param({"device": "cuda"}, None, id="gpu"),
    ],
)
def test_torch_threads(fields: dict, threads: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # set, it is the user's choice: torch's setting stays
    assert load_settings(**fields).generation.fixed_threads() == threads


def test_anchor_reason_names_the_earliest_runner_up_on_ties() -> None:
    from reflectrm.core.types import Judgment, ParseStatus, Rollout

    from reflectrm_app.ui.views import anchor_reason

    rollouts = tuple(Rollout(index=k, text="t", analysis=f"a{k}", prediction=1, status=ParseStatus.OK,
                             confidence=c, num_tokens=3) for k, c in enumerate([-0.1, -0.1, -0.5, -0.1]))
    j = Judgment(pair=PreferencePair.from_query("q", "a", "b"), strategy="reflectrm", rollouts=rollouts, verdict=1,
                 anchor=0)
    assert anchor_reason(j) == ("#0: highest confidence, -0.100; next best #1 at -0.100, lowest #2 at -0.500; "
                                "tied with #1, #3 at the same confidence: the earliest sample wins a tie (Eq. 6)")


def test_anchor_reason_of_a_record_naming_a_sample_it_lacks_says_so() -> None:
    from reflectrm.core.types import Judgment, ParseStatus, Rollout

    from reflectrm_app.records import JudgeResult
    from reflectrm_app.ui.views import anatomy_html, anchor_reason

    rollouts = tuple(Rollout(index=k, text="t", analysis="a", prediction=1, status=ParseStatus.OK, confidence=-0.1,
                             num_tokens=3) for k in range(2))
    j = Judgment.from_dict(Judgment(pair=PreferencePair.from_query("q", "a", "b"), strategy="reflectrm",
                                    rollouts=rollouts, verdict=1, anchor=9).to_dict())  # as an import reads it
    assert anchor_reason(j) == "#9: not among this judgment's samples (the record is inconsistent; re-judge the pair)"
    html = anatomy_html(JudgeResult(judgment_id=1, judgment=j))  # the Judge tab renders it rather than failing
    assert "not among this judgment" in html and html.count('data-testid="analysis-card"') == 2


@pytest.mark.parametrize("model, revision, says", [
    # the Strategy row printed the host's absolute path of the bundled judge
    pytest.param("DEMO", "sha256:0123456789abcdef0123", "model demo judge · sha256:0123456789ab", id="demo-judge"),
    pytest.param("org/judge", "", "model org/judge (", id="hub-id-as-is"),
])
def test_the_anatomy_names_the_model_as_people_do_not_by_the_hosts_path(model: str, revision: str, says: str) -> None:
    from dataclasses import replace

    from reflectrm.core.types import Judgment, ParseStatus, Rollout
    from reflectrm.demo import DEMO_MODEL_DIR
    from reflectrm_app.records import JudgeResult

    model = str(DEMO_MODEL_DIR) if model == "DEMO" else model
    rollouts = (Rollout(index=0, text="t", analysis="a", prediction=1, status=ParseStatus.OK, confidence=-0.1,
                        num_tokens=3),)
    j = replace(Judgment(pair=PreferencePair.from_query("q", "a", "b"), strategy="reflectrm", rollouts=rollouts,
                         verdict=1, anchor=0), model=model, model_revision=revision, backend="transformers")
    html = anatomy_html(JudgeResult(judgment_id=1, judgment=j))
    assert says in html and str(DEMO_MODEL_DIR) not in html


# --- train --------------------------------------------------------------------------------------------------------


def _run_view(state: str, **progress: object):
    from datetime import datetime, timezone
    from pathlib import Path

    from reflectrm_app.records import TrainingRunView
    from reflectrm_db.records import TrainingRunRecord
    from reflectrm.training.runs import RunProgress

    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    run = TrainingRunRecord(id=3, snapshot_id=1, snapshot_name="s", base_model="m", output_model="", run_dir="/r",
                            config={}, status=state, step=0, total_steps=None, metrics={}, error="", log_tail="",
                            created_at=now, updated_at=now, finished_at=None)
    return TrainingRunView(run=run, progress=RunProgress(run_dir=Path("/r"), state=state, **progress))


@pytest.mark.parametrize(
    "state, progress, expected",
    [
        pytest.param("running", {"step": 4, "total_steps": 40, "eta_s": 72.4},
                     "run #3 running: step 4 / 40 · ~1m 12s left", id="running"),
        # the first step of a (re)start has no pace yet: no made-up estimate
        pytest.param("running", {"step": 0, "total_steps": 40}, "run #3 running: step 0 / 40 · estimating time left",
                     id="no-pace-yet"),
        pytest.param("starting", {"elapsed_s": 3.2}, "run #3 starting: loading the model and data (3s so far)",
                     id="starting"),
        pytest.param("completed", {"step": 40, "total_steps": 40, "elapsed_s": 7300},
                     "run #3 completed: step 40 / 40 in 2h 01m", id="completed"),
        pytest.param("failed", {"step": 2, "total_steps": 40, "error": "OSError: no weights"},
                     "run #3 failed at step 2 / 40: OSError: no weights (the log below shows why; Resume retries)",
                     id="failed-names-the-error"),
        pytest.param("interrupted", {"step": 5, "total_steps": 40},
                     "run #3 interrupted at step 5 / 40: its process stopped without finishing; Resume continues from "
                     "the last checkpoint", id="interrupted-says-what-to-do"),
    ],
)
def test_train_status_line(state: str, progress: dict, expected: str) -> None:
    from reflectrm_app.ui.views import train_status_line

    assert train_status_line(_run_view(state, **progress)) == expected


@pytest.mark.parametrize("text", HOSTILE)
def test_completions_are_shown_verbatim_as_table_text_newest_first(text: str) -> None:
    from reflectrm_app.ui.views import completions_frame, curve_frame

    frame = completions_frame([{"step": 1, "task": "response", "label": 1, "reward": 1.0, "text": "old"},
                               {"step": 2, "task": "analysis", "label": 2, "reward": 0.0, "text": text}])
    assert frame["completion"].tolist() == [text, "old"] and frame["reward"].tolist() == ["0.00", "1.00"]
    curve = curve_frame([(1, 0.5), (2, 0.25)], "loss")
    assert curve.dtypes.to_dict() == {"step": "int64", "loss": "float64"}  # numeric axes, not categories


def test_the_anatomy_marks_a_judgment_whose_reflections_all_failed() -> None:
    """Issue 30: stage 2 shows its parse rate and position bias, and a collapse is marked (trap: each failed
    reflection silently counts for the anchor)."""
    from reflectrm_app.records import JudgeResult
    from tests.eval.test_stage2_health import BIASED, COLLAPSED

    collapsed = anatomy_html(JudgeResult(judgment_id=1, judgment=COLLAPSED))
    assert 'data-testid="stage2-failed"' in collapsed and "0 of 7 reflection(s) parsed" in collapsed
    biased = anatomy_html(JudgeResult(judgment_id=2, judgment=BIASED))
    assert 'data-testid="stage2-failed"' not in biased
    assert "7 of 7 reflection(s) parsed; chose the first-presented critique 6 of 7 (86 %" in biased


def test_the_audit_table_shows_stage_2_position_bias() -> None:
    from reflectrm_app.records import BatchAuditReport
    from reflectrm.audit import audit_stats
    from tests.eval.test_stage2_health import BIASED, PAIR, judgment

    subsets = tuple(audit_stats([(BIASED, judgment([1, 1, None], pair=PAIR.swapped()))]))
    table, _, _ = audit_frames(BatchAuditReport(source="", subsets=subsets, flipped=(), seconds=0.0))
    row = table.iloc[-1]
    assert row["reflection parse rate"] == "90.0%"
    assert row["stage 2 chose Critique 1 [95 % CI]"] == "88.9% [56.5, 98.0]"
    assert row["... where the critiques disagree"] == "88.9% [56.5, 98.0]"  # every critique here disagrees


def test_a_loss_of_float_noise_plots_as_zero() -> None:
    from reflectrm_app.ui.views import curve_frame

    frame = curve_frame([(1, -8e-9), (2, 0.25), (3, -1.5e-3)], "loss")
    # the axis read "-0.000000008"
    assert frame["loss"].tolist() == [0.0, 0.25, -0.0015] and str(frame["loss"][0]) == "0.0"


def test_the_audit_tab_shows_the_judges_measured_stage_2_or_says_there_is_none():
    from reflectrm.demo import MeasuredStage2

    m = MeasuredStage2(pairs=600, two_stage=0.887, greedy=0.82, gain=(0.067, 0.045, 0.088), decisive=820,
                       picks_right=(0.938, 0.919, 0.952), same_pick=(0.887, 0.863, 0.907))
    text = views.measured_stage2_text(m)
    assert "600 held-out pairs" in text and "+6.7 points [+4.5, +8.8]" in text
    assert "93.8 % [91.9, 95.2]" in text and "88.7 % [86.3, 90.7]" in text and "820" in text
    assert "not measured" in views.measured_stage2_text(None)


@pytest.mark.parametrize("typed", [
    pytest.param("[a link](http://example.com)", id="link"),
    pytest.param("<img src=x onerror=alert(1)>", id="html"),
    pytest.param("*bold* _it_ `code` # heading", id="formatting"),
    pytest.param("$$x^2$$ \\(y\\)", id="latex"),
    pytest.param("two\nlines\r\n- a list item", id="line-ends"),
])
def test_a_field_note_quotes_what_was_typed_as_text_on_one_line(typed: str) -> None:
    import re as re_

    note = views.note_markdown(f"error: got {typed!r}")
    assert "\n" not in note and "\r" not in note
    # every punctuation mark is backslash-escaped: nothing typed formats, links, renders HTML or math
    k = 0
    while k < len(note):
        if note[k] == "\\":
            k += 2
            continue
        assert not re_.match(r"[!-/:-@\[-`{-~]", note[k]), (note, k)
        k += 1
    unescaped = re_.sub(r"\\(.)", r"\1", note)
    assert unescaped == " ".join(f"error: got {typed!r}".split())


@pytest.mark.parametrize(("output", "shown"), [
    pytest.param("/srv/app/runs/run-3/final", "run-3/final", id="final-model"),
    pytest.param("/srv/app/runs/run-3/checkpoint-20", "run-3/checkpoint-20", id="checkpoint"),
    pytest.param("", "", id="no-output-yet"),
])
def test_the_runs_table_and_use_as_judge_name_a_checkpoint_by_its_run_not_the_hosts_path(output: str,
                                                                                       shown: str) -> None:
    from datetime import datetime

    from reflectrm_db.records import TrainingRunRecord

    fields = {f: None for f in TrainingRunRecord.__dataclass_fields__}
    run = TrainingRunRecord(**{**fields, "id": 3, "snapshot_name": "s", "status": "completed", "step": 20,
                               "total_steps": 20, "base_model": "/srv/app/models/base", "config": {},
                               "created_at": datetime(2026, 1, 1), "output_model": output})
    row = views.runs_frame([run]).iloc[0]
    assert row["output"] == shown and row["base model"] == "models/base"
    if output:
        assert views.judge_now_text(output) == f"the judge is now {shown}: judgments from now on use it"


def test_a_curve_with_no_points_is_no_plot_yet() -> None:
    # an empty frame drew the plot without axis labels; the room for them was never measured again
    assert views.curve_frame([], "loss") is None


def _summary(flags: tuple[str, ...], anchor: float | None):
    from datetime import datetime, timezone

    from reflectrm_db.records import JudgmentSummary
    return JudgmentSummary(id=7, pair_id=3, query="q", source="s", label=1, verdict=2, strategy="reflectrm",
                           model="m", anchor_confidence=anchor, flags=flags, twin_id=None, correction_id=None,
                           created_at=datetime(2026, 1, 1, tzinfo=timezone.utc), swapped=False)


def test_every_review_flag_has_words_for_why_an_item_is_where_it_is_in_the_queue() -> None:
    from reflectrm_db.records import REVIEW_FLAGS
    assert set(views.QUEUE_REASONS) == set(REVIEW_FLAGS)


@pytest.mark.parametrize("flags, anchor, said", [
    pytest.param(("label_disagrees", "overturned"), 0.4123, ["2 of 5 flags", "contradicts the known label",
                                                              "stage 2 overturned", "anchor confidence 0.412"],
                 id="two-flags"),
    pytest.param((), 0.9, ["no flag of 5 holds", "after every flagged judgment", "anchor confidence 0.900"],
                 id="no-flags"),
    pytest.param(("abstained",), None, ["1 of 5 flags", "no verdict", "no anchor confidence"], id="no-anchor"),
])
def test_the_review_header_says_why_the_item_is_where_it_is(flags, anchor, said) -> None:
    reason = views.queue_reason(_summary(flags, anchor))
    assert reason.startswith("Why here: ") and all(part in reason for part in said), reason
