"""Plain-text rendering of a judgment's anatomy (for the CLI and logs), its data escaped for a terminal."""

from __future__ import annotations

import math

from reflectrm.core.types import Judgment, Rollout
from reflectrm.display import printable
from reflectrm.eval.metrics import wilson_interval


def _short(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _conf(x: float) -> str:
    return f"{x:8.3f}" if math.isfinite(x) else "    -inf"


def _pred(r: Rollout) -> str:
    return f"R{r.prediction}" if r.prediction else "--"


def first_choice_text(first: int, decided: int) -> str:
    """Stage 2's position bias as a sentence: how often a reflection chose the first-presented critique, with the
    Wilson 95 % interval, against the 50 % an unbiased judge shows (the order is drawn at random)."""
    if not decided:
        return "chose the first-presented critique: n/a (no parsed reflection)"
    low, high = wilson_interval(first, decided)
    outside = "" if low <= 0.5 <= high else (" — biased to the first" if low > 0.5 else " — biased to the second")
    return (f"chose the first-presented critique {first} of {decided} ({100 * first / decided:.0f} %, 95 % CI "
            f"[{100 * low:.0f}, {100 * high:.0f}] %; unbiased: 50 %){outside}")


def stage2_text(j: Judgment) -> str:
    """Stage 2 in one line: the reflection parse rate, a collapse (every reflection failed), the position bias."""
    if not j.reflections:
        return "no reflections"
    total, failed = len(j.reflections), j.reflection_failures
    line = f"{total - failed} of {total} reflection(s) parsed"
    if j.reflections_all_failed:
        line += " — STAGE 2 FAILED: every reflection is unparseable, so the anchor's verdict stands alone"
    return f"{line}; {first_choice_text(*j.reflections_first_chosen)}"


def render_judgment(j: Judgment, *, width: int = 72) -> str:
    """The full anatomy: samples, anchor, reflections, winner group, vote, verdict."""
    pair = j.pair
    lines = [f"Pair {pair.id}" + (f"   (label: Response {pair.label})" if pair.label else "")]
    lines.append(f"Query: {_short(pair.query, width + 20)}")
    lines.append(f"Response 1: {_short(pair.response_1, width + 15)}")
    lines.append(f"Response 2: {_short(pair.response_2, width + 15)}")
    lines.append(f"Model: {j.model} ({j.backend})   strategy: {j.strategy}   seed: {j.seed}")
    lines.append("")
    lines.append(f"Stage 1: {len(j.rollouts)} sample(s)")
    lines.append("   #  pred  confidence  status          tokens  analysis")
    for r in j.rollouts:
        mark = "*" if r.index == j.anchor and not r.greedy else " "
        tag = "g" if r.greedy else str(r.index)
        lines.append(f" {mark}{tag:>2}  {_pred(r):>4}  {_conf(r.confidence)}    {r.status.value:<14}  "
                     f"{r.num_tokens:>6}  {_short(r.analysis or r.text, width)}")
    if j.anchor is not None and j.strategy != "greedy":
        others = sorted((r.confidence for r in j.rollouts if r.parseable and r.index != j.anchor and not r.greedy),
                        reverse=True)
        runner = f"; next best {others[0]:.3f}" if others else ""
        lines.append(f"Anchor: #{j.anchor} (highest confidence {j.rollouts[j.anchor].confidence:.3f}{runner})")
    if j.reflections:
        lines.append("")
        lines.append(f"Stage 2: {len(j.reflections)} reflection(s) against anchor #{j.anchor}")
        for r in j.reflections:
            shown = f"[Critique 1 = #{r.order[0]}, Critique 2 = #{r.order[1]}]"
            said = f"Critique {r.choice} better" if r.choice else f"unparseable ({r.status.value}) -> anchor"
            outcome = f"#{r.sample} beats anchor" if r.prefers_sample else "anchor holds"
            lines.append(f"  #{r.sample} vs #{r.anchor}  {shown}  {said:<24}  {outcome}")
        lines.append(f"Winner group: {{{', '.join(f'#{i}' for i in j.winners)}}}" if j.winners else "Winner group: empty")
        lines.append(f"Stage 2: {stage2_text(j)}")
    elif j.stage2_skipped:
        lines.append("Stage 2: skipped (every parseable sample agrees)")
    lines.append("")
    if j.vote is not None:
        c1, c2 = j.vote.counts
        fmt = (lambda x: f"{x:g}") if j.strategy != "confidence-weighted" else (lambda x: f"{x:.3f}")
        extra = "  (anchor added: empty group or tie)" if j.vote.anchor_added and j.strategy in (
            "reflectrm", "random-anchor", "random-winners") else ("  (tie broken by the anchor)" if j.vote.anchor_added else "")
        lines.append(f"Vote: Response 1: {fmt(c1)}   Response 2: {fmt(c2)}{extra}")
    if j.verdict is None:
        lines.append(f"Final verdict: ABSTAIN ({j.abstain_reason})")
    else:
        check = "" if j.correct is None else ("   [matches label]" if j.correct else "   [WRONG: label says Response %d]" % pair.label)
        lines.append(f"Final verdict: Response {j.verdict} is better than Response {3 - j.verdict}{check}")
    t = j.timings
    if t:
        lines.append(f"Time: stage 1 {t.get('stage1_s', 0):.2f}s, stage 2 {t.get('stage2_s', 0):.2f}s; "
                     f"{j.tokens_generated} tokens generated")
    return "\n".join(printable(line) for line in lines)  # data escaped: a newline or ESC in it cannot fake a line
