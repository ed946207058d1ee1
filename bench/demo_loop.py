"""The product's loop on a demo judge, through the app's own services: GRPO on the paper's recipe, corrections
from the Review queue, and whether the queue's order picks the corrections that teach most.

    python bench/demo_loop.py --out OUT [--model DIR] [--backend vllm] [--parts grpo,corrections]
    python bench/demo_loop.py --out OUT --quick        # tiny sizes: the whole loop in a few minutes

Everything a user does in the workbench is done here by the services its tabs call (`reflectrm_app`), on one
SQLite store in OUT: data sets are imported as JSONL files, held-out sets judged by the Evaluate tab's runs and
the training set by the Audit tab's batch audit; the paper's examples are added in Curate from the training
set's judgments, snapshots taken in Curate, GRPO runs started and watched as the Train tab does, and each
final checkpoint evaluated on the same pairs and compared as the Evaluate tab does (paired per pair: a bootstrap
95 % interval of after - before and an exact McNemar p).

Sets (every pair from the judge's domain; no stage of the judge's build asked any of their problems):
held-out (the first block's pairs); train (the held-out problems asked in their other wordings, with new
answers: the split a reward model meets in RLHF, known prompts and new responses; never a held-out
conversation); unseen (problems nothing here trains on); pool (other problems, judged for review).

Part `grpo`: audit the training set, add the paper's examples from its judgments (a preference example per pair
whose samples were not all right, one reflection pair where they disagree), snapshot, train on the paper's 4:1
mix for --grpo-minutes, then compare the checkpoint with the starting judge on held-out and unseen pairs.

Part `corrections`: evaluate the pool; a reviewer who knows each problem's answer walks the Review queue and
corrects the first --corrections wrong judgments it shows (the right verdict, and each parsed analysis marked
right or wrong by its arithmetic, as a careful person marks it); the snapshot of those corrections is trained
(a) on the paper's mix, whose preference examples are made up by replay from the judge's own audited rollouts,
(b) as is, no replay: what the corrections alone do; then (c) the same number of wrong judgments taken at
random from the pool instead of in the queue's order, trained as (a). Each is compared with the starting judge
on the corrected pairs, those problems reworded, the held-out set and the unseen problems; (a) and (c) also
with each other on the held-out set (the held-out gain per correction of each order).

Every figure is printed; the last line is one JSON object with all of them (also OUT/results.json).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import random
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

from reflectrm_app.records import TrainRequest  # noqa: E402
from reflectrm_app.services import Services  # noqa: E402
from reflectrm_app.settings import load_settings  # noqa: E402
from reflectrm.core.types import Judgment, PreferencePair  # noqa: E402
from reflectrm.demo import DEMO_MODEL_DIR, Domain, domain_of, read_card  # noqa: E402
from harness import finish, load_line, parser, stopwatch  # noqa: E402

log = logging.getLogger("bench.demo_loop")

SEEDS = {"heldout": 777_001, "train": 777_002, "unseen": 777_003, "pool": 777_004, "reworded": 777_005,
         "random": 777_006}
REVIEWER = "loop-reviewer"
EVAL_STRATEGIES = ("reflectrm", "greedy", "majority")  # majority@8 from the same samples as the two-stage verdict


class Loop:
    """The app's services over one store, and the sets every part measures on."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.out: Path = args.out
        self.domain: Domain = domain_of(args.model)
        settings = load_settings(database_url=f"sqlite:///{self.out / 'loop.db'}", model=args.model,
                                 backend=args.backend, runs_dir=self.out / "runs", warm_up=False,
                                 data_root=self.out, max_new_tokens=self.domain.output_tokens,
                                 audit_batch_size=args.batch_size,
                                 threads=args.threads, engine=engine_options(args))
        self.services = Services.start(settings)
        self.evaluation = self.services.evaluation
        self.training = self.services.training
        self.cancel = threading.Event()
        self.figures: dict[str, Any] = {}
        self.files: dict[str, str] = {}  # sets evaluated as labelled files (their pairs are stored under another set)

    # --- data sets, as a user imports them ---------------------------------------------------------------

    def import_set(self, name: str, pairs: list[PreferencePair]) -> str:
        """Write `pairs` as a JSONL file and import it as data set `name` (the Evaluate/Audit tabs' data sets)."""
        path = self.out / "sets" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs), encoding="utf-8")
        report = self.services.judging.import_file(path, source=name)
        print(f"  data set {name}: {report.added} pairs imported ({report.already_present} already stored)")
        return name

    def file_set(self, name: str, pairs: list[PreferencePair]) -> str:
        """Write `pairs` as a labelled JSONL file in the data folder, evaluated as the benchmark "file" (pairs that are
        already stored keep the data set they came in with, so a second data set of them would be empty)."""
        path = self.out / "sets" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs), encoding="utf-8")
        self.files[name] = str(path.relative_to(self.out))
        return name

    def sets(self) -> dict[str, list[PreferencePair]]:
        a, d = self.args, self.domain
        card = read_card(a.model)
        heldout = d.heldout_pairs(card, a.heldout, seed=SEEDS["heldout"], source="loop-heldout")
        train = d.fresh_pairs(heldout, seed=SEEDS["train"], source="loop-train")  # never a held-out conversation
        train = random.Random(SEEDS["train"]).sample(train, min(a.train_pairs, len(train)))
        unseen = d.other_problems(d.heldout_pairs(card, 3 * a.unseen, seed=SEEDS["unseen"], source="loop-unseen"),
                                  heldout)[: a.unseen]
        pool = d.other_problems(d.heldout_pairs(card, 3 * a.pool, seed=SEEDS["pool"], source="loop-pool"),
                                heldout + unseen)[: a.pool]
        return {"loop-heldout": heldout, "loop-train": train, "loop-unseen": unseen, "loop-pool": pool}

    # --- the Evaluate tab -------------------------------------------------------------------------------

    def evaluate(self, data_set: str, *, checkpoint: Any = None,
                 strategies: tuple[str, ...] = EVAL_STRATEGIES) -> Any:
        """A stored run of the active judge (or of `checkpoint`, a backend from `model_backend`) on a data set."""
        clock = stopwatch()
        request = (self.evaluation.request("file", data=self.files[data_set], strategies=strategies)
                   if data_set in self.files else self.evaluation.request(f"data set: {data_set}", strategies=strategies))
        if checkpoint is None:
            run = self.evaluation.run(request, cancel=self.cancel)
        else:
            run = self.evaluation.evals.run(request, backend=checkpoint,
                                            config=self.services.runtime.settings.judge_config())
        figures = {s: (run.metrics.get("strategies", {}).get(s, {}).get("accuracy") or {}).get("value")
                   for s in strategies}
        print(f"    evaluated {data_set} ({'starting judge' if checkpoint is None else 'checkpoint'}): run {run.id}, "
              f"{run.items_done} items in {clock.stop():.0f} s, " +
              ", ".join(f"{s} {100 * v:.1f} %" for s, v in figures.items() if v is not None))
        return run

    def evaluate_checkpoint(self, model: str, data_sets: list[str]) -> dict[str, Any]:
        """Runs of a checkpoint on the app's engine (loaded once) on each data set."""
        backend = self.services.runtime.model_backend(model, self.cancel)
        runs = {s: self.evaluate(s, checkpoint=backend) for s in data_sets}
        del backend
        gc.collect()  # one engine at a time: a vLLM engine's KV cache goes with it
        return runs

    def compare(self, before: Any, after: Any, *, what: str, per: int | None = None) -> dict[str, Any]:
        """The Evaluate tab's compare of two runs on the same pairs (its markdown saved beside the figures)."""
        markdown = self.evaluation.compare(before.id, after.id)
        (self.out / "compare").mkdir(exist_ok=True)
        (self.out / "compare" / f"{what}.md").write_text(markdown, encoding="utf-8")
        result = self.evaluation.evals.compare(before.id, after.id)
        out = {}
        for strategy, groups in result["strategies"].items():
            d = groups["overall"]
            diff = d["difference"]
            out[strategy] = {"n": d["n"], "before": round(100 * d["accuracy_a"], 1),
                             "after": round(100 * d["accuracy_b"], 1), "gain": points(diff["value"]),
                             "low": points(diff["low"]), "high": points(diff["high"]), "fixed": d["only_b"],
                             "broken": d["only_a"], "mcnemar_p": d["mcnemar_p"]}
            if per:
                out[strategy]["gain_per_correction"] = round(100 * diff["value"] / per, 3)
                out[strategy]["per_correction_interval"] = [round(100 * diff["low"] / per, 3),
                                                            round(100 * diff["high"] / per, 3)]
            r = out[strategy]
            print(f"    {what:<28} {strategy:<9} {r['before']:5.1f} -> {r['after']:5.1f} %  {r['gain']:+.1f} "
                  f"[{r['low']:+.1f}, {r['high']:+.1f}]  ({r['fixed']} fixed, {r['broken']} broken, n={r['n']}, "
                  f"McNemar p {r['mcnemar_p']:.2g})")
        return out

    # --- the Train tab ----------------------------------------------------------------------------------

    def train(self, snapshot: str, *, minutes: float, steps: int | None, mix: str, name: str, seed: int = 0,
              both_orders: bool = False, prompts_per_step: int | None = None, **config: Any) -> str:
        """Start a run as the Train tab does, watch it to the end; returns its final model folder.

        With `steps`, the run is that many steps with the rate decayed linearly over them (the same run on a busy
        machine); without, it runs for `minutes` with the rate decayed over the time budget (the tab's default).
        `prompts_per_step` overrides the bench's --prompts-per-step for this run; `config`, other `TrainConfig` fields
        (as the form passes them)."""
        a = self.args
        budget = ({"max_steps": steps, "save_steps": steps, "lr_scheduler": "linear"} if steps else
                  {"max_steps": a.max_steps, "save_steps": a.max_steps, "max_minutes": minutes,
                   "decay_over_time": True})
        request = TrainRequest.from_form(snapshot=snapshot, base_model=a.model, learning_rate=a.lr,
                                         batch_size=prompts_per_step or a.prompts_per_step,
                                         num_generations=a.num_generations,
                                         max_completion_length=self.domain.output_tokens,
                                         gradient_checkpointing=False, mix=mix, mix_seed=seed, seed=seed,
                                         both_orders=both_orders, **budget, **config)
        clock = stopwatch()
        # the judge's engine is let go while the run trains (an idle vLLM CPU engine keeps polling, most of a core);
        # the next judgment loads it again
        self.services.runtime.model.close()
        run = self.training.start(request)
        mix_used = run.config.get("data_mix", {})
        print(f"    training run {run.id} ({name}) on {snapshot!r}, mix {mix}: {mix_used.get('preference')} preference "
              f"+ {mix_used.get('replay')} replayed, {mix_used.get('reflection')} reflection examples")
        view = self.training.watch(run.id)
        while view.run.active:
            time.sleep(5)
            view = self.training.watch(run.id)
        if view.run.status != "completed" or not view.run.output_model:
            raise SystemExit(f"training run {run.id} ended {view.run.status}: {view.run.error or view.run.log_tail}")
        seconds = clock.stop()
        print(f"    run {run.id} completed {view.run.step} steps in {seconds:.0f} s: {view.run.output_model}")
        self.figures.setdefault("runs", {})[name] = {"run": run.id, "steps": view.run.step, "seconds": round(seconds),
                                                     "data_mix": mix_used, "metrics": dict(view.run.metrics)}
        return view.run.output_model

    # --- the Review tab ---------------------------------------------------------------------------------

    def marks(self, judgment: Judgment) -> dict[int, str]:
        """What a careful reviewer marks: an analysis is right when its arithmetic and its verdict are right."""
        pair = judgment.pair
        return {k: "right" if r.prediction == pair.label and self.domain.analysis_true(pair, r.analysis) else "wrong"
                for k, r in enumerate(judgment.rollouts) if r.prediction is not None and r.analysis.strip()}

    def correct_in_queue_order(self, budget: int, *, source: str) -> list[tuple[int, PreferencePair]]:
        """Walk the Review queue (Next) and correct each wrong judgment it shows, until `budget` are corrected."""
        corrected: list[tuple[int, PreferencePair]] = []
        seen: set[int] = set()
        after = None
        looked = 0
        while len(corrected) < budget:
            item = self.services.review.next_for_review(reviewer=REVIEWER, after=after, source=source)
            if item is None or item.stored.id in seen:
                break  # the queue is walked through
            seen.add(item.stored.id)
            looked += 1
            judgment = item.stored.judgment
            if judgment.verdict != judgment.pair.label:
                self.services.review.correct(item.stored.id, verdict=judgment.pair.label, author=REVIEWER,
                                      marks=self.marks(judgment), confirmed=True)
                corrected.append((item.stored.id, judgment.pair))
            after = item.stored.id
        self.services.review.release(REVIEWER)
        print(f"    the queue showed {looked} judgments; {len(corrected)} were wrong and corrected")
        self.figures.setdefault("queue", {})["looked"] = looked
        return corrected

    def correct_at_random(self, budget: int, run: Any, *, seed: int = 0) -> list[tuple[int, PreferencePair]]:
        """Correct `budget` wrong judgments of an evaluation run drawn at random (the same reviewer's work)."""
        wrong = [row[0] for row in self.evaluation.items_to_check(run.id, limit=100_000) if row[-1] == "wrong"]
        chosen = random.Random(SEEDS["random"] + seed).sample(sorted(set(wrong)), min(budget, len(set(wrong))))
        corrected = []
        for jid in chosen:
            judgment = self.services.review.review_item(jid, reviewer=REVIEWER).stored.judgment
            self.services.review.correct(jid, verdict=judgment.pair.label, author=REVIEWER, marks=self.marks(judgment),
                                  confirmed=True)
            corrected.append((jid, judgment.pair))
        self.services.review.release(REVIEWER)
        return corrected

    def exclude_active_examples(self) -> None:
        """Set every active example aside in Curate (the next snapshot holds only what comes after)."""
        for kind in ("preference", "reflection"):
            ids = [e.id for e in self.services.runtime.store.examples(kind, limit=None)]
            if ids:
                self.services.curation.set_excluded(kind, ids, excluded=True)


