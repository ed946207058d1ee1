"""How the app shows values: pure functions from `reflectrm` / `db` / service records to HTML and tables.

Every piece of model or user text that goes into HTML passes through `esc`: it is shown, never
rendered or run. Tables (pandas DataFrames for `gr.Dataframe` / plots) carry plain strings, which
the components display as text.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
from types import MappingProxyType

from reflectrm_app.ui.round_views import rule_text
from reflectrm_app.records import (
    AuditResult, BatchAuditReport, ExampleRow, JudgeResult, Mix, ReviewItem, TrainingRunView, model_name,
)
from reflectrm_db.records import (REVIEW_FLAGS, CorrectionRecord, JudgmentSummary, LabelledDerivation, SnapshotRecord,
                                   TrainingRunRecord)
from reflectrm.audit import BEFORE_AFTER_COLUMNS, BeforeAfter
from reflectrm.core.strategies import STRATEGIES, Strategy
from reflectrm.core.types import Judgment, PreferencePair, Reflection, Rollout
from reflectrm.eval.flips import FIXED
from reflectrm.render import stage2_text
from reflectrm.training.runs import Checkpoint

if TYPE_CHECKING:
    from reflectrm_app.services.evaluation import Flips
    from reflectrm_app.services.training import DataMix
    from reflectrm.demo import MeasuredStage2

_TEMPLATE_CHARS = str.maketrans({"$": "&#36;", "{": "&#123;", "}": "&#125;", "`": "&#96;"})


def esc(text: object) -> str:
    """Text made inert in HTML: markup escaped, and template syntax (`${}`, `{{ }}`) neutralised too,
    since `gr.HTML` fills its value into a JS/Handlebars template."""
    return html.escape(str(text), quote=True).translate(_TEMPLATE_CHARS)


def verdict_text(verdict: int | None, *, abstain_reason: str = "") -> str:
    if verdict is None:
        return f"ABSTAIN ({abstain_reason})" if abstain_reason else "ABSTAIN"
    return f"Response {verdict} is better than Response {3 - verdict}"


ROLE_COLOURS = MappingProxyType({"anchor": "#e8590c", "winner": "#2f9e44", "tie-breaker": "#f08c00",
                                 "sample": "#1c7ed6", "greedy": "#7048e8", "unparseable": "#868e96"})


def _strategy(j: Judgment) -> Strategy | None:
    return STRATEGIES.get(j.strategy)


def _reflects(j: Judgment) -> bool:
    """Whether the judgment's strategy uses an anchor and reflections (what its anatomy shows)."""
    strategy = _strategy(j)
    return bool(strategy and strategy.reflections)


