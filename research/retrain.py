"""Retraining proof on the demo judge: GRPO on built data, then on human corrections (issue 5).

    python research/retrain.py [--minutes 15] [--corrections-minutes 6] [--out bench_out/retrain] [--quick]
                            [--corrections-on retrained|start]

Part 1, the paper's recipe: roll the demo judge out (N = 8, T = 1.0) on held-in synthetic pairs,
build preference and reflection data (4:1), train with GRPO for at most --minutes on the CPU (the rate
decays linearly to 0 over that budget; bf16 autocast where the CPU multiplies bf16 natively), and
measure greedy and two-stage (reflectrm) accuracy on held-out pairs before and after.

The split is the one a reward model meets in RLHF: the prompts are known, the responses to judge
are new. The held-in pairs ask the held-out pairs' problems in the other wordings, with new answers
in a new order (`demo.tasks.fresh_pairs`); no held-out conversation is trained on (the overlap check
of `build_training_set(eval_pairs=...)` refuses it). The demo judge's mistakes are arithmetic facts it
has not learned (`7 * 8 = 54`), and a fact learned is not a fact learned elsewhere, so the script also
measures pairs on problems no training example asks ("unseen problems"): they show what does not
transfer.

Part 2, corrections: find the kind of pair (add / sub / mul) the retrained judge gets wrong most,
judge a pool of such pairs on untrained problems, let a "human" correct the wrong judgments in the
store (the verdict, plus marks on analyses whose arithmetic is right or wrong), export the store's
derived preference examples and reflection pairs, retrain on them (with a replay of part 1's data),
and measure the corrected pairs themselves, fresh pairs on the corrected problems, and all held-out
pairs again. `--corrections-on start` corrects the starting judge instead (part 1 then builds its data,
the replay, and trains nothing): a user's first loop, on a judge that still makes mistakes to correct.

Every figure is printed; the last line is one JSON object with all of them (also written to
OUT/results.json).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import logging
import os
import random
import re
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the shared bench harness

from reflectrm.backends import BackendConfig, load_backend  # noqa: E402
from reflectrm.backends.cpu_decode import cpu_has_bf16  # noqa: E402
from reflectrm.core import JudgeConfig, Judgment, PreferencePair  # noqa: E402
from reflectrm.core.prompts import Task  # noqa: E402
from reflectrm.demo import DEMO_MODEL_DIR, Domain, domain_of, read_card, steps, tasks  # noqa: E402
from reflectrm.demo.domains import ARITHMETIC, RUNNING_SUMS  # noqa: E402
from reflectrm.demo.heldout import trained_problems  # noqa: E402
from reflectrm.eval.compare import paired_difference  # noqa: E402
from reflectrm.eval.runner import EvalPlan  # noqa: E402
from reflectrm.eval.runner import evaluate as run_evaluation  # noqa: E402
from reflectrm.pipeline import judge_many  # noqa: E402
from reflectrm_app.commands.train import parse_mix  # noqa: E402
from reflectrm.training.data import (  # noqa: E402
    DataConfig,
    build_training_set,
    collect_rollouts,
    read_examples,
    write_snapshot,
)
from reflectrm.training.grpo import TrainConfig, train  # noqa: E402
from reflectrm.training.rewards import reward_weights  # noqa: E402
from harness import finish, parser  # bench/harness.py (this script puts bench/ on the path above)

log = logging.getLogger("bench.retrain")

MAX_TOKENS = 96  # per output; main() sets it from the domain (arithmetic analyses 40-70 tokens, running sums to 150)
DOMAIN: Domain = ARITHMETIC
"""The judge's task domain, from its demo card."""
SEEDS = {"heldout": 555_001, "train": 555_002, "corrections": 555_003, "corrected_fresh": 555_004, "unseen": 555_005}


CACHE = {"on": False}


def cache_path(folder: Path, what: str, model: str, pairs: list[PreferencePair]) -> Path:
    """Where --cache keeps `what` measured with this model revision on these pairs."""
    from reflectrm.backends.transformers_backend import weights_revision

    key = hashlib.sha256(json.dumps([weights_revision(model), [p.fingerprint() for p in pairs]]).encode())
    return folder / f"{what}-{key.hexdigest()[:16]}.json"


