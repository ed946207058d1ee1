"""Does self-reflection work on a demo judge? Every figure of issue 15's first block, on held-out pairs.

    python research/demo_reflection.py --model DIR [--pairs 600] [--batch-size 8] [--backend vllm] [--out FILE.json]
    python research/demo_reflection.py --model DIR --pairs 300 --backend vllm --samples-only   # ceiling only, ~1 min

Judges held-out multi-step pairs (`reflectrm.demo.steps`; problems the build trained on are left
out, in any wording) with the real pipeline: greedy, then two-stage ReflectRM with N = 8 samples.
Every other strategy is re-aggregated on the same rollouts (majority@8, random-winners) or on the
same samples with new reflections (random-anchor), so the differences are paired. Then the
reflections whose two critiques reach different verdicts are judged again with the critiques
swapped: does the reflection pick the right critique, and the same one in both orders? Last, the
ceiling: the accuracy a perfect reflection would reach on the same samples (every pair with a sample
that worked the problem rightly all through, else the anchor's verdict), which no reflection can pass,
and what reflections that never err at the first difference would reach under the paper's majority of
winners (samples that fix the anchor's first mistake and make their own later win too).

Differences carry a paired bootstrap 95 % interval (resampling pairs) and an exact McNemar p-value.
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the shared bench harness

from reflectrm_app.commands import options  # noqa: E402
from reflectrm.backends.base import GenerationRequest, SamplingParams  # noqa: E402
from reflectrm.core import JudgeConfig  # noqa: E402
from reflectrm.core.parsing import parse_output  # noqa: E402
from reflectrm.core.prompts import Task, format_critique, reflection_prompt  # noqa: E402
from reflectrm.core.types import Judgment  # noqa: E402
from reflectrm.demo import domain_of  # noqa: E402
from reflectrm.demo import steps  # noqa: E402
from reflectrm.demo.steps import first_difference, parse_analysis  # noqa: E402
from reflectrm.demo import running_sum_card  # noqa: E402
from reflectrm.demo.heldout import EVAL_SEED, heldout_pairs  # noqa: E402
from reflectrm.errors import InputError, ReflectRMError  # noqa: E402
from reflectrm.core.config import counting  # noqa: E402
from reflectrm.defaults import default_model  # noqa: E402
from reflectrm.eval.compare import paired_difference  # noqa: E402
from reflectrm.eval.metrics import wilson_interval  # noqa: E402
from reflectrm.pipeline import judge_many, rejudge, rejudge_many  # noqa: E402
from harness import finish, load, parser



def accuracy(js: list[Judgment]) -> float:
    return sum(bool(j.correct) for j in js) / len(js)


def difference(a: list[bool], b: list[bool]) -> dict:
    """a - b per pair: the mean with a paired bootstrap 95 % interval, and the exact McNemar p-value."""
    d = paired_difference([float(x) for x in b], [float(x) for x in a])
    e = d["difference"]
    return {"diff": e["value"], "lo": e["low"], "hi": e["high"], "only_reflectrm": d["only_b"],
            "only_other": d["only_a"], "mcnemar_p": d["mcnemar_p"]}


def rejudge_batched(js: list[Judgment], strategy: str, backend, config: JudgeConfig, batch: int) -> list[Judgment]:
    """`rejudge` for many judgments, their new reflections batched together (same rollouts)."""
    return list(rejudge_many(js, backend, config.with_(strategy=strategy), batch_size=batch))


def reflection_audit(js: list[Judgment], backend, config: JudgeConfig) -> dict:
    """Reflections whose critiques reach different verdicts: right picks, and picks kept when swapped."""
    cases, requests = [], []
    for j in js:
        by_index = {r.index: r for r in j.rollouts if not r.greedy}
        for refl in j.reflections:
            a, b = by_index[refl.order[0]], by_index[refl.order[1]]
            if not (a.parseable and b.parseable) or a.prediction == b.prediction:
                continue
            crit = [format_critique(x.analysis, x.prediction, include_verdict=config.critique_includes_verdict)
                    for x in (b, a)]
            requests.append(GenerationRequest(tuple(reflection_prompt(j.pair, *crit)), (0,)))
            cases.append((j, refl, by_index))
    params = SamplingParams(temperature=config.reflection_temperature, max_new_tokens=config.reflection_max_new_tokens)
    swapped = []
    for s in range(0, len(requests), 32):
        swapped.extend(backend.generate(requests[s : s + 32], params))
    right = same = at_first_difference = 0
    sound: list[bool] = []  # among them, where the critique with the right verdict also worked the problem rightly
    for (j, refl, by_index), (c,) in zip(cases, swapped):
        chosen = refl.order[refl.choice - 1] if refl.choice else None
        picked_right = chosen is not None and by_index[chosen].prediction == j.pair.label
        right += picked_right
        good = next(by_index[i] for i in refl.order if by_index[i].prediction == j.pair.label)
        if steps.analysis_true(good.analysis, steps.chain_in(j.pair.query), task=Task.RESPONSE):
            sound.append(picked_right)
        choice2 = parse_output(c.text, task=Task.ANALYSIS).choice
        chosen2 = (refl.order[1], refl.order[0])[choice2 - 1] if choice2 else None
        same += chosen is not None and chosen == chosen2
        at_first_difference += checks_first_difference(refl.analysis, *(by_index[i].analysis for i in refl.order))
    n = max(1, len(cases))
    return {"decisive_reflections": len(cases), "picks_right": right / n, "same_pick_both_orders": same / n,
            "picks_right_interval": wilson_interval(right, len(cases)) if cases else None,
            "same_pick_interval": wilson_interval(same, len(cases)) if cases else None,
            "checks_the_first_difference": at_first_difference / n,
            # a right verdict reached by a wrong analysis (a check worked wrong, mistakes that cancel, or no check
            # at 0 and Response 1 by default) is luck the reflection cannot see; here "the right critique" is right
            # all through
            "right_critique_sound": len(sound),
            "picks_right_where_right_critique_sound": sum(sound) / max(1, len(sound))}


def reflection_ceiling(js: list[Judgment]) -> tuple[list[bool], dict]:
    """The best any reflection could do with these samples, per pair: right when some sample worked the
    problem rightly all through (a perfect reflection lets exactly those beat an unsound anchor, and their
    verdicts are right), else the anchor's verdict. It separates the sampler's limit from the reflection's."""
    ceiling, counts = [], {"anchor_unsound": 0, "anchor_unsound_with_a_sound_sample": 0, "no_sound_sample": 0}
    for j in js:
        chain = steps.chain_in(j.pair.query)
        sound = {r.index for r in j.rollouts if not r.greedy
                 and steps.analysis_true(r.analysis or "", chain, task=Task.RESPONSE)}
        anchor = j.anchor_rollout
        ceiling.append(bool(sound) or (anchor is not None and anchor.prediction == j.pair.label))
        if j.anchor not in sound:
            counts["anchor_unsound"] += 1
            counts["anchor_unsound_with_a_sound_sample"] += bool(sound)
        counts["no_sound_sample"] += not sound
    return ceiling, counts