def points(x: float) -> float:
    return round(100 * x, 1)


def engine_options(args: Any) -> dict[str, Any] | None:
    return {"kv_cache_gib": args.kv_cache_gib} if args.backend == "vllm" else None


def part_grpo(loop: Loop, before: dict[str, Any]) -> dict[str, Any]:
    a = loop.args
    print("part grpo: the paper's recipe from the Train tab")
    clock = stopwatch()
    report = loop.services.audit.batch_audit("loop-train", cancel=loop.cancel)
    print(f"    audited loop-train in both orders in {clock.stop():.0f} s ({len(report.flipped)} pairs flipped)")
    derived = loop.services.curation.derive_from_labels("loop-train", seed=0)
    print(f"    Curate: {asdict(derived)}")
    snapshot = loop.services.curation.snapshot("loop-paper", note="the paper's examples from loop-train's judgments")
    final = loop.train(snapshot.name, minutes=a.grpo_minutes, steps=a.grpo_steps, mix="paper", name="grpo")
    loop.exclude_active_examples()  # the corrections' snapshots hold only corrections
    after = loop.evaluate_checkpoint(final, ["loop-unseen", "loop-heldout"])  # held-out last: the gate reads it
    out = {"derived": asdict(derived), "snapshot": snapshot.name,
           "heldout": loop.compare(before["loop-heldout"], after["loop-heldout"], what="grpo-heldout"),
           "unseen": loop.compare(before["loop-unseen"], after["loop-unseen"], what="grpo-unseen")}
    if a.promote:  # the Train tab's "Use as judge", through its gate on the newest comparison (the held-out pairs)
        promoted = loop.services.evaluation.promote(final, by=REVIEWER)
        print(f"    Use as judge: {promoted.record.verdict}; the judge is now {loop.services.runtime.active_judge_label()}")
        out["promotion"] = {"verdict": promoted.record.verdict, "overridden": promoted.record.overridden}
    return out