def cached(path: Path, compute: Any) -> tuple[Any, bool]:
    """(`compute()`, False), stored as JSON at `path`; with --cache, (what is stored there, True) on a
    rerun: figures of an unchanged model on unchanged pairs need not be measured twice while tuning."""
    if CACHE["on"] and path.exists():
        return json.loads(path.read_text()), True
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    return value, False


def evaluate(model: str, pairs: list[PreferencePair], *, label: str, cache: Path | None = None) -> dict[str, Any]:
    """Greedy and two-stage accuracy (overall and per kind), majority of the same samples, parse rate."""
    if cache is not None:
        result, hit = cached(cache_path(cache, "eval", model, pairs), lambda: evaluate(model, pairs, label=label))
        if hit:
            print(f"  {label:<34} greedy {result['greedy']:.3f}  two-stage {result['two_stage']:.3f}  majority "
                  f"{result['majority']:.3f}  samples {result['sample_accuracy']:.3f}  (cached from an earlier run)")
        return result
    backend = judge_backend(model)
    started = time.perf_counter()
    # the evaluation runner (what `reflectrm eval` runs): the three strategies from one pass per pair, majority of
    # the same 8 samples as the two-stage verdict
    config = JudgeConfig(max_new_tokens=MAX_TOKENS, reflection_max_new_tokens=MAX_TOKENS)
    plan = EvalPlan(strategies=("reflectrm", "greedy", "majority"), batch_size=16)
    by_strategy: dict[str, list[Judgment]] = {s: [] for s in plan.strategies}
    for batch in run_evaluation(pairs, backend, config, plan=plan, done=set()):
        for item, judgment in batch:
            if judgment is None:
                raise SystemExit(f"retrain: pair {item.item_id} was skipped ({item.skipped}): shorten it")
            by_strategy[item.strategy].append(judgment)
    greedy, two, majority = by_strategy["greedy"], by_strategy["reflectrm"], by_strategy["majority"]
    samples = [r for j in two for r in j.rollouts]
    out = {
        "pairs": len(pairs),
        "greedy": accuracy(greedy),
        "two_stage": accuracy(two),
        "majority": accuracy(majority),
        "sample_accuracy": sum(r.prediction == j.pair.label for j in two for r in j.rollouts) / len(samples),
        "sample_parse_rate": sum(r.parseable for r in samples) / len(samples),
        "greedy_by_kind": by_kind(greedy),
        "two_stage_by_kind": by_kind(two),
        **stage2(two),
        "eval_s": round(time.perf_counter() - started, 1),
        "_greedy": [bool(j.correct) for j in greedy],
        "_two_stage": [bool(j.correct) for j in two],
    }
    print(f"  {label:<34} greedy {out['greedy']:.3f}  two-stage {out['two_stage']:.3f}  majority "
          f"{out['majority']:.3f}  samples {out['sample_accuracy']:.3f}  ({len(pairs)} pairs, {out['eval_s']:.0f}s)")
    print(f"  {'':<34} stage 2: anchor right {out['anchor_accuracy']:.3f}; a reflection between a right and a wrong "
          f"analysis picks the right one {out['reflection_picks_right']:.3f} ({out['decisive_reflections']})")
    return out


ENGINE = {"backend": "transformers"}


def judge_backend(model: str) -> Any:
    """The engine that judges (--eval-backend); one vLLM engine at a time."""
    if ENGINE["backend"] == "vllm":
        if ENGINE.pop("open", None) is not None:
            gc.collect()  # the previous engine's memory (weights, KV cache) goes before the next one's
        ENGINE["open"] = load_backend(BackendConfig(model=model, backend="vllm"))
        return ENGINE["open"]
    return load_backend(BackendConfig(model=model, device="cpu"))