def ceiling_figures(sampled: list[Judgment], correct: dict[str, list[bool]]) -> dict:
    """The ceiling's figures for the JSON: its accuracy, the sampler's counts, and it minus greedy and majority@8."""
    ceiling, sampler = reflection_ceiling(sampled)
    return {"accuracy": sum(ceiling) / len(ceiling), **sampler,
            "minus_greedy": difference(ceiling, correct["greedy"]),
            "minus_majority@8": difference(ceiling, correct["majority@8"])}


def points(b: dict) -> str:
    """A difference and its interval in points: "+7.8 [+4.5, +11.0]"."""
    return f"{100 * b['diff']:+.1f} [{100 * b['lo']:+.1f}, {100 * b['hi']:+.1f}]"


def right_at(a: steps.Analysis, at: tuple[str, int], chain: steps.Chain) -> bool:
    """Whether analysis `a` is right where two analyses first differ (`at`, from `first_difference`)."""
    where, i = at
    if where == "step":
        return i < len(a.steps) and steps.step_right(a.steps[i], chain)
    return i < len(a.checks) and a.checks[i].worked


def first_difference_oracle(js: list[Judgment]) -> list[bool]:
    """Per pair, the verdict ReflectRM would reach with reflections that never err at their own job: a sample
    beats the anchor when it is right and the anchor wrong where they first differ; the paper's majority
    of winners then decides (the anchor joins an empty or tied group). Below the ceiling by the samples
    that fix the anchor's first mistake but make one of their own later: they win, and vote by luck."""
    out = []
    for j in js:
        chain = steps.chain_in(j.pair.query)
        anchor = j.anchor_rollout
        a = parse_analysis(anchor.analysis) if anchor is not None else None
        votes = {1: 0, 2: 0}
        for r in j.rollouts:
            b = parse_analysis(r.analysis) if r.parseable and not r.greedy and r.index != j.anchor else None
            at = first_difference(b, a) if a and b else None
            if at is not None and right_at(b, at, chain) and not right_at(a, at, chain):
                votes[r.prediction] += 1
        if anchor is not None and anchor.parseable and votes[1] == votes[2]:
            votes[anchor.prediction] += 1
        out.append(votes[j.pair.label] > votes[3 - j.pair.label])
    return out