def corrected_sets(loop: Loop, name: str, corrected: list[tuple[int, PreferencePair]]) -> dict[str, Any]:
    """The corrected pairs and those problems reworded, as labelled files, with the starting judge's runs on them
    (files, not data sets: a pair already stored under another data set, a rewording two draws share included,
    stays in the data set it came with)."""
    pairs = [p for _, p in corrected]
    sets = {"corrected": loop.file_set(f"loop-{name}-corrected", pairs),
            "reworded": loop.file_set(f"loop-{name}-reworded", loop.domain.fresh_pairs(
                pairs, seed=SEEDS["reworded"], source=f"loop-{name}-reworded"))}
    return {"sets": sets, "starts": {k: loop.evaluate(s) for k, s in sets.items()}, "pairs": len(pairs)}


def arm(loop: Loop, name: str, corrections: dict[str, Any], *, mix: str, before: dict[str, Any],
        snapshot: str, seed: int = 0, heldout_only: bool = False) -> dict[str, Any]:
    """Train on the corrections' snapshot and compare with the starting judge on every set (or the held-out set)."""
    a = loop.args
    sets, starts, count = corrections["sets"], corrections["starts"], corrections["pairs"]
    final = loop.train(snapshot, minutes=a.corrections_minutes, steps=a.corrections_steps, mix=mix, name=name,
                       seed=seed)
    out: dict[str, Any] = {"snapshot": snapshot, "corrections": count, "seed": seed}
    after = loop.evaluate_checkpoint(final, ["loop-heldout"] if heldout_only
                                     else [*sets.values(), "loop-heldout", "loop-unseen"])
    if not heldout_only:
        for k, s in sets.items():
            out[k] = loop.compare(starts[k], after[s], what=f"{name}-{k}")
    out["heldout"] = loop.compare(before["loop-heldout"], after["loop-heldout"], what=f"{name}-heldout", per=count)
    if not heldout_only:
        out["unseen"] = loop.compare(before["loop-unseen"], after["loop-unseen"], what=f"{name}-unseen", per=count)
    out["_heldout_run"] = after["loop-heldout"].id
    return out


