"""What each round of corrections fixed and what it broke on the held-out pairs: the corrections part of
`bench/demo_loop.py`, read back through the app's services, arm by arm (the queue's order and the random draws,
each training seed).

    python bench/what_corrections_fix.py --out OUT      # OUT: a finished `demo_loop.py --parts corrections` run

A held-out gain is what an arm fixed minus what it broke. The held-out pairs are split by what the starting judge
did on them (the Evaluate tab's stored run): right, or wrong with k of its 8 samples right (k = 0: a confident
error; 1-2; 3 or more). For each arm the table gives how many it fixed in each wrong group and how many right ones
it broke, and the wrong judgments it was trained on by the same split (what the Review queue, or the random draw,
chose to correct). Across arms, the spread of "fixed" against the spread of "broken" says whether which judgments
were corrected moves the gain, or the training run does.

Every figure is printed; the last line is one JSON object with all of them (also OUT/what-corrections-fix.json).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from typing import Any

from demo_loop import Loop, loop_arguments  # noqa: E402 - the loop bench's services
from harness import finish, parser  # noqa: E402

HELDOUT = "data set: loop-heldout"
STRATEGY = "reflectrm"
GROUPS = ("wrong, 0 of 8 right", "wrong, 1-2 of 8 right", "wrong, 3+ of 8 right")


def group_of(right_samples: int) -> str:
    """The wrong-judgment group of a judgment whose samples were right `right_samples` times."""
    return GROUPS[0] if right_samples == 0 else GROUPS[1] if right_samples <= 2 else GROUPS[2]


def right_samples(loop: Loop, judgment_ids: list[int]) -> dict[int, int]:
    """Judgment id -> how many of its sampled analyses (not the greedy one) named the pair's label."""
    out = {}
    for stored in loop.services.runtime.store.load_many(judgment_ids):
        j = stored.judgment
        out[stored.id] = sum(1 for r in j.rollouts if not r.greedy and r.prediction == j.pair.label)
    return out


def heldout_runs(loop: Loop) -> dict[str, Any]:
    """Model -> its newest completed held-out run (the Evaluate tab's runs), read once."""
    runs: dict[str, Any] = {}
    for r in sorted(loop.evaluation.evals.runs(limit=10_000), key=lambda r: r.id):
        if r.benchmark == HELDOUT and r.status == "completed":
            runs[r.model] = r
    return runs


def heldout_run(runs: dict[str, Any], model: str, out: Any) -> Any:
    if model not in runs:
        raise SystemExit(f"no completed held-out run of {model} in {out}: run demo_loop.py --parts corrections")
    return runs[model]


def verdicts(loop: Loop, run: Any) -> dict[str, Any]:
    return {i.item_id: i for i in loop.evaluation.evals.items(run.id) if i.strategy == STRATEGY and not i.swapped}


def corrected_judgments(loop: Loop) -> dict[str, list[int]]:
    """Snapshot name -> the judgments its corrections' preference examples came from (every example read once)."""
    store = loop.services.runtime.store
    by_example = {e.id: e.judgment_id for e in store.examples("preference", states=None, limit=None)
                  if e.correction_id and e.judgment_id}
    return {s.name: [by_example[i] for i in store.snapshot_members(s.id).get("preference", []) if i in by_example]
            for s in store.snapshots()}


def main() -> int:
    ap = parser(__doc__)
    loop_arguments(ap)
    ap.add_argument("--batch-size", type=int, default=16, help="unused here: the loop's services take it")
    args = ap.parse_args()
    results_path = args.out / "results.json"
    if not results_path.is_file():
        ap.error(f"{results_path} is missing: pass the --out of a finished demo_loop.py --parts corrections run")
    try:
        done = json.loads(results_path.read_text(encoding="utf-8"))
        args.model = done["args"]["model"]
    except (ValueError, TypeError, KeyError) as exc:
        ap.error(f"{results_path} is not a demo_loop.py results file ({type(exc).__name__}: {exc}): pass the --out of a "
                 "finished demo_loop.py --parts corrections run")
    loop = Loop(args)
    try:
        runs = heldout_runs(loop)
        snapshots = corrected_judgments(loop)
        start = verdicts(loop, heldout_run(runs, args.model, args.out))
        judged = right_samples(loop, [i.judgment_id for i in start.values() if i.judgment_id is not None])
        kind = {k: "right" if i.verdict == i.label else group_of(judged.get(i.judgment_id, 0)) for k, i in start.items()}
        sizes = Counter(kind.values())
        print(f"held-out pairs: {len(start)}; the starting judge: {sizes['right']} right, " +
              ", ".join(f"{g}: {sizes[g]}" for g in GROUPS))
        arms = {}
        for name, figures in done.get("runs", {}).items():
            if name == "queue-no-replay":
                continue  # another mix: not an order of the same training
            view = loop.training.watch(int(figures["run"]))
            after = verdicts(loop, heldout_run(runs, view.run.output_model, args.out))
            fixed = Counter(kind[k] for k, i in after.items() if kind.get(k) in GROUPS and i.verdict == i.label)
            broken = sum(1 for k, i in after.items() if kind.get(k) == "right" and i.verdict != i.label)
            snapshot = "loop-queue" if name.startswith("queue") else f"loop-{name}"
            taught = Counter(group_of(k) for k in right_samples(loop, snapshots.get(snapshot, [])).values())
            arms[name] = {"fixed": {g: fixed[g] for g in GROUPS}, "fixed_total": sum(fixed.values()),
                          "broken": broken, "gain_points": round(100 * (sum(fixed.values()) - broken) / len(start), 1),
                          "trained_on": {g: taught[g] for g in GROUPS}}
        print("arm | fixed " + " | ".join(GROUPS) + " | fixed | broken | gain (points) | corrected: "
              + " / ".join(g.split(", ")[1] for g in GROUPS))
        for name, a in arms.items():
            print(f"{name} | " + " | ".join(f"{a['fixed'][g]} of {sizes[g]}" for g in GROUPS) +
                  f" | {a['fixed_total']} | {a['broken']} of {sizes['right']} | {a['gain_points']:+.1f} | " +
                  " / ".join(str(a["trained_on"][g]) for g in GROUPS))
        spread = {k: round(statistics.pstdev([a[k] for a in arms.values()]), 1) if len(arms) > 1 else None
                  for k in ("fixed_total", "broken")}
        print(f"spread over {len(arms)} arms (standard deviation, pairs): fixed {spread['fixed_total']}, "
              f"broken {spread['broken']}")
        out = {"heldout": dict(sizes), "arms": arms, "spread": spread}
    finally:
        loop.services.close()
    (args.out / "what-corrections-fix.json").write_text(json.dumps(out, indent=2) + "\n")
    return finish(out)


if __name__ == "__main__":
    sys.exit(main())