def checks_first_difference(reflection: str, critique_1: str, critique_2: str) -> bool:
    """Does the reflection walk to the step where its critiques first differ, and check that one
    (reads the question's step again there)?"""
    a, b = parse_analysis(critique_1), parse_analysis(critique_2)
    at = first_difference(a, b) if a and b else None
    walked = re.findall(r"Step (\d+):", reflection)
    if at is None or at[0] != "step" or not walked:
        return False
    return int(walked[-1]) == at[1] + 1 and "The question says" in reflection


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=counting, default=600)
    ap.add_argument("--batch-size", type=counting, default=8)
    ap.add_argument("--max-new-tokens", type=counting, metavar="N",
                    help="per output, at least 1 (default: what the judge's domain needs)")
    ap.add_argument("--out", type=Path, help="also write the figures (and judgments as FILE.jsonl) here")
    ap.add_argument("--samples-only", action="store_true",
                    help="judge greedy and the N samples only (no reflections): greedy, majority@8 and the perfect "
                         "reflection's ceiling in a few minutes, to find the build stage worth the full run")
    # the judge as `reflectrm judge` takes it (BackendConfig, EngineConfig): --model DIR, a running-sum demo judge;
    # --backend vllm (the `vllm` extra) is 20-30x faster on a CPU here
    options.add_backend_flags(ap)
    ap.add_argument("--card", action="store_true",
                    help="also write the figures into the model's demo_card.json (its \"eval\": what the card shows)")
    args = ap.parse_args(argv)
    args.argv = argv  # what the card records as the command that measured it
    args.model = default_model(args.model)  # its folder: the card says what its build trained on
    try:
        return run(args)
    except ReflectRMError as exc:  # a bad model folder, card or engine: one line, exit 2
        ap.exit(2, f"{ap.prog}: error: {exc}\n")


def samples_only(args: argparse.Namespace, pairs: list, greedy: list[Judgment], sampled: list[Judgment]) -> int:
    """The --samples-only figures: greedy, majority@8, and the ceiling of any reflection on the samples."""
    correct = {"greedy": [bool(j.correct) for j in greedy], "majority@8": [bool(j.correct) for j in sampled]}
    figures = {"model": str(args.model), "heldout_pairs": len(pairs),
               "accuracy": {name: sum(c) / len(c) for name, c in correct.items()},
               "reflection_ceiling": ceiling_figures(sampled, correct),
               "load": load()}
    c, acc = figures["reflection_ceiling"], figures["accuracy"]
    print(f"greedy {100 * acc['greedy']:.1f} %, majority@8 {100 * acc['majority@8']:.1f} %, "
          f"a perfect reflection {100 * c['accuracy']:.1f} % (greedy {points(c['minus_greedy'])})")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return finish(figures)