def stage2(judgments: list[Judgment]) -> dict[str, Any]:
    """How good stage 2 is on this judge: the anchor's accuracy and, over the reflections that compare a
    right analysis with a wrong one (by `human_marks`), how often the reflection picks the right one."""
    anchors = decisive = picked_right = 0
    for j in judgments:
        marks = human_marks(j)
        anchors += j.anchor is not None and marks.get(j.anchor) == "right"
        for r in j.reflections:
            shown = [marks.get(i) for i in r.order]
            if sorted(m or "" for m in shown) != ["right", "wrong"]:
                continue
            decisive += 1
            picked_right += r.choice is not None and shown[r.choice - 1] == "right"
    return {"anchor_accuracy": anchors / max(1, len(judgments)), "decisive_reflections": decisive,
            "reflection_picks_right": picked_right / max(1, decisive)}


def accuracy(judgments: list[Judgment]) -> float:
    return sum(bool(j.correct) for j in judgments) / max(1, len(judgments))


def by_kind(judgments: list[Judgment]) -> dict[str, float]:
    return {k: accuracy([j for j in judgments if j.pair.subset == k]) for k in DOMAIN.kinds
            if any(j.pair.subset == k for j in judgments)}


def paired(before: list[bool], after: list[bool]) -> dict[str, int]:
    """Pairs fixed and broken by training (the same pairs judged before and after)."""
    return {"fixed": sum(not b and a for b, a in zip(before, after)),
            "broken": sum(b and not a for b, a in zip(before, after))}


def public(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not k.startswith("_")}