def take_snapshot(loop: Loop, name: str, corrections: int) -> str:
    """Curate: snapshot the active examples (the corrections') and export them as a user downloads them."""
    snapshot = loop.services.curation.snapshot(name, note=f"{corrections} corrections").name
    loop.services.curation.export("training", fmt="hf", snapshot=snapshot)
    return snapshot


def part_corrections(loop: Loop, before: dict[str, Any]) -> dict[str, Any]:
    """The queue's corrections trained with and without replay; then the queue's order against random draws of the
    same number of wrong judgments, each order trained with --seeds seeds (a random order: one draw per seed)."""
    a = loop.args
    print("part corrections: the Review queue, the Curate snapshot, the Train tab, the Evaluate tab's compare")
    pool_run = loop.evaluate("loop-pool", strategies=("reflectrm",))
    queue = loop.correct_in_queue_order(a.corrections, source="loop-pool")
    out = {"pool": {"pairs": pool_run.items_done,
                    "wrong": sum(r[-1] == "wrong" for r in loop.evaluation.items_to_check(pool_run.id, limit=100_000))}}
    snapshot = take_snapshot(loop, "loop-queue", len(queue))
    queue_sets = corrected_sets(loop, "queue", queue)
    out["queue"] = arm(loop, "queue", queue_sets, mix="paper", before=before, snapshot=snapshot)
    checkpoint(loop, "corrections", out)
    out["queue_no_replay"] = arm(loop, "queue-no-replay", queue_sets, mix="as_is", before=before, snapshot=snapshot)
    out["queue_no_replay"].pop("_heldout_run")
    checkpoint(loop, "corrections", out)
    queue_runs = {0: out["queue"].pop("_heldout_run")}
    for seed in range(1, a.seeds):
        result = arm(loop, f"queue-seed{seed}", queue_sets, mix="paper", before=before, snapshot=snapshot, seed=seed,
                     heldout_only=True)
        queue_runs[seed] = result.pop("_heldout_run")
        out[f"queue_seed{seed}"] = result
        checkpoint(loop, "corrections", out)
    for jid, _ in queue:
        loop.services.review.withdraw(jid, author=REVIEWER)  # the random order's snapshot holds only its own corrections
    out["queue_against_random_heldout"] = {}
    for seed in range(a.seeds):
        chosen = loop.correct_at_random(a.corrections, pool_run, seed=seed)
        key = "random" if seed == 0 else f"random_seed{seed}"
        name = "random" if seed == 0 else f"random-seed{seed}"
        sets = corrected_sets(loop, name, chosen) if seed == 0 else {"sets": {}, "starts": {}, "pairs": len(chosen)}
        out[key] = arm(loop, name, sets, mix="paper", before=before, seed=seed, heldout_only=seed > 0,
                       snapshot=take_snapshot(loop, f"loop-{name}", len(chosen)))
        out[key]["overlap_with_queue"] = len({j for j, _ in chosen} & {j for j, _ in queue})
        random_run = loop.evaluation.evals.get(out[key].pop("_heldout_run"))
        out["queue_against_random_heldout"][seed] = loop.compare(
            random_run, loop.evaluation.evals.get(queue_runs[seed]), what=f"queue-vs-random-heldout-seed{seed}")
        for jid, _ in chosen:
            loop.services.review.withdraw(jid, author=REVIEWER)
        checkpoint(loop, "corrections", out)
    return out