def run(args: argparse.Namespace) -> int:
    card = running_sum_card(args.model, args.pairs)
    if args.out:  # checked before the run: a path that cannot be written must not cost a 25-minute run
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"--out {args.out}: cannot create its folder ({exc.strerror}): "
                             "pick a writable path") from None
        if not os.access(args.out.parent, os.W_OK) or args.out.is_dir():
            raise InputError(f"--out {args.out}: not a writable file path: pick another")
    pairs = heldout_pairs(card, args.pairs, seed=EVAL_SEED, source="demo-steps-heldout")
    backend = options.load_judge(*options.backend_configs(args))
    tokens = args.max_new_tokens or domain_of(args.model).output_tokens
    config = JudgeConfig(max_new_tokens=tokens, reflection_max_new_tokens=tokens)
    t0 = time.perf_counter()
    greedy = list(judge_many(pairs, backend, config.with_(strategy="greedy"), batch_size=16))
    t1 = time.perf_counter()
    if args.samples_only:
        return samples_only(args, pairs, greedy, list(judge_many(pairs, backend, config.with_(strategy="majority"),
                                                               batch_size=args.batch_size)))
    two = list(judge_many(pairs, backend, config, batch_size=args.batch_size))
    t2 = time.perf_counter()
    majority = [rejudge(j, "majority") for j in two]
    random_winners = [rejudge(j, "random-winners") for j in two]
    random_anchor = rejudge_batched(two, "random-anchor", backend, config, args.batch_size)
    t3 = time.perf_counter()
    audit = reflection_audit(two, backend, config)
    t4 = time.perf_counter()
    correct = {name: [bool(j.correct) for j in js] for name, js in
               (("reflectrm", two), ("greedy", greedy), ("majority@8", majority),
                ("random-anchor", random_anchor), ("random-winners", random_winners))}
    oracle = first_difference_oracle(two)
    samples = [r for j in two for r in j.rollouts if not r.greedy]
    careless = [i for i, j in enumerate(two) if (a := j.anchor_rollout) is not None
                and (parsed := parse_analysis(a.analysis or "")) is not None and steps.drops_a_carry(parsed)]
    by_kind = {}
    for kind in sorted({p.subset for p in pairs}):
        idx = [i for i, p in enumerate(pairs) if p.subset == kind]
        by_kind[kind] = {name: sum(c[i] for i in idx) / len(idx) for name, c in correct.items()}
    figures = {
        "model": str(args.model),
        "backend": args.backend,
        "build": {k: card.get(k) for k in ("trained_steps", "train_seconds", "build_args")},
        "heldout_pairs": len(pairs),
        "accuracy": {name: sum(c) / len(c) for name, c in correct.items()},
        "accuracy_by_kind": by_kind,
        "reflectrm_minus": {name: difference(correct["reflectrm"], c)
                            for name, c in correct.items() if name != "reflectrm"},
        "reflection": audit,
        "reflection_ceiling": ceiling_figures(two, correct),
        "first_difference_oracle": {"accuracy": sum(oracle) / len(oracle),
                                    "minus_greedy": difference(oracle, correct["greedy"])},
        # the careless judge's habit (steps.blind_spot): pairs whose anchor dropped a carry, and who fixed them
        "anchor_dropped_a_carry": {"pairs": len(careless), **{name: sum(c[i] for i in careless) / max(1, len(careless))
                                                             for name, c in correct.items()}},
        "sample_parse_rate": sum(r.parseable for r in samples) / len(samples),
        "reflection_parse_rate": sum(r.status.parseable for j in two for r in j.reflections)
        / max(1, sum(len(j.reflections) for j in two)),
        "greedy_parse_rate": sum(r.parseable for j in greedy for r in j.rollouts) / len(greedy),
        "sample_accuracy": sum(r.prediction == j.pair.label for j in two for r in j.rollouts if not r.greedy)
        / len(samples),
        "anchor_accuracy": sum((a := j.anchor_rollout) is not None and a.prediction == j.pair.label
                               for j in two) / len(two),
        "some_sample_right": sum(any(r.prediction == j.pair.label for r in j.rollouts) for j in two) / len(two),
        "seconds": {"greedy": round(t1 - t0), "two_stage": round(t2 - t1), "ablations": round(t3 - t2),
                    "swap_audit": round(t4 - t3)},
        "load": load(),
    }
    for name, value in figures["accuracy"].items():
        print(f"{name:15s} {100 * value:5.1f} %")
    for name, b in figures["reflectrm_minus"].items():
        print(f"reflectrm - {name:15s} {100 * b['diff']:+5.1f} points  95% CI [{100 * b['lo']:+.1f}, "
              f"{100 * b['hi']:+.1f}]  McNemar p {b['mcnemar_p']:.2g}")
    lo_r, hi_r = audit["picks_right_interval"] or (0.0, 0.0)
    lo_s, hi_s = audit["same_pick_interval"] or (0.0, 0.0)
    print(f"reflections between critiques with different verdicts: {audit['decisive_reflections']}, "
          f"pick the right one {100 * audit['picks_right']:.1f} % [{100 * lo_r:.1f}, {100 * hi_r:.1f}], same pick "
          f"in both orders {100 * audit['same_pick_both_orders']:.1f} % [{100 * lo_s:.1f}, {100 * hi_s:.1f}]; where the right critique worked the problem rightly "
          f"({audit['right_critique_sound']}) {100 * audit['picks_right_where_right_critique_sound']:.1f} %")
    c = figures["reflection_ceiling"]
    print(f"a perfect reflection on these samples {100 * c['accuracy']:.1f} % (greedy {points(c['minus_greedy'])}); "
          f"unsound anchors {c['anchor_unsound']}, of them with a sound "
          f"sample to overturn them {c['anchor_unsound_with_a_sound_sample']}")
    o = figures["first_difference_oracle"]
    print(f"reflections never wrong at the first difference, winners' majority {100 * o['accuracy']:.1f} % "
          f"(greedy {points(o['minus_greedy'])})")
    print(f"they check the step where the critiques first differ {100 * audit['checks_the_first_difference']:.1f} %")
    d = figures["anchor_dropped_a_carry"]
    print(f"anchors that dropped a carry: {d['pairs']}; right there: reflectrm {100 * d['reflectrm']:.1f} %, "
          f"greedy {100 * d['greedy']:.1f} %, majority@8 {100 * d['majority@8']:.1f} %")
    print(f"sampled outputs parse {100 * figures['sample_parse_rate']:.2f} %")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
        with args.out.with_suffix(".jsonl").open("w") as f:
            for j in two:
                f.write(json.dumps(j.to_dict()) + "\n")
    if args.card:
        write_card(args.model, figures, args.argv)
    return finish(figures)