def grpo(snapshot: Path, *, model: str, out: Path, config: TrainConfig) -> dict[str, Any]:
    if out.exists():
        shutil.rmtree(out)
    started = time.perf_counter()
    result = train(snapshot, model=model, output_dir=out, config=config)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # the accuracy reward alone (the verdict right), whatever else the run is paid for
    rewards = [r.get("rewards/accuracy_reward/mean", r["reward"]) for r in rows if "reward" in r]
    head, tail = rewards[: max(1, len(rewards) // 10)], rewards[-max(1, len(rewards) // 10):]
    summary = {"steps": result.step, "train_s": round(time.perf_counter() - started, 1),
               "reward_first_10pct": sum(head) / len(head), "reward_last_10pct": sum(tail) / len(tail),
               "final_model": str(result.final_model)}
    print(f"  GRPO: {result.step} steps in {summary['train_s']:.0f}s, mean accuracy reward {summary['reward_first_10pct']:.3f} "
          f"(first 10%) -> {summary['reward_last_10pct']:.3f} (last 10%)")
    return summary


# --- part 2: human-style corrections through the store ----------------------------------------------

def human_marks(j: Judgment) -> dict[int, str]:
    """What a careful person marks: an analysis is right when its arithmetic and its verdict are right."""
    marks = {}
    for position, r in enumerate(j.rollouts):
        if r.prediction is None or not r.analysis.strip():
            continue
        marks[position] = "right" if arithmetic_right(j.pair, r.analysis) and r.prediction == j.pair.label else "wrong"
    return marks


def arithmetic_right(pair: PreferencePair, analysis: str) -> bool:
    if DOMAIN is RUNNING_SUMS:
        return steps.analysis_true(analysis, steps.chain_of(pair), task=Task.RESPONSE)
    problem = tasks.problem_of(pair)
    m = re.search(re.escape(problem.expression) + r"\s*=\s*(-?\d+)", analysis)
    return m is not None and int(m.group(1)) == problem.answer


def corrections_from_store(judgments: list[Judgment], out: Path, *, limit: int) -> tuple[Path, int]:
    """Record judgments in a fresh store, correct the first `limit` wrong ones as a person would in the
    Review tab (verdict and marks), export the derived examples (hf)."""
    from reflectrm_db.services import JudgmentStore

    for stale in (out / "bench.db", out / "corrections_hf"):
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    with JudgmentStore.open(f"sqlite:///{out / 'bench.db'}") as store:
        ids = store.record(judgments, swapped=False)
        wrong = [(jid, j) for jid, j in zip(ids, judgments) if not j.correct][:limit]
        for jid, j in wrong:
            # the person knows the right answer: the pair's label stands in for their verdict
            store.correct(jid, verdict=j.pair.label, author="bench-human", marks=human_marks(j), seed=jid)
        path = out / "corrections_hf"
        store.export("training", fmt="hf", out=path)
    return path, len(wrong)


def part1(args: argparse.Namespace, out: Path, held_out: list[PreferencePair], unseen: list[PreferencePair],
          held_in: list[PreferencePair]) -> dict[str, Any]:
    print("part 1: GRPO on data built from held-in pairs (the held-out pairs' problems, other wordings)")
    before = evaluate(args.model, held_out, label="demo judge, held-out", cache=out / "cache")
    before_unseen = (evaluate(args.model, unseen, label="demo judge, unseen problems", cache=out / "cache")
                     if unseen else None)
    data_config = DataConfig(judge=JudgeConfig(n=8, temperature=1.0, max_new_tokens=MAX_TOKENS, seed=0),
                             mix=parse_mix(args.mix))
    started = time.perf_counter()
    stored, _ = cached(cache_path(out / "cache", "rollouts", args.model, held_in),
                       lambda: [j.to_dict() for j in collect_rollouts(held_in, judge_backend(args.model),
                                                                      data_config, batch_size=16)])
    judgments = [Judgment.from_dict(d) for d in stored]
    built = build_training_set(judgments, config=data_config, eval_pairs=held_out + unseen)
    snapshot = write_snapshot(built, out / "data", name="bench")
    print(f"  data: {len(held_in)} held-in pairs rolled out in {time.perf_counter() - started:.0f}s -> "
          f"{snapshot.rows} examples {asdict(built.report)}")
    data = {"snapshot": str(snapshot.path), "held_in_pairs": len(held_in), **asdict(built.report)}
    if args.corrections_on == "start":  # part 1's data is part 2's replay; the judge corrected is the one given
        return {"data": data, "before": before, **({"unseen_before": before_unseen} if unseen else {})}
    run = grpo(snapshot.path, model=args.model, out=out / "run", config=train_config(args, args.minutes))
    after = evaluate(run["final_model"], held_out, label="after GRPO, held-out")
    after_unseen = evaluate(run["final_model"], unseen, label="after GRPO, unseen problems") if unseen else None
    return {"data": data, "grpo": run, "before": before, "after": after,
            **({"unseen_before": before_unseen, "unseen_after": after_unseen} if unseen else {}),
            "greedy_paired": paired(before["_greedy"], after["_greedy"]),
            "two_stage_paired": paired(before["_two_stage"], after["_two_stage"])}


def part2(args: argparse.Namespace, out: Path, held_out: list[PreferencePair], unseen: list[PreferencePair],
          held_in: list[PreferencePair], first: dict[str, Any]) -> dict[str, Any]:
    retrained = "grpo" in first
    model = first["grpo"]["final_model"] if retrained else args.model
    heldout_before = first["after" if retrained else "before"]
    by_kind = heldout_before["greedy_by_kind"]
    kind = min(by_kind, key=by_kind.get)
    print(f"part 2: corrections on the weakest kind of the {'part-1' if retrained else 'starting'} judge: {kind!r} "
          f"(greedy by kind {by_kind})")
    # problems nothing so far trained on or measured, so what changes is the corrections' doing
    pool = DOMAIN.other_problems(DOMAIN.make_pairs(args.correction_pairs, seed=SEEDS["corrections"], kinds=(kind,),
                                                   source="bench-corrections"), held_out + held_in + unseen)
    backend = judge_backend(model)
    judged = list(judge_many(pool, backend, JudgeConfig(strategy="majority", max_new_tokens=MAX_TOKENS), batch_size=16))
    wrong_pool = [j.pair for j in judged if not j.correct][: args.corrections]
    # the corrected problems asked in their other wordings, with new answers: never trained on
    fresh = DOMAIN.fresh_pairs(wrong_pool, seed=SEEDS["corrected_fresh"], source="bench-corrected-fresh")
    path, corrected = corrections_from_store(judged, out, limit=args.corrections)
    corrections = read_examples(path, origin="corrections")
    # `--replay` of part 1's examples per correction example: what the judge already learned keeps being seen
    replay_all = read_examples(first["data"]["snapshot"])
    replay = random.Random(0).sample(replay_all, min(len(replay_all), round(args.replay * len(corrections))))
    built = build_training_set([], config=DataConfig(), extra=corrections + replay, eval_pairs=held_out + unseen + fresh)
    snapshot = write_snapshot(built, out / "data", name="corrections")
    tasks = [e.task.value for e in corrections]
    print(f"  {corrected} of {len(pool)} pool judgments were wrong and corrected -> {len(corrections)} examples "
          f"({tasks.count('response')} preference, {tasks.count('analysis')} reflection) + {len(replay)} replayed")
    who = "part-1 judge" if retrained else "starting judge"
    before_pool = evaluate(model, wrong_pool, label=f"{who}, corrected pairs")
    before_fresh = evaluate(model, fresh, label=f"{who}, corrected problems reworded")
    run = grpo(snapshot.path, model=model, out=out / "run_corrections",
               config=train_config(args, args.corrections_minutes))
    after_pool = evaluate(run["final_model"], wrong_pool, label="after corrections, corrected pairs")
    after_fresh = evaluate(run["final_model"], fresh, label="after corrections, corrected problems reworded")
    after_all = evaluate(run["final_model"], held_out, label="after corrections, held-out (all)")
    # the replay rewords the held-out problems: problems no example asks show what the corrections did alone
    unseen_before = first.get("unseen_after" if retrained else "unseen_before")
    after_unseen = evaluate(run["final_model"], unseen, label="after corrections, unseen problems") if unseen else None
    return {"kind": kind, "pool": len(pool), "corrected": corrected, "correction_examples": len(corrections),
            "replayed": len(replay), "grpo": run,
            "corrected_pairs_before": before_pool, "corrected_pairs_after": after_pool,
            "reworded_before": before_fresh, "reworded_after": after_fresh,
            "heldout_all_before": heldout_before, "heldout_all_after": after_all,
            **({"unseen_before": unseen_before, "unseen_after": after_unseen} if unseen else {}),
            "reworded_greedy_paired": paired(before_fresh["_greedy"], after_fresh["_greedy"])}


def splits(model: str, eval_pairs: int,
           unseen_pairs: int) -> tuple[list[PreferencePair], list[PreferencePair], list[PreferencePair]]:
    """(held-out, held-in, unseen-problem) pairs: held-in pairs ask the held-out problems in their other
    wordings, never a held-out conversation; unseen pairs ask problems neither of them asks."""
    held_out = DOMAIN.make_pairs(eval_pairs, seed=SEEDS["heldout"], source="bench-heldout")
    if DOMAIN is RUNNING_SUMS:  # leave out the problems the judge's build trained on (its card names them)
        seen = trained_problems(read_card(model))
        held_out = [p for p in held_out if steps.problem_of(p) not in seen]
    held_in = DOMAIN.fresh_pairs(held_out, seed=SEEDS["train"], source="bench-train")  # never a held-out conversation
    unseen = DOMAIN.other_problems(DOMAIN.make_pairs(3 * unseen_pairs, seed=SEEDS["unseen"], source="bench-unseen"),
                                   held_out)
    return held_out, held_in, unseen[:unseen_pairs]


def train_config(args: argparse.Namespace, minutes: float) -> TrainConfig:
    return TrainConfig(
        learning_rate=args.lr, temperature=args.temperature, batch_size=args.prompts_per_step,
        num_generations=args.num_generations,
        per_device_batch_size=args.prompts_per_step * args.num_generations, max_completion_length=MAX_TOKENS,
        epochs=50, max_time_s=minutes * 60, max_steps=args.max_steps, beta=args.beta, device="cpu",
        gradient_checkpointing=False, save_steps=100, save_total_limit=1, seed=0, bf16=args.bf16,
        lr_scheduler=args.lr_schedule,
        reward_weights=reward_weights(arithmetic=args.arithmetic_reward),
    )


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", type=Path, default=Path("bench_out/retrain"))
    ap.add_argument("--model", default=str(DEMO_MODEL_DIR), help="the judge to start from (default: the demo judge)")
    ap.add_argument("--minutes", type=float, default=15.0, help="GRPO time budget of part 1 (default 15)")
    ap.add_argument("--corrections-minutes", type=float, default=6.0, help="GRPO time budget of part 2 (default 6)")
    ap.add_argument("--max-steps", type=int, default=-1, help="also stop after N steps")
    ap.add_argument("--eval-pairs", type=int, default=300,
                    help="held-out pairs; the held-in pairs ask their problems in the other wordings (about 3 each)")
    ap.add_argument("--unseen-pairs", type=int, default=300,
                    help="pairs on problems no training example asks (0: skip that measurement)")
    ap.add_argument("--correction-pairs", type=int, default=120, help="pairs judged to find wrong judgments to correct")
    ap.add_argument("--corrections", type=int, default=30,
                    help="wrong judgments corrected through the store (default 30)")
    ap.add_argument("--replay", type=float, default=2.0,
                    help="part 1's examples replayed in part 2, per correction example "
                         "(default 2: two thirds of what is seen)")
    ap.add_argument("--lr", type=float, default=3e-4,
                    help="peak rate; the demo judge is tiny: far above the paper's 1e-6")
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--beta", type=float, default=0.0, help="KL penalty against the starting judge")
    ap.add_argument("--temperature", type=float, default=1.0,
                    help="GRPO's sampling temperature (the paper: 1.0)")
    ap.add_argument("--arithmetic-reward", type=float, default=1.0,
                    help="weight of the demo's arithmetic reward beside the accuracy reward (reflectrm.demo.rewards)")
    ap.add_argument("--mix", default="4:1", help="preference:reflection ratio of part 1's data (paper: 4:1)")
    ap.add_argument("--lr-schedule", default="linear-time", choices=("constant", "linear-time"),
                    help="linear-time (default): decay the rate to 0 over the time budget")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=cpu_has_bf16(),
                    help="bf16 autocast over fp32 weights (default: on when the CPU has AMX or AVX512-BF16)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the proof's budget: 2 CPU cores)")
    ap.add_argument("--skip-corrections", action="store_true")
    ap.add_argument("--corrections-on", default="retrained", choices=("retrained", "start"),
                    help="the judge part 2 corrects: part 1's retrained judge, or the starting one (part 1 then "
                         "builds its data, the corrections' replay, without training on it)")
    ap.add_argument("--eval-backend", default="transformers", choices=("transformers", "vllm"),
                    help="the engine of every measurement and rollout (vllm: the `vllm` extra, much faster here)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the whole script")
    ap.add_argument("--cache", action="store_true",
                    help="reuse OUT/cache: the starting judge's figures and rollouts from an earlier run (tuning)")
    args = ap.parse_args()
    global DOMAIN, MAX_TOKENS
    DOMAIN = domain_of(args.model)
    MAX_TOKENS = DOMAIN.output_tokens
    if args.skip_corrections and args.corrections_on == "start":
        ap.error("--corrections-on start with --skip-corrections would train nothing: drop one of them")
    if args.replay < 0:
        ap.error(f"--replay must be >= 0 (part 1's examples per correction example), got {args.replay}")
    CACHE["on"] = args.cache
    ENGINE["backend"] = args.eval_backend
    if args.quick:
        args.eval_pairs, args.unseen_pairs, args.correction_pairs = 12, 12, 24
        args.minutes, args.corrections_minutes, args.max_steps = 1.0, 0.5, 3
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    held_out, held_in, unseen = splits(args.model, args.eval_pairs, args.unseen_pairs)
    results: dict[str, Any] = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    results["part1"] = part1(args, args.out, held_out, unseen, held_in)
    if not args.skip_corrections:
        results["part2"] = part2(args, args.out, held_out, unseen, held_in, results["part1"])
    figures = summary(results)
    clean = json.loads(json.dumps(results, default=str), object_hook=public)
    (args.out / "results.json").write_text(json.dumps({**clean, "summary": figures}, indent=2) + "\n")
    finish(figures)
    return 0


def interval(before: list[bool], after: list[bool]) -> dict[str, float]:
    """after - before on the same pairs: a paired bootstrap 95 % interval and the exact McNemar p-value."""
    d = paired_difference([float(x) for x in before], [float(x) for x in after])
    e = d["difference"]
    return {"diff": e["value"], "lo": e["low"], "hi": e["high"], "fixed": d["only_b"], "broken": d["only_a"],
            "mcnemar_p": d["mcnemar_p"]}


def summary(results: dict[str, Any]) -> dict[str, Any]:
    p1 = results["part1"]
    figures: dict[str, Any] = {"greedy_before": p1["before"]["greedy"], "two_stage_before": p1["before"]["two_stage"]}
    if "after" in p1:
        figures |= {
            "greedy_after": p1["after"]["greedy"],
            "greedy_gain_points": round(100 * (p1["after"]["greedy"] - p1["before"]["greedy"]), 1),
            "two_stage_after": p1["after"]["two_stage"],
            "two_stage_above_greedy_after": p1["after"]["two_stage"] > p1["after"]["greedy"],
            "reflection_picks_right_after": p1["after"]["reflection_picks_right"],
            "grpo_steps": p1["grpo"]["steps"], "grpo_s": p1["grpo"]["train_s"],
            "two_stage_gain": interval(p1["before"]["_two_stage"], p1["after"]["_two_stage"]),
            "greedy_gain": interval(p1["before"]["_greedy"], p1["after"]["_greedy"]),
        }
    if "unseen_before" in p1:
        figures.update({
            "unseen_greedy_before": p1["unseen_before"]["greedy"],
            "unseen_two_stage_before": p1["unseen_before"]["two_stage"]})
    if "unseen_after" in p1:
        figures.update({"unseen_greedy_after": p1["unseen_after"]["greedy"],
                        "unseen_two_stage_after": p1["unseen_after"]["two_stage"]})
    if "part2" in results:
        p2 = results["part2"]
        figures.update({
            "corrections_kind": p2["kind"], "corrected_judgments": p2["corrected"],
            "corrected_pairs_greedy_before": p2["corrected_pairs_before"]["greedy"],
            "corrected_pairs_greedy_after": p2["corrected_pairs_after"]["greedy"],
            "corrected_pairs_two_stage_before": p2["corrected_pairs_before"]["two_stage"],
            "corrected_pairs_two_stage_after": p2["corrected_pairs_after"]["two_stage"],
            "reworded_greedy_before": p2["reworded_before"]["greedy"], "reworded_greedy_after": p2["reworded_after"]["greedy"],
            "heldout_greedy_after_corrections": p2["heldout_all_after"]["greedy"],
            "corrected_pairs_greedy_gain": interval(p2["corrected_pairs_before"]["_greedy"],
                                                    p2["corrected_pairs_after"]["_greedy"]),
            "reworded_greedy_gain": interval(p2["reworded_before"]["_greedy"], p2["reworded_after"]["_greedy"]),
            "reworded_two_stage_gain": interval(p2["reworded_before"]["_two_stage"],
                                                p2["reworded_after"]["_two_stage"]),
            "heldout_greedy_change": interval(p2["heldout_all_before"]["_greedy"], p2["heldout_all_after"]["_greedy"]),
            "heldout_two_stage_change": interval(p2["heldout_all_before"]["_two_stage"],
                                                 p2["heldout_all_after"]["_two_stage"]),
        })
        if "unseen_after" in p2:
            figures.update({
                "unseen_greedy_change_after_corrections": interval(p2["unseen_before"]["_greedy"],
                                                                   p2["unseen_after"]["_greedy"]),
                "unseen_two_stage_change_after_corrections": interval(p2["unseen_before"]["_two_stage"],
                                                                      p2["unseen_after"]["_two_stage"])})
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
