"""Position bias, audited and trained away, through the app's services: the same GRPO run with and without the
Train tab's "Both orders" option, each compared with the starting judge (and with each other) by the Audit tab's
before/after on held-out pairs judged in both orders.

    python bench/position_bias.py --out OUT [--model DIR] [--backend vllm] [--steps 30]
    python bench/position_bias.py --out OUT --quick        # tiny sizes: the whole path in a few minutes
    python bench/position_bias.py --out OUT --resume       # go on from a run that stopped (same arguments)

Sets (the judge's own domain; no stage of its build asked their problems): held-out pairs (what the Audit tab's
before/after judges), and training pairs asking other problems. The training set is audited in both orders (the
Audit tab's batch audit), the paper's examples are added from its judgments (Curate), one snapshot is taken, and
two runs train on it with the same seed, steps and rate: one as the Train tab's default does, one with "Both
orders" (each example rolled out with its other order in one step; a right verdict paid the share of right verdicts
in the other order), with twice the prompts a step so that each step sees as many distinct examples as the plain
run's. The Audit tab's before/after then reports flip rate, first-slot win rate, both-orders accuracy and the
reflections' first-critique share with Wilson intervals, and the paired change of flip rate and both-orders accuracy with a
bootstrap interval and McNemar's p: starting judge -> plain run, starting judge -> both-orders run, plain run ->
both-orders run (what the option adds). With --outcome-arm, a third run in both orders pays the plain outcome reward
(same steps and prompts as the option's): what the option's reward adds over seeing each example in both orders.

Every figure is printed; the last line is one JSON object with all of them (also OUT/results.json).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from demo_loop import Loop, checkpoint, loop_arguments, open_loop, partial_results  # noqa: E402 - the loop bench's services and Train tab path
from harness import finish, load_line, parser, stopwatch  # noqa: E402
from reflectrm.demo import read_card  # noqa: E402

SEEDS = {"heldout": 778_001, "train": 778_002}
OUTCOME_REWARD = {"reflectrm.training.rewards:accuracy_reward": 1.0}  # by its path: both orders do not replace it
RUNS = {"plain": (False, None), "both-orders": (True, None)}  # name -> (both orders, reward weights; None: the run's)
COMPARES = (  # (result key, before run ("": the starting judge), after run, what the line says)
    ("start_to_plain", "", "plain", "starting judge -> plain run"),
    ("start_to_both", "", "both-orders", "starting judge -> both-orders run"),
    ("plain_to_both", "plain", "both-orders", "plain run -> both-orders run"),
    ("start_to_outcome", "", "both-orders-outcome", "starting judge -> both orders, outcome reward"),
    ("outcome_to_both", "both-orders-outcome", "both-orders", "both orders, outcome reward -> both-orders run"),
)


def sets(loop: Loop) -> dict[str, list]:
    a, d = loop.args, loop.domain
    card = read_card(a.model)
    heldout = d.heldout_pairs(card, a.heldout, seed=SEEDS["heldout"], source="bias-heldout")
    train = d.other_problems(d.heldout_pairs(card, 3 * a.train_pairs, seed=SEEDS["train"], source="bias-train"),
                             heldout)
    train = random.Random(SEEDS["train"]).sample(train, min(a.train_pairs, len(train)))
    return {"bias-heldout": heldout, "bias-train": train}


def compare(loop: Loop, before: str, after: str, what: str) -> dict[str, Any]:
    clock = stopwatch()
    result = loop.services.audit.before_after("bias-heldout", before=before, after=after, cancel=loop.cancel)
    print(f"  {what} ({clock.stop():.0f} s): {result.summary()}")
    for row in result.rows():
        print("    " + " | ".join(str(c) for c in row))
    return result.to_dict()


def resumed_finals(loop: Loop, runs: dict[str, Any]) -> dict[str, str]:
    """The final models of the runs a stopped bench completed (its OUT/partial.json), read back from the store."""
    finals = {}
    for name, figures in runs.items():
        view = loop.training.watch(int(figures["run"]))
        if view.run.status == "completed" and view.run.output_model:
            finals[name] = view.run.output_model
            loop.figures.setdefault("runs", {})[name] = figures
            print(f"    run {view.run.id} ({name}) completed earlier: {view.run.output_model}")
    return finals


def run(loop: Loop, done: dict[str, Any]) -> dict[str, Any]:
    a = loop.args
    print(f"position bias on {a.model} ({loop.domain.key}), {a.backend} backend; {load_line()}")
    if done:
        results = {k: v for k, v in done.items() if k != "runs"}
        results["args"] = {**results.get("args", {}), "outcome_arm": a.outcome_arm}
        finals = resumed_finals(loop, done.get("runs", {}))
        snapshot = "bias-paper"
    else:
        for name, pairs in sets(loop).items():
            loop.import_set(name, pairs)
        clock = stopwatch()
        report = loop.services.audit.batch_audit("bias-train", cancel=loop.cancel)
        print(f"  audited bias-train in both orders in {clock.stop():.0f} s ({len(report.flipped)} pairs flipped)")
        derived = loop.services.curation.derive_from_labels("bias-train", seed=0)
        snapshot = loop.services.curation.snapshot("bias-paper", note="the paper's examples from bias-train").name
        results = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
                   "derived": {"preference": derived.preference, "reflection": derived.reflection},
                   "train_flipped": len(report.flipped)}
        finals = {}
    runs = dict(RUNS)
    if a.outcome_arm:
        runs["both-orders-outcome"] = (True, OUTCOME_REWARD)
    for name, (both, reward) in runs.items():
        if name not in finals:
            finals[name] = loop.train(snapshot, minutes=0, steps=a.steps, mix="paper", name=name, both_orders=both,
                                      prompts_per_step=a.both_prompts_per_step if both else a.prompts_per_step,
                                      seed=a.seed, **({"reward_weights": reward} if reward else {}))
            checkpoint(loop, "bias", {**results, "runs": loop.figures.get("runs", {})})
    for key, before, after, what in COMPARES:
        if after in finals and (before == "" or before in finals) and key not in results:
            results[key] = compare(loop, finals.get(before, ""), finals[after], what)
            checkpoint(loop, "bias", {**results, "runs": loop.figures.get("runs", {})})
    results["runs"] = loop.figures.get("runs", {})
    return results


def main() -> int:
    ap = parser(__doc__)
    loop_arguments(ap)
    ap.add_argument("--heldout", type=int, default=300, help="held-out pairs the before/after judges in both orders")
    ap.add_argument("--train-pairs", type=int, default=300, help="training pairs audited for the paper's examples")
    ap.add_argument("--steps", type=int, default=30, help="each run's steps (the rate decays over them)")
    ap.add_argument("--lr", type=float, default=3e-4, help="peak rate (the demo judge is tiny: far above the paper's)")
    ap.add_argument("--prompts-per-step", type=int, default=8, help="the plain run's prompts per step")
    ap.add_argument("--both-prompts-per-step", type=int, default=None,
                    help="the both-orders run's prompts per step (even; default twice --prompts-per-step: as many "
                         "distinct examples a step as the plain run, each in both orders)")
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--outcome-arm", action="store_true",
                    help="also train a run in both orders that pays the plain outcome reward (what the option's reward "
                         "adds over seeing each example in both orders); may be added on --resume")
    ap.add_argument("--seed", type=int, default=0, help="both runs' training seed (data order, sampling, the mix's draw)")
    ap.add_argument("--batch-size", type=int, default=16, help="pairs judged together (audit and evaluation)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the whole path")
    ap.add_argument("--resume", action="store_true",
                    help="go on in an --out a stopped run left (its store and OUT/partial.json): completed runs and "
                         "compares are kept, the rest is done")
    args = ap.parse_args()
    if args.quick:
        args.heldout, args.train_pairs, args.steps, args.prompts_per_step, args.num_generations = 8, 12, 2, 2, 2
    if args.both_prompts_per_step is None:
        args.both_prompts_per_step = 2 * args.prompts_per_step
    args.max_steps = args.steps
    clock = stopwatch()
    done = partial_results(ap, args, "bias", may_change=frozenset({"resume", "outcome_arm"})) if args.resume else {}
    loop = Loop(args) if args.resume else open_loop(ap, args)
    try:
        results = run(loop, done)
    finally:
        loop.services.close()
    results["seconds"] = round(clock.stop())
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