def write_card(model: Path, figures: dict, argv: list[str] | None) -> None:
    """The first block's figures as the judge's card shows them (`eval`), with the command and commit that made
    them; the card's other keys (its build stages) are kept."""
    import subprocess
    import sys
    from datetime import datetime, timezone

    path = Path(model) / "demo_card.json"
    card = json.loads(path.read_text(encoding="utf-8"))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = ""
    args = sys.argv[1:] if argv is None else argv
    from reflectrm.backends.cpu_decode import cpu_kind

    card["eval"] = {
        "command": "python research/demo_reflection.py " + " ".join(a for a in args if a != "--card"),
        "commit": commit, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "cpu": cpu_kind(),
        **{k: figures[k] for k in ("heldout_pairs", "backend", "accuracy", "accuracy_by_kind", "reflectrm_minus",
                                   "sample_parse_rate", "reflection_parse_rate", "greedy_parse_rate",
                                   "sample_accuracy", "anchor_accuracy", "load")},
        "reflection": {k: figures["reflection"][k] for k in ("decisive_reflections", "picks_right",
                                                              "picks_right_interval", "same_pick_both_orders",
                                                              "same_pick_interval")},
    }
    path.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    print(f"wrote the figures into {path}")


if __name__ == "__main__":
    raise SystemExit(main())