def _conf(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "-inf (no tokens)"


# --- one judgment ---------------------------------------------------------------------------------------------


def verdict_line(j: Judgment) -> str:
    """The final verdict in one line of plain text (for a Textbox)."""
    line = verdict_text(j.verdict, abstain_reason=j.abstain_reason)
    if j.correct is not None:
        line += "   [matches label]" if j.correct else f"   [WRONG: label says Response {j.pair.label}]"
    return line


def anatomy_html(result: JudgeResult, *, title: str = "") -> str:
    """The full anatomy: summary, the analysis cards, the reflections; every text escaped."""
    j = result.judgment
    parts = [f'<div class="rr-anatomy" data-judgment-id="{int(result.judgment_id)}">']
    if title:
        parts.append(f'<h3 class="rr-title">{esc(title)}</h3>')
    parts.append(_summary_html(result))
    parts.append('<div class="rr-cards">')
    parts.extend(_card_html(r, j) for r in j.rollouts)
    parts.append("</div>")
    parts.append(_reflections_html(j))
    parts.append("</div>")
    return "".join(parts)


def _summary_html(result: JudgeResult) -> str:
    j = result.judgment
    rows = [
        ("Final verdict", verdict_line(j)),
        ("Strategy", f"{j.strategy} · seed {j.seed} · model {model_name(j.model) or '?'}"
                     f"{' · ' + j.model_revision[:19] if j.model_revision else ''} ({j.backend or '?'})"),
        ("Record", _record_note(result)),
        *_strategy_rows(j),
        ("Vote", vote_text(j)),
    ]
    cells = "".join(f'<div class="rr-key">{esc(k)}</div><div class="rr-val" data-field="{esc(k.lower())}">{esc(v)}</div>'
                    for k, v in rows)
    verdict_class = "rr-abstain" if j.verdict is None else f"rr-verdict-{j.verdict}"
    return f'<div class="rr-summary {verdict_class}">{cells}</div>'


def _record_note(result: JudgeResult) -> str:
    note = f"judgment #{result.judgment_id}"
    if result.reaggregated:
        how = ("re-aggregated from the stored rollouts, nothing regenerated" if not result.generated
               else f"re-aggregated; this strategy needed {result.generated} extra generation call(s)")
        note += f" ({how}; the record keeps strategy {result.recorded_strategy})"
    return note


def _strategy_rows(j: Judgment) -> list[tuple[str, str]]:
    """What this strategy used: anchor and winner group, a tie-breaker, or the greedy output."""
    strategy = _strategy(j)
    if strategy is not None and strategy.greedy:
        samples = sum(not r.greedy for r in j.rollouts)  # a re-aggregation keeps the record's samples
        unused = f"; the {samples} sample(s) below are not used" if samples else ""
        return [("Greedy output", f"one output at temperature 0 decides{unused}")]
    if _reflects(j):
        rows = [("Anchor", anchor_reason(j)), ("Winner group", winners_text(j))]
        return rows + ([("Stage 2", stage2_text(j))] if j.reflections else [])
    how = ("each sample's vote weighs exp(its confidence)" if j.strategy == "confidence-weighted"
           else "one sample, one vote")
    return [("Aggregation", f"{j.strategy}: {how}; no anchor, no reflections"),
            ("Tie-breaker", tie_breaker_text(j))]


def tie_breaker_text(j: Judgment) -> str:
    """Under the vote-only strategies the most confident sample settles a tie (it anchors nothing)."""
    if j.anchor is None:
        return "none (no parseable output)"
    used = " (used: the vote was tied)" if j.vote is not None and j.vote.counts[0] == j.vote.counts[1] else ""
    return f"#{j.anchor}, the most confident sample, decides a tied vote{used}" + _tie_note(j)


def _tie_note(j: Judgment) -> str:
    """Eq. 6 ties: samples as confident as the anchor lose to the earliest one."""
    anchor = j.anchor_rollout
    if anchor is None:
        return ""
    tied = [r.index for r in j.rollouts
            if r.parseable and not r.greedy and r.index != j.anchor and r.confidence == anchor.confidence]
    if not tied:
        return ""
    return (f"; tied with {', '.join(f'#{i}' for i in tied)} at the same confidence: the earliest sample "
            "wins a tie (Eq. 6)")


def anchor_reason(j: Judgment) -> str:
    """Why the anchor is the anchor: its confidence against the others (Eq. 6)."""
    if j.anchor is None:
        return "none (this strategy uses no anchor)" if j.verdict is not None else "none (no parseable output)"
    anchor = j.anchor_rollout
    if anchor is None:  # a record from elsewhere (an import, an edited database) can name a sample it lacks
        return f"#{j.anchor}: not among this judgment's samples (the record is inconsistent; re-judge the pair)"
    others = sorted(((r.confidence, r.index) for r in j.rollouts
                     if r.parseable and not r.greedy and r.index != j.anchor), key=lambda t: (-t[0], t[1]))
    how = "drawn at random (random-anchor ablation)" if j.strategy == "random-anchor" else "highest confidence"
    text = f"#{j.anchor}: {how}, {_conf(anchor.confidence)}"
    if others:
        text += f"; next best #{others[0][1]} at {_conf(others[0][0])}, lowest #{others[-1][1]} at {_conf(others[-1][0])}"
    if j.strategy != "random-anchor":
        text += _tie_note(j)
    unparsed = sum(1 for r in j.rollouts if not r.parseable and not r.greedy)
    if unparsed:
        text += f"; {unparsed} unparseable output(s) could not anchor"
    return text


def winners_text(j: Judgment) -> str:
    if not j.reflections:
        return "stage 2 skipped: every parseable sample agrees" if j.stage2_skipped else "no reflections (strategy)"
    beat = sum(r.prefers_sample for r in j.reflections)
    group = ", ".join(f"#{i}" for i in j.winners) or "empty"
    return f"{group} ({beat} of {len(j.reflections)} reflections preferred the sample over anchor #{j.anchor})"


def vote_text(j: Judgment) -> str:
    if j.vote is None:
        return "no vote"
    c1, c2 = j.vote.counts
    fmt = (lambda x: f"{x:.3f}") if j.strategy == "confidence-weighted" else (lambda x: f"{x:g}")
    greedy = _strategy(j) is not None and _strategy(j).greedy  # type: ignore[union-attr]
    # a greedy judgment's one voter is the greedy output (its index 0 is not sample #0)
    voters = "the greedy output" if greedy and j.vote.voters else ", ".join(f"#{v}" for v in j.vote.voters) or "none"
    text = f"Response 1: {fmt(c1)} · Response 2: {fmt(c2)} · voters {voters}"
    if j.vote.anchor_added:
        text += " · tie-break: the anchor joined the vote (empty winner group or tie, Eq. 9)"
    else:
        text += " · no tie-break"
    return text


def _role(r: Rollout, j: Judgment) -> str:
    """The part a rollout played under the judgment's strategy (only what that strategy used)."""
    if not r.parseable:
        return "unparseable"
    if r.greedy:
        return "greedy"
    if _reflects(j):
        if r.index == j.anchor:
            return "anchor"
        return "winner" if r.index in j.winners else "sample"
    strategy = _strategy(j)
    if strategy is not None and not strategy.greedy and r.index == j.anchor:
        return "tie-breaker"
    return "sample"


def _bar_width(r: Rollout, j: Judgment) -> float:
    finite = [x.confidence for x in j.rollouts if math.isfinite(x.confidence)]
    if not math.isfinite(r.confidence) or not finite:
        return 0.0
    low, high = min(finite), max(finite)
    return 100.0 if high == low else 8.0 + 92.0 * (r.confidence - low) / (high - low)


def _card_html(r: Rollout, j: Judgment) -> str:
    role = _role(r, j)
    badges = {"anchor": '<span class="rr-badge rr-badge-anchor">ANCHOR</span>',
              "winner": '<span class="rr-badge rr-badge-winner">winner group</span>',
              "tie-breaker": '<span class="rr-badge rr-badge-winner">tie-breaker</span>',
              "unparseable": '<span class="rr-badge rr-badge-bad">unparseable</span>'}.get(role, "")
    tag = "greedy" if r.greedy else f"#{r.index}"
    prediction = f"Response {r.prediction}" if r.prediction else "none"
    return (
        f'<div class="rr-card rr-{role}" data-testid="analysis-card" data-index="{r.index}">'
        f'<div class="rr-card-head"><b>{esc(tag)}</b> {badges}</div>'
        f'<div class="rr-pred">Prediction: <b>{esc(prediction)}</b></div>'
        f'<div class="rr-conf">confidence {esc(_conf(r.confidence))}'
        f'<div class="rr-bar"><div class="rr-fill" style="width:{_bar_width(r, j):.1f}%"></div></div></div>'
        f'<div class="rr-meta">parse: {esc(r.status.value)} · {r.num_tokens} tokens · {esc(r.finish_reason)}</div>'
        f'<div class="rr-text">{esc(r.analysis or "(no analysis)")}</div>'
        f'<details><summary>raw output</summary><pre class="rr-raw">{esc(r.text)}</pre></details>'
        "</div>"
    )


def _reflections_html(j: Judgment) -> str:
    if not j.reflections or not _reflects(j):  # a re-aggregation may keep reflections its strategy does not use
        return ""
    rows = "".join(_reflection_row(r) for r in j.reflections)
    collapsed = ('<div class="rr-warning" data-testid="stage2-failed">Every reflection is unparseable: stage 2 '
                 "decided nothing, and the verdict is the anchor's alone.</div>" if j.reflections_all_failed else "")
    return (f'<h4 class="rr-title">Stage 2: {len(j.reflections)} reflection(s) against anchor #{j.anchor}</h4>'
            f"{collapsed}"
            '<table class="rr-reflections"><thead><tr><th>sample</th><th>critique order</th><th>reflection said</th>'
            f"<th>outcome</th><th>full text</th></tr></thead><tbody>{rows}</tbody></table>")


def _reflection_row(r: Reflection) -> str:
    said = f"Critique {r.choice} is better" if r.choice else f"unparseable ({r.status.value}): counts for the anchor"
    outcome = f"#{r.sample} beats the anchor: joins the winner group" if r.prefers_sample else "the anchor holds"
    return (
        f'<tr data-testid="reflection-row"><td>#{r.sample}</td>'
        f"<td>Critique 1 = #{r.order[0]}, Critique 2 = #{r.order[1]}</td>"
        f"<td>{esc(said)}</td><td>{esc(outcome)}</td>"
        f'<td><details><summary>show</summary><pre class="rr-raw">{esc(r.text)}</pre></details></td></tr>'
    )


def confidence_frame(j: Judgment | None) -> pd.DataFrame:
    """One bar per sample, as long as its card's bar (`_bar_width`: the lowest finite Eq. 5 confidence at 8 %,
    the highest at 100 %), so the most confident sample has the tallest bar and none is drawn with no height;
    coloured by its role; -inf samples left out."""
    columns = ["sample", "shown", "confidence", "role"]
    finite = [] if j is None else [r for r in j.rollouts if math.isfinite(r.confidence)]
    rows = [{"sample": f"#{r.index:02d}" if not r.greedy else "greedy",
             "shown": _bar_width(r, j),  # type: ignore[arg-type]
             "confidence": r.confidence, "role": _role(r, j)} for r in finite]  # type: ignore[arg-type]
    return pd.DataFrame(rows, columns=columns).astype({"shown": float, "confidence": float, "sample": str,
                                                       "role": str})


def pair_fields(pair: PreferencePair) -> dict[str, str]:
    """The Judge form's fields for a pair (the conversation as JSON when multi-turn)."""
    messages = "" if not pair.history else json.dumps([{"role": m.role, "content": m.content}
                                                        for m in pair.conversation], ensure_ascii=False, indent=1)
    return {"query": pair.query, "messages": messages, "response_1": pair.response_1, "response_2": pair.response_2}


# --- audit ----------------------------------------------------------------------------------------------------


def audit_banner(audit: AuditResult) -> str:
    """Consistent or flipped, as plain text (for a Textbox)."""
    o, s = audit.original.judgment, audit.swapped.judgment
    if audit.agree is None:
        return "UNDECIDED: one order abstained"
    picked = lambda j, v: j.pair.response_1 if v == 1 else j.pair.response_2  # noqa: E731
    first = short(picked(o, o.verdict))
    if audit.agree:
        return f"CONSISTENT: both orders pick the same response ({first!r})"
    return f"FLIPPED: the original order picks {first!r}, the swapped order picks {short(picked(s, s.verdict))!r}"


def short(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def measured_stage2_text(m: MeasuredStage2 | None) -> str:
    """The active judge's measured stage 2 (its card's figures), as Markdown built from numbers only."""
    if m is None:
        return ("**This judge's stage 2 on its card:** not measured (only a demo judge's card records it; "
                "a batch audit below measures any judge's position bias).")
    ci = lambda t: f"{100 * t[0]:.1f} % [{100 * t[1]:.1f}, {100 * t[2]:.1f}]"  # noqa: E731
    return (f"**This judge's stage 2 on its card** ({m.pairs} held-out pairs): two-stage {100 * m.two_stage:.1f} %, "
            f"greedy {100 * m.greedy:.1f} %, gain {100 * m.gain[0]:+.1f} points "
            f"[{100 * m.gain[1]:+.1f}, {100 * m.gain[2]:+.1f}]. Of {m.decisive} reflections between critiques "
            f"that disagree, {ci(m.picks_right)} pick the right one and {ci(m.same_pick)} pick the same one "
            f"with the critiques exchanged. Between critiques that disagree, an unbiased stage 2 chooses Critique 1 "
            f"about half the time (the last column below; between critiques that agree either choice is right).")


def audit_frames(report: BatchAuditReport) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(per-subset table, chart rows, flipped items) of a batch audit."""
    table = pd.DataFrame([{
        "subset": s.subset, "pairs": s.pairs,
        "both-orders accuracy": _pct(s.both_orders_accuracy), "flip rate": _pct(s.flip_rate),
        "first-position win rate": _pct(s.first_position_win_rate),
        "reflection parse rate": _pct(s.reflection_parse_rate),
        "stage 2 chose Critique 1 [95 % CI]": _share(s.first_critique_rate),
        "... where the critiques disagree": _share(s.decisive_first_rate),
    } for s in report.subsets], columns=["subset", "pairs", "both-orders accuracy", "flip rate",
                                         "first-position win rate", "reflection parse rate",
                                         "stage 2 chose Critique 1 [95 % CI]", "... where the critiques disagree"])
    chart = pd.DataFrame([
        {"bar": f"{s.subset}: {name}", "metric": name, "value": value}
        for s in report.subsets
        for name, value in (("both-orders accuracy", s.both_orders_accuracy), ("flip rate", s.flip_rate),
                            ("first-position win rate", s.first_position_win_rate))
        if value is not None
    ], columns=["bar", "metric", "value"]).astype({"bar": str, "metric": str, "value": float})
    flipped = pd.DataFrame([{
        "judgment": f.judgment_id, "swapped twin": f.twin_id, "subset": f.subset, "query": short(f.query, 80),
        "original order chose": _answer(f.verdict, f), "swapped order chose": _answer(f.swapped_verdict, f),
        "label": _answer(f.label, f),
    } for f in report.flipped], columns=["judgment", "swapped twin", "subset", "query", "original order chose",
                                         "swapped order chose", "label"])
    return table, chart, flipped


def empty_audit_frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The batch-audit tables before any audit (headers only)."""
    return audit_frames(BatchAuditReport(source="", subsets=(), flipped=(), seconds=0.0))


def before_after_frame(result: BeforeAfter | None) -> pd.DataFrame:
    """A before/after's figures as a table of plain text (headers only without one)."""
    return pd.DataFrame([] if result is None else result.rows(), columns=list(BEFORE_AFTER_COLUMNS)).astype(str)


def before_after_text(result: BeforeAfter) -> str:
    """The before/after's one-line summary, then which models and stored runs it compares."""
    return (f"{result.summary()}\nbefore: {result.before_model} (evaluation run {result.before_run}) · after: "
            f"{result.after_model} (evaluation run {result.after_run}) · strategy {result.strategy}")


def _answer(choice: int | None, item: Any) -> str:
    """Which answer a choice (in the original numbering) names: "Response 2: 54"."""
    if choice is None:
        return "—"
    return f"Response {choice}: {short(item.response_1 if choice == 1 else item.response_2, 40)}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _share(rate: tuple[float, float, float] | None) -> str:
    """A share with its interval: "85.7% [48.7, 97.4]" (stage 2's first-critique rate; unbiased 50%)."""
    return "n/a" if rate is None else f"{100 * rate[0]:.1f}% [{100 * rate[1]:.1f}, {100 * rate[2]:.1f}]"


def _resp(x: int | None) -> str:
    return "—" if x is None else f"Response {x}"


# --- review ---------------------------------------------------------------------------------------------------


QUEUE_REASONS = MappingProxyType({
    "abstained": "the judge gave no verdict",
    "label_disagrees": "its verdict contradicts the known label",
    "flipped": "judged in both orders, it picked different responses",
    "overturned": "stage 2 overturned the anchor's verdict",
    "split_vote": "its analyses split their votes between the responses",
})
"""What each review flag says about a judgment, in the words the Review tab shows."""


def queue_reason(s: JudgmentSummary) -> str:
    """Why the judgment stands where it does in the review queue: the queue puts the most flags first, then the
    least confident anchor (no confidence first)."""
    anchor = ("it has no anchor confidence (such judgments come first among equals)" if s.anchor_confidence is None
              else f"its anchor confidence {s.anchor_confidence:.3f} (the least confident come first among equals)")
    if not s.flags:
        return (f"Why here: no flag of {len(REVIEW_FLAGS)} holds, so it comes after every flagged judgment; then "
                f"{anchor}")
    said = "; ".join(QUEUE_REASONS[f] for f in s.flags)
    return (f"Why here: {len(s.flags)} of {len(REVIEW_FLAGS)} flags ({said}): the most flags come first; then "
            f"{anchor}")


def review_header(item: ReviewItem) -> str:
    s = item.summary
    flags = ", ".join(s.flags) or "no flags"
    anchor = "none" if s.anchor_confidence is None else f"{s.anchor_confidence:.3f}"
    label = "unknown" if s.label is None else f"Response {s.label}"
    left = f" · {item.remaining - 1} more after this" if item.remaining else ""
    if item.wrapped:
        left += " · back at the start of the queue (Next had walked through every item)"
    status = "not corrected yet" if item.correction is None else correction_text(item.correction)
    return (f"Judgment #{s.id} · source {s.source or '—'} · flags: {flags} · anchor confidence {anchor} · "
            f"judge says {_resp(s.verdict)} · known label {label}{left}\n{queue_reason(s)}\n{status}")


def withdrawn_text(before: CorrectionRecord) -> str:
    """What a withdrawal took away, counted from the correction as it stood (a withdrawn one derives nothing)."""
    return (f"Withdrew correction #{before.id} with its {len(before.preference_example_ids)} preference example(s) "
            f"and {len(before.reflection_pair_ids)} reflection pair(s)")


def resumed_text(run_id: int, checkpoint_step: int | None, *, max_steps: int | None = None) -> str:
    """Where a resumed training run starts (its last checkpoint, or with none yet step 0) and where it stops."""
    plan = f", to step {max_steps}" if max_steps else ""
    if checkpoint_step is None:
        return f"run #{run_id} starts again from step 0{plan}: it stopped before its first checkpoint"
    return f"resumed run #{run_id} from its checkpoint at step {checkpoint_step}{plan}"


def correction_text(c: CorrectionRecord) -> str:
    marks = ", ".join(f"#{k} {v}" for k, v in sorted(c.marks.items())) or "no marks"
    return (f"Saved correction #{c.id} (revision {c.revision}) by {c.author}: Response {c.verdict} is better; {marks}; "
            f"derived {len(c.preference_example_ids)} preference example(s) and "
            f"{len(c.reflection_pair_ids)} reflection pair(s) — see Curate")


def analyses_frame(j: Judgment) -> pd.DataFrame:
    return pd.DataFrame([{
        "#": k, "prediction": _resp(r.prediction), "confidence": _conf(r.confidence), "role": _role(r, j),
        "analysis": r.analysis or r.text,
    } for k, r in enumerate(j.rollouts)], columns=["#", "prediction", "confidence", "role", "analysis"])


def summaries_frame(rows: Sequence[JudgmentSummary]) -> pd.DataFrame:
    return pd.DataFrame([{
        "id": s.id, "recorded": s.created_at.strftime("%Y-%m-%d %H:%M:%S"), "source": s.source, "query": s.query,
        "judge": _resp(s.verdict), "label": _resp(s.label), "strategy": s.strategy, "flags": ", ".join(s.flags),
        "twin": s.twin_id if s.twin_id is not None else "", "swapped": "yes" if s.swapped else "",
        "corrected": "yes" if s.correction_id else "",
    } for s in rows], columns=["id", "recorded", "source", "query", "judge", "label", "strategy", "flags", "twin",
                               "swapped", "corrected"])  # an audit's twin shows the other label: "swapped" says why


# --- curate ---------------------------------------------------------------------------------------------------


def trains_toward(row: ExampleRow) -> str:
    """What the example teaches: the better response (preference) or the better critique (reflection)."""
    return f"Critique {row.label}" if row.kind == "reflection" else f"Response {row.label}"


def examples_frame(rows: Sequence[ExampleRow]) -> pd.DataFrame:
    """One short line per example (the whole texts, critiques included, are in the selected-row view)."""
    columns = ["id", "state", "source", "query", "known label", "trains toward", "judge", "person", "agrees",
               "contested", "judgment", "created"]
    return pd.DataFrame([{
        "id": r.id, "state": r.state, "source": r.source, "query": short(r.query, 60),
        "known label": _resp(r.known_label), "trains toward": trains_toward(r),
        "judge": _resp(r.judge_verdict), "person": _resp(r.human_verdict),
        "agrees": {True: "yes", False: "no", None: "—"}[r.agrees_with_judge],
        "contested": f"yes: {r.contested}" if r.contested else "",
        "judgment": r.judgment_id if r.judgment_id is not None else "",
        "created": r.created_at.strftime("%Y-%m-%d %H:%M") if r.created_at else "",
    } for r in rows], columns=columns)


def mix_text(mix: Mix) -> str:
    ratio = "n/a (no reflection pairs)" if mix.ratio is None else f"{mix.ratio:.2f}:1"
    return (f"Active: {mix.preference} preference example(s), {mix.reflection} reflection pair(s); "
            f"Pref:Refl = {ratio} (paper: 4:1). {mix.advice()}")


def labelled_derivation_text(source: str, r: LabelledDerivation) -> str:
    """What "Add the paper's examples" did, in one line."""
    skipped = [f"{r.easy} all right (nothing to learn)"] + ([f"{r.corrected} corrected by a person"] if r.corrected
                                                             else [])
    again = f"; {r.already_present} were added before" if r.already_present else ""
    return (f"{source}: {r.judgments} judged pair(s) read, {', '.join(skipped)}: added {r.preference} preference "
            f"example(s) and {r.reflection} reflection pair(s){again}")


def snapshot_mix_text(snapshots: Sequence[SnapshotRecord], name: str, planned: DataMix | None = None) -> str:
    """A snapshot's preference:reflection mix against the paper's 4:1, said before it is trained on: each correction
    yields one preference example and up to 4 reflection pairs, so corrections alone can reach 1:4, and the paper
    found that even 2:1 hurts. With `planned`, also what the chosen mix trains on."""
    found = next((s for s in snapshots if s.name == name), None)
    if found is None:
        return ""
    mix = Mix(preference=found.num_preference, reflection=found.num_reflection)
    ratio = "no reflection pairs" if mix.ratio is None else f"Pref:Refl = {mix.ratio:.2f}:1"
    text = (f"Snapshot {name!r}: {mix.preference} preference example(s), {mix.reflection} reflection pair(s); "
            f"{ratio} (paper: 4:1).")
    if mix.ratio is not None and mix.ratio < 4:
        text = f"**Below the paper's 4:1 mix.** {text} {mix.advice()} Then take a new snapshot in Curate."
    if planned is not None:
        cut = (f" ({planned.cut} reflection pair(s) left out, a sample seeded by {planned.seed}: the paper's 4:1)"
               if planned.cut else "")
        replay = (f" + {planned.replay} replayed from the judge's own rollouts of other labelled pairs"
                  if planned.replay else "")
        text += (f"\n\n**The run will train on {planned.kept_preference} preference example(s){replay} and "
                 f"{planned.kept_reflection} reflection pair(s)**{cut}.")
    return text


def mix_frame(mix: Mix) -> pd.DataFrame:
    total = mix.preference + mix.reflection
    rows = [{"mix": "current", "kind": "preference", "share": mix.preference / total if total else 0.0},
            {"mix": "current", "kind": "reflection", "share": mix.reflection / total if total else 0.0},
            {"mix": "paper 4:1", "kind": "preference", "share": 0.8},
            {"mix": "paper 4:1", "kind": "reflection", "share": 0.2}]
    return pd.DataFrame(rows, columns=["mix", "kind", "share"]).astype({"share": float})


def snapshots_frame(rows: Sequence[SnapshotRecord]) -> pd.DataFrame:
    return pd.DataFrame([{
        "id": s.id, "name": s.name, "preference": s.num_preference, "reflection": s.num_reflection,
        "hash": s.content_hash[:16], "rule": rule_text(s.rule), "note": s.note,
        "created": s.created_at.strftime("%Y-%m-%d %H:%M"),
    } for s in rows], columns=["id", "name", "preference", "reflection", "hash", "rule", "note", "created"])


# --- train ----------------------------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """12 -> "12s", 125 -> "2m 05s", 7300 -> "2h 01m"."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def train_status_line(view: TrainingRunView) -> str:
    """Where a run stands, in one line: "run #3 running: step 4 / 40 · ~1m 12s left"."""
    run, p = view.run, view.progress
    head = f"run #{run.id} {p.state}"
    steps = f"step {p.step} / {p.total_steps}" if p.total_steps else f"step {p.step}"
    if p.state == "starting":
        return f"{head}: loading the model and data ({duration(p.elapsed_s)} so far)"
    if p.state == "running":
        left = "estimating time left" if p.eta_s is None else f"~{duration(p.eta_s)} left"
        return f"{head}: {steps} · {left}"
    if p.state == "failed":
        return f"{head} at {steps}: {p.error or 'see the log'} (the log below shows why; Resume retries)"
    if p.state == "interrupted":
        return f"{head} at {steps}: its process stopped without finishing; Resume continues from the last checkpoint"
    if p.state == "cancelled":
        return f"{head} at {steps}: Resume continues from the last checkpoint"
    return f"{head}: {steps} in {duration(p.elapsed_s)}"


CURVE_DECIMALS = 6  # training curves: finer than any loss or reward difference worth reading off a plot


def curve_frame(points: Sequence[tuple[int, float]], name: str) -> pd.DataFrame | None:
    """(step, value) points as a frame for `gr.LinePlot(x="step", y=name)` (numeric axes); None while there are none.

    None, not an empty frame: the plot measures the room its axes' labels and titles need when it first draws (Vega
    does not measure again when data arrive), so a first drawing without labels left "loss", the tick labels and
    "step" cut off at the plot's edges once the data came.

    Values are rounded to `CURVE_DECIMALS`: a GRPO loss of -8e-9 (zero, up to float noise) made the axis read
    "-0.000000008"."""
    if not points:
        return None
    frame = pd.DataFrame(list(points), columns=["step", name]).astype({"step": int, name: float})
    frame[name] = frame[name].round(CURVE_DECIMALS) + 0.0  # + 0.0: no "-0" on the axis
    return frame


def completions_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """Recent sampled completions, newest first; the text is data, shown as plain text."""
    columns = ["step", "task", "label", "reward", "completion"]
    return pd.DataFrame([{
        "step": r.get("step") if r.get("step") is not None else "", "task": str(r.get("task") or ""),
        "label": r.get("label") if r.get("label") is not None else "",
        "reward": f"{float(r['reward']):.2f}" if isinstance(r.get("reward"), (int, float)) else "",
        "completion": str(r.get("text") or ""),
    } for r in reversed(rows)], columns=columns)


def runs_frame(rows: Sequence[TrainingRunRecord]) -> pd.DataFrame:
    columns = ["run", "snapshot", "status", "step", "base model", "started", "output"]
    return pd.DataFrame([{
        "run": r.id, "snapshot": r.snapshot_name, "status": r.status,
        "step": f"{r.step} / {r.total_steps}" if r.total_steps else str(r.step),
        "base model": short(model_name(r.base_model), 50), "started": r.created_at.strftime("%Y-%m-%d %H:%M"),
        "output": model_name(r.output_model or ""),  # the run's folder and checkpoint, not the host's path
    } for r in rows], columns=columns)


_MARKDOWN_SPECIALS = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation mark (CommonMark escapes them all)


def note_markdown(text: str) -> str:
    """A one-line message for a field's note (a `gr.Markdown`): every punctuation mark backslash-escaped, so a
    typed value it quotes is shown as typed and never formats, links or runs; line ends become spaces."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", " ".join(str(text).split()))


def judge_now_text(model: str) -> str:
    """What "Use as judge" says: the checkpoint by its run folder's and its own name, not the host's path."""
    return f"the judge is now {model_name(model)}: judgments from now on use it"


def checkpoint_choices(checkpoints: Sequence[Checkpoint]) -> list[tuple[str, str]]:
    """Dropdown (label, path) pairs, the final model first."""
    def label(c: Checkpoint) -> str:
        kind = "final model" if c.final else "LoRA adapter" if c.lora else "checkpoint"
        return f"step {c.step}: {kind} ({c.path.name})"

    return [(label(c), str(c.path)) for c in reversed(checkpoints)]


# --- a comparison's flipped pairs and the corrections related to them (the Train tab) ----------------------------

FLIP_COLUMNS = ("direction", "strategy", "order", "pair", "query", "checkpoint's judgment", "judge's judgment")
RELATED_COLUMNS = ("correction", "author", "verdict", "shares", "with flipped pair(s)")


def flipped_frame(flips: Flips, *, limit: int) -> pd.DataFrame:
    """The flipped pairs (at most `limit`): direction, strategy, order, pair id, query, both judgment ids."""
    return pd.DataFrame([[f.direction, f.strategy, "swapped" if f.swapped else "as given", f.item_id, f.query,
                          _judgment_cell(f.checkpoint_judgment), _judgment_cell(f.judge_judgment)]
                         for f in flips.flipped[:limit]], columns=list(FLIP_COLUMNS))


def _judgment_cell(judgment_id: int | None) -> str:
    return "" if judgment_id is None else str(judgment_id)


def related_frame(flips: Flips) -> pd.DataFrame:
    """The corrections sharing a problem or a template with flipped pairs, newest first."""
    return pd.DataFrame([[c.correction_id, c.author, _resp(c.verdict), c.shares, _items_text(c.with_items)]
                         for c in flips.related.rows], columns=list(RELATED_COLUMNS))


def _items_text(items: Sequence[str], *, shown: int = 5) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def flips_text(flips: Flips, *, limit: int) -> str:
    """One line over the flipped table: the runs, how many flipped each way, and whether the table is cut."""
    fixed = sum(f.direction == FIXED for f in flips.flipped)
    total = len(flips.flipped)
    head = (f"runs {flips.judge_run} (the judge) and {flips.checkpoint_run} (the checkpoint): {total} flipped "
            f"(pair, strategy, order): {fixed} fixed, {total - fixed} broken")
    if total > limit:
        head += f"; the first {limit} shown"
    return head + ("; select a row to open both judgments" if total else "")


def related_text(flips: Flips) -> str:
    """One line over the related corrections: how many, and whether they were cut."""
    rows, cut = flips.related.rows, flips.related.cut
    if not flips.flipped:
        return "no pair flipped: no corrections to relate"
    if not rows:
        return "no active correction shares a problem or a template with the flipped pairs"
    return (f"{len(rows)} active correction(s) share a problem or a template with the flipped pairs"
            + (f" (the newest {len(rows)} shown: more do)" if cut else ", newest first"))


def flipped_frame_empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(FLIP_COLUMNS))


def related_frame_empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(RELATED_COLUMNS))