def checkpoint(loop: Loop, part: str, figures: dict[str, Any]) -> None:
    """The figures so far, written to OUT/partial.json (a long run stopped early keeps what it measured)."""
    path = loop.out / "partial.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    done[part] = figures
    path.write_text(json.dumps(done, indent=2, default=str) + "\n")


def open_loop(ap: Any, args: Any) -> Loop:
    """The services over a new store in `args.out` (refused by `ap` when the folder holds anything)."""
    if args.out.exists() and any(args.out.iterdir()):
        ap.error(f"--out {args.out} is not empty: a bench starts from a new store")
    args.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING)
    return Loop(args)


def loop_arguments(ap: Any) -> None:
    """The arguments every bench over the loop's services takes: its folder, the judge, the engine, the threads."""
    ap.add_argument("--out", type=Path, required=True, help="a new folder: the store, run folders, data sets, figures")
    ap.add_argument("--model", default=str(DEMO_MODEL_DIR), help="the demo judge to start from (default: the bundled one)")
    ap.add_argument("--backend", default="transformers", choices=("transformers", "vllm"),
                    help="the app's engine for every judgment (vllm: the `vllm` extra, several times faster here)")
    ap.add_argument("--kv-cache-gib", type=float, default=1.0, help="vLLM's KV cache per engine (GiB)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (judging and training)")


def partial_results(ap: Any, args: Any, key: str, *, may_change: frozenset[str] = frozenset({"resume"})
                    ) -> dict[str, Any]:
    """What a stopped run in `args.out` measured (OUT/partial.json's `key`), when it ran with the same arguments but
    those in `may_change` (how a run computes, not what it measures); refused with a one-line reason otherwise."""
    path = args.out / "partial.json"
    if not (args.out / "loop.db").exists() or not path.is_file():
        ap.error(f"--resume needs a stopped run's store and OUT/partial.json in {args.out}: run without --resume")
    done = json.loads(path.read_text()).get(key, {})
    now = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    changed = sorted(k for k, v in done.get("args", {}).items() if k not in may_change and now.get(k) != v)
    if changed:
        ap.error(f"--resume goes on with the stopped run's arguments, and these differ: {', '.join(changed)}; pass "
                 "them as before, or start a new OUT")
    return done


def main() -> int:
    ap = parser(__doc__)
    loop_arguments(ap)
    ap.add_argument("--parts", default="grpo,corrections", help="comma-separated: grpo, corrections")
    ap.add_argument("--heldout", type=int, default=600, help="held-out pairs")
    ap.add_argument("--unseen", type=int, default=300, help="pairs on problems nothing trains on")
    ap.add_argument("--train-pairs", type=int, default=400, help="training pairs audited for the paper's examples")
    ap.add_argument("--pool", type=int, default=600, help="pairs judged for the Review queue")
    ap.add_argument("--corrections", type=int, default=30, help="wrong judgments corrected in each arm")
    ap.add_argument("--grpo-minutes", type=float, default=15.0, help="the GRPO run's time budget")
    ap.add_argument("--corrections-minutes", type=float, default=6.0, help="each corrections run's time budget")
    ap.add_argument("--max-steps", type=int, default=1000, help="steps at most (the time budget ends a run first)")
    ap.add_argument("--grpo-steps", type=int, default=None,
                    help="the GRPO run's steps instead of a time budget (the rate decays over them; load-independent)")
    ap.add_argument("--corrections-steps", type=int, default=None, help="each corrections run's steps, likewise")
    ap.add_argument("--lr", type=float, default=3e-4, help="peak rate (the demo judge is tiny: far above the paper's)")
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=16, help="pairs judged together (audit and evaluation)")
    ap.add_argument("--promote", action="store_true",
                    help="part grpo: then make the checkpoint the judge through the Train tab's gate (with --parts "
                         "grpo: the corrections part trains and compares from the starting judge)")
    ap.add_argument("--seeds", type=int, default=3,
                    help="training seeds of the queue's order and random draws of the same count (one per seed)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the whole loop")
    args = ap.parse_args()
    if args.quick:
        args.heldout, args.unseen, args.train_pairs, args.pool, args.corrections = 12, 8, 16, 24, 3
        args.grpo_minutes, args.corrections_minutes, args.max_steps = 0.3, 0.2, 2
        args.prompts_per_step, args.num_generations, args.seeds = 2, 2, 2
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not parts <= {"grpo", "corrections"}:
        ap.error(f"--parts takes grpo and corrections, got {args.parts!r}")
    clock = stopwatch()
    loop = open_loop(ap, args)
    try:
        return run_loop(loop, args, parts, clock)
    finally:
        loop.services.close()  # the engines' processes go with it, also when a part fails


def run_loop(loop: Loop, args: Any, parts: set[str], clock: Any) -> int:
    print(f"the loop on {args.model} ({loop.domain.key}), {args.backend} backend; {load_line()}")
    sets = loop.sets()
    for name, pairs in sets.items():
        loop.import_set(name, pairs)
    print("the starting judge")
    before = {s: loop.evaluate(s) for s in ("loop-heldout", "loop-unseen")}
    results: dict[str, Any] = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                               "sets": {k: len(v) for k, v in sets.items()}}
    if "grpo" in parts:
        results["grpo"] = part_grpo(loop, before)
        checkpoint(loop, "grpo", results["grpo"])
    if "corrections" in parts:
        results["corrections"] = part_corrections(loop, before)
    results["runs"] = loop.figures.get("runs", {})
    results["queue_looked"] = loop.figures.get("queue", {}).get("looked")
    results["seconds"] = round(clock.stop())
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
