"""Does agreement pay? GRPO on every reviewer's answer taken as is against GRPO on the labels reviewers agreed on
(or an adjudicator decided), at the same number of corrections, through the app's services.

    python bench/agreement_pays.py --out OUT [--model DIR] [--backend vllm] [--top 120] [--steps 40] [--seeds 2]
    python bench/agreement_pays.py --out OUT --quick       # tiny sizes: the whole path in a few minutes
    python bench/agreement_pays.py --out OUT --resume      # go on where a stopped run left off (same arguments)

On the demo judge (its domain knows each pair's label and whether an analysis is right), a pool of pairs is
judged by an Evaluate run; a blind review round (Reviewers: `RoundService`) is opened over the first --top
judgments of the Review queue, right and wrong ones alike, with --overlap reviewers per item. Simulated
reviewers of known error rates (--reviewers: by default three careful ones and one careless) take the round's
items one at a time, whoever is next drawn at random, and answer each through the service as a person would:
the true verdict and each parsed analysis marked right or wrong by its arithmetic (`Loop.marks`), every verdict
and every mark flipped with the reviewer's error rate (seeded per reviewer and judgment, so a resumed run answers
alike). Items whose answers agree are labelled by agreement; the rest go to a simulated adjudicator
(--adjudicator-error) through the adjudication queue. The answers are exported as a user does (JSONL) and read
back for the figures.

Two snapshots, then one GRPO run on each per seed through the Train tab's service, same steps, seed and mix:

(a) "as is": what a team gets without rounds. Every answer is saved as a correction through the Review tab's
    service, one after another in a seeded random order per item; a later correction of a judgment edits the
    earlier one (the store keeps one active correction per judgment), so each item's label is one of its answers
    taken as is, and which reviewer's is chance, as with people correcting in turn. Its count: the items whose
    answers are all in.
(b) "agreed": the round's labels the snapshot rule takes (`SnapshotRule`, --rule: agreed-or-adjudicated by
    default), frozen by `RoundService.snapshot`, taken before (a) edits the corrections.

The counts are matched in corrections (one per item; the examples each derives differ: an agreed label carries
only the marks its reviewers agreed on): the larger arm is cut to the smaller one's count by a seeded draw of its
items, its other examples set aside in Curate while the snapshot is taken. Each checkpoint is evaluated on the
held-out pairs (problems neither the pool nor the judge's build asked) and compared with the Evaluate tab's
compare (paired bootstrap 95 % interval and exact McNemar p): starting judge -> (a), starting judge -> (b),
(a) -> (b). Also printed: the round's agreement (Cohen's / Fleiss' kappa and Krippendorff's alpha, verdicts and
single analyses), each reviewer's set error rate against the rate measured on the truth, each reviewer pair's
measured agreement against what independent errors at the set rates give, and each arm's labels against the truth.

Every figure is printed; the last line is one JSON object with all of them (also OUT/results.json);
OUT/partial.json holds what a stopped run measured so far.
"""

from __future__ import annotations

import json
import logging
import random
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo_loop import Loop, checkpoint, loop_arguments, open_loop, partial_results  # noqa: E402 - the loop bench's services
from harness import finish, load_line, parser, stopwatch  # noqa: E402
from reflectrm_db.rounds import LABEL_RULES, RoundConfig, SnapshotRule  # noqa: E402
from reflectrm.demo import read_card  # noqa: E402

SEEDS = {"heldout": 779_001, "pool": 779_002, "answers": 779_003, "as_is": 779_004, "cut": 779_005,
         "turns": 779_006}
ROUND = "agreement-pays"
HELDOUT, POOL = "agree-heldout", "agree-pool"
SNAPSHOTS = {"as_is": "agree-as-is", "agreed": "agree-agreed"}
ADJUDICATOR = "adjudicator"
DEFAULT_REVIEWERS = "careful-1=0.05,careful-2=0.05,careful-3=0.05,careless=0.35"
FLIP = {"right": "wrong", "wrong": "right"}
MAY_CHANGE = frozenset({"resume", "threads", "batch_size", "kv_cache_gib"})  # how a resumed run computes, not what it measures


# --- the simulated people (pure) --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reviewer:
    """A simulated reviewer who knows the truth and slips: each verdict and each mark flipped with `error`."""

    name: str
    error: float  # the probability of flipping the verdict, and, independently, each analysis's mark

    def answer(self, judgment_id: int, *, label: int, marks: Mapping[int, str],
               seed: int) -> tuple[int, dict[int, str]]:
        """(verdict, marks) for one judgment: the truth with slips drawn from (seed, reviewer, judgment) alone."""
        rng = random.Random(f"{seed}:{self.name}:{judgment_id}")
        verdict = 3 - label if rng.random() < self.error else label
        return verdict, {k: FLIP[m] if rng.random() < self.error else m for k, m in sorted(marks.items())}


def parse_reviewers(text: str, *, overlap: int) -> tuple[Reviewer, ...]:
    """`name=rate,...` as reviewers; `ValueError` with one line naming the problem and the fix."""
    reviewers = []
    for part in (p.strip() for p in text.split(",")):
        name, sep, rate = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--reviewers takes NAME=RATE entries separated by commas, got {part!r}: "
                             f"pass e.g. {DEFAULT_REVIEWERS}")
        try:
            error = float(rate)
        except ValueError:
            error = float("nan")
        if not 0.0 <= error <= 1.0:  # NaN fails both
            raise ValueError(f"--reviewers: {name.strip()}'s error rate must be a number from 0 to 1, got {rate!r}")
        reviewers.append(Reviewer(name.strip(), error))
    names = [r.name.casefold() for r in reviewers]
    if len(set(names)) != len(names) or ADJUDICATOR in names:
        raise ValueError(f"--reviewers names a reviewer twice (or the adjudicator, {ADJUDICATOR!r}): name each once")
    if len(reviewers) < overlap:
        raise ValueError(f"--overlap {overlap} needs at least {overlap} reviewers, --reviewers names "
                         f"{len(reviewers)}: name more or lower --overlap")
    return tuple(reviewers)


def expected_agreement(p: float, q: float) -> float:
    """The share of one verdict (or mark) two reviewers give alike when they slip independently at p and q."""
    return (1 - p) * (1 - q) + p * q


def mistakes(given: Iterable[tuple[int, Mapping[int, str]]], truth: Mapping[int, tuple[int, Mapping[int, str]]],
             ids: Iterable[int]) -> dict[str, Any]:
    """Wrong verdicts and wrong marks of answers (verdict, marks) on judgments `ids` against the truth."""
    verdicts = wrong_verdicts = marks = wrong_marks = 0
    for jid, (verdict, given_marks) in zip(ids, given):
        label, right = truth[jid]
        verdicts += 1
        wrong_verdicts += verdict != label
        marks += len(given_marks)
        wrong_marks += sum(right.get(k) != m for k, m in given_marks.items())
    return {"verdicts": verdicts, "verdict_error": share(wrong_verdicts, verdicts), "marks": marks,
            "mark_error": share(wrong_marks, marks)}


def share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def matched(a: list[int], b: list[int], *, seed: int) -> tuple[list[int], list[int]]:
    """Both lists at the smaller one's length: the larger cut by a seeded draw (each kept in its order)."""
    n = min(len(a), len(b))
    rng = random.Random(seed)
    cut = [sorted(rng.sample(x, n)) if len(x) > n else sorted(x) for x in (a, b)]
    return cut[0], cut[1]


# --- the round, worked through the services ----------------------------------------------------------------------


def sets(loop: Loop) -> dict[str, list]:
    a, d = loop.args, loop.domain
    card = read_card(a.model)
    heldout = d.heldout_pairs(card, a.heldout, seed=SEEDS["heldout"], source=HELDOUT)
    pool = d.other_problems(d.heldout_pairs(card, 3 * a.pool, seed=SEEDS["pool"], source=POOL), heldout)[: a.pool]
    return {HELDOUT: heldout, POOL: pool}


def open_round(loop: Loop, reviewers: tuple[Reviewer, ...]) -> None:
    """Reviewers: add the people and open a blind round over the queue's first --top judgments of the pool."""
    rounds = loop.services.rounds
    if any(r.name == ROUND for r in rounds.rounds()):
        return  # resumed
    for r in reviewers:
        rounds.set_reviewer(r.name, role="reviewer")
    rounds.set_reviewer(ADJUDICATOR, role="adjudicator")
    opened = rounds.open_round(RoundConfig(name=ROUND, overlap=loop.args.overlap, blind=True, source=POOL,
                                           top=loop.args.top, reviewers=tuple(r.name for r in reviewers)))
    print(f"  round {opened.name!r}: {opened.items} judgments, overlap {opened.overlap}, blind, "
          f"{len(reviewers)} reviewers")


def truth_of(loop: Loop, stored: Any) -> tuple[int, dict[int, str]]:
    """What a reviewer who makes no slip answers: the pair's label and `Loop.marks`."""
    return stored.judgment.pair.label, loop.marks(stored.judgment)


def work_round(loop: Loop, reviewers: tuple[Reviewer, ...]) -> int:
    """The reviewers take the round's items one at a time, whoever is next drawn at random (in lockstep turns the
    same reviewers would always share items), and answer each, until none is left for anyone."""
    rounds, answered, turn = loop.services.rounds, 0, random.Random(SEEDS["turns"])
    working = list(reviewers)
    while working:
        r = turn.choice(working)
        item = rounds.next_item(ROUND, reviewer=r.name)
        if item is None:
            working.remove(r)  # items are never handed back in this round: nothing comes later either
            continue
        label, marks = truth_of(loop, item.stored)
        verdict, given = r.answer(item.stored.id, label=label, marks=marks, seed=SEEDS["answers"])
        rounds.answer(ROUND, item.stored.id, reviewer=r.name, verdict=verdict, marks=given)
        answered += 1
    return answered


def adjudicate(loop: Loop, error: float) -> int:
    """The adjudicator decides every disputed item from its queue (the truth, slipping at `error`)."""
    rounds, decider = loop.services.rounds, Reviewer(ADJUDICATOR, error)
    disputed = rounds.adjudication_queue(ROUND, by=ADJUDICATOR)
    for item in disputed:
        label, marks = truth_of(loop, item.stored)
        verdict, given = decider.answer(item.stored.id, label=label, marks=marks, seed=SEEDS["answers"])
        rounds.adjudicate(ROUND, item.stored.id, by=ADJUDICATOR, verdict=verdict, marks=given,
                          note="simulated adjudicator")
    return len(disputed)


def exported_answers(loop: Loop) -> list[dict[str, Any]]:
    """The round's answers as a user exports them for outside analysis (JSONL), read back."""
    path = loop.out / "answers.jsonl"
    path.unlink(missing_ok=True)  # a resumed run's earlier export (exports never overwrite); the round is done now
    loop.services.rounds.export_answers(ROUND, fmt="jsonl", out=path)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        row["marks"] = {int(k): v for k, v in row["marks"].items()}
    return rows


# --- the figures of the round ---------------------------------------------------------------------------------


def estimate(e: Any) -> dict[str, Any]:
    return {"value": rnd(e.value), "low": rnd(e.low), "high": rnd(e.high), "items": e.items, "why": e.why}


def rnd(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def agreement_figures(loop: Loop, reviewers: tuple[Reviewer, ...], answers: list[dict[str, Any]],
                      truth: Mapping[int, tuple[int, Mapping[int, str]]]) -> dict[str, Any]:
    """The round's agreement (the service's report) beside what the set error rates predict."""
    report = loop.services.rounds.agreement(ROUND, resamples=loop.args.resamples, seed=0)
    rate = {r.name: r.error for r in reviewers}
    out: dict[str, Any] = {"overall": {level: {k: estimate(e) for k, e in figures.items()}
                                       for level, figures in report.overall.items()}}
    out["reviewers"] = {name: {"set_error": rate[name], **mistakes(
        [(a["verdict"], a["marks"]) for a in answers if a["reviewer"] == name], truth,
        [a["judgment_id"] for a in answers if a["reviewer"] == name])} for name in rate}
    out["pairs"] = [{"a": p.a, "b": p.b, "items": p.items, "verdict_agreement": rnd(p.verdict_agreement),
                     "analyses_agreement": rnd(p.analyses_agreement),
                     "expected_agreement": round(expected_agreement(rate[p.a], rate[p.b]), 4),
                     "verdict_kappa": estimate(p.verdict_kappa), "analyses_kappa": estimate(p.analyses_kappa)}
                    for p in report.pairs]
    print_agreement(out)
    return out


def print_agreement(out: Mapping[str, Any]) -> None:
    def cell(e: Mapping[str, Any]) -> str:
        return "undefined" if e["value"] is None else (
            f"{e['value']:+.3f}" + ("" if e["low"] is None else f" [{e['low']:+.3f}, {e['high']:+.3f}]"))

    print("  agreement of the round (95 % bootstrap intervals over items):")
    for level, figures in out["overall"].items():
        print(f"    {level:<9} " + "  ".join(f"{k} {cell(e)}" for k, e in figures.items()))
    print("  reviewer      set error  verdicts wrong  marks wrong  (answers, marks)")
    for name, r in out["reviewers"].items():
        print(f"    {name:<12} {r['set_error']:9.3f}  {fmt(r['verdict_error']):>14}  {fmt(r['mark_error']):>11}  "
              f"({r['verdicts']}, {r['marks']})")
    print("  pair                     items  verdicts alike  analyses alike  independent slips give  verdict kappa")
    for p in out["pairs"]:
        print(f"    {p['a'] + ' / ' + p['b']:<24} {p['items']:5}  {fmt(p['verdict_agreement']):>14}  "
              f"{fmt(p['analyses_agreement']):>14}  {p['expected_agreement']:>22.3f}  {cell(p['verdict_kappa'])}")


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


# --- the two arms' snapshots -----------------------------------------------------------------------------------


def snapshot_of(loop: Loop, corrections: set[int], take: Callable[[], Any]) -> Any:
    """Curate: set aside every active example not derived from `corrections`, take the snapshot, restore them."""
    store, curation = loop.services.runtime.store, loop.services.curation
    aside = {kind: [e.id for e in store.examples(kind, limit=None) if e.correction_id not in corrections]
             for kind in ("preference", "reflection")}
    for kind, ids in aside.items():
        if ids:
            curation.set_excluded(kind, ids, excluded=True)
    try:
        return take()
    finally:
        for kind, ids in aside.items():
            if ids:
                curation.set_excluded(kind, ids, excluded=False)


def snapshots(loop: Loop, answers: list[dict[str, Any]], truth: Mapping[int, Any]) -> dict[str, Any]:
    """(b) the rule's labels, then (a) every answer as a correction, each at the matched count."""
    a, rounds = loop.args, loop.services.rounds
    rule = SnapshotRule(labels=a.rule, round=ROUND)
    labels = {lab.judgment_id: lab for lab in rounds.store.round_labels(ROUND) if lab.kind in rule.kinds()}
    by_item: dict[int, list[dict[str, Any]]] = {}
    for row in answers:
        by_item.setdefault(row["judgment_id"], []).append(row)
    complete = [j for j, given in by_item.items() if len(given) >= a.overlap]
    as_is, agreed = matched(sorted(complete), sorted(labels), seed=SEEDS["cut"])
    taken = {s.name for s in loop.services.curation.snapshots()}
    if SNAPSHOTS["agreed"] not in taken:
        snapshot_of(loop, {labels[j].correction_id for j in agreed}, lambda: rounds.snapshot(
            SNAPSHOTS["agreed"], rule=rule, note=f"{len(agreed)} round labels ({a.rule})"))
    if SNAPSHOTS["as_is"] not in taken:
        kept = correct_as_is(loop, {j: by_item[j] for j in as_is})
        snapshot_of(loop, kept, lambda: loop.services.curation.snapshot(
            SNAPSHOTS["as_is"], note=f"{len(as_is)} items, every answer as a correction"))
    stands = stood(loop, as_is)
    out = {"items": {"complete": len(complete), "labelled": len(labels), "matched": len(as_is)}, "rule": rule.to_dict(),
           "as_is": {**mistakes([stands[j] for j in as_is], truth, as_is), **snapshot_counts(loop, "as_is")},
           "agreed": {**mistakes([(labels[j].verdict, labels[j].marks) for j in agreed], truth, agreed),
                      **snapshot_counts(loop, "agreed")}}
    for arm in ("as_is", "agreed"):
        r = out[arm]
        print(f"  snapshot {SNAPSHOTS[arm]!r}: {r['verdicts']} corrections ({r['preference']} preference, "
              f"{r['reflection']} reflection examples); against the truth: verdicts wrong {fmt(r['verdict_error'])}, "
              f"marks wrong {fmt(r['mark_error'])} of {r['marks']}")
    return out


def correct_as_is(loop: Loop, items: Mapping[int, list[dict[str, Any]]]) -> set[int]:
    """Review tab: save every answer as its reviewer's correction, each item's in a seeded order (the last
    stands); returns the corrections' ids."""
    review, kept = loop.services.review, set()
    for jid, given in sorted(items.items()):
        order = sorted(given, key=lambda row: row["reviewer"])
        random.Random(f"{SEEDS['as_is']}:{jid}").shuffle(order)
        for row in order:
            saved = review.correct(jid, verdict=row["verdict"], author=row["reviewer"], marks=row["marks"],
                                   confirmed=True)
        kept.add(saved.id)
    return kept


def stood(loop: Loop, ids: list[int]) -> dict[int, tuple[int, dict[int, str]]]:
    """Each judgment's active correction now (verdict, marks): what arm (a) trains on."""
    store, out = loop.services.runtime.store, {}
    for jid in ids:
        [active] = [c for c in store.corrections(judgment_id=jid) if c.active]
        out[jid] = (active.verdict, dict(active.marks))
    return out


def snapshot_counts(loop: Loop, arm: str) -> dict[str, int]:
    found = next(s for s in loop.services.curation.snapshots() if s.name == SNAPSHOTS[arm])
    return {"preference": found.num_preference, "reflection": found.num_reflection}


# --- training and the held-out comparison -----------------------------------------------------------------------


def trained_runs(loop: Loop, done: dict[str, Any], seed: int, results: dict[str, Any]) -> dict[str, Any]:
    """Each arm's checkpoint (trained, or found in OUT/partial.json) evaluated on the held-out pairs."""
    runs = {}
    for arm in ("as_is", "agreed"):
        key = f"{arm}-seed{seed}"
        if key not in done:
            final = loop.train(SNAPSHOTS[arm], minutes=0, steps=loop.args.steps, mix=loop.args.mix,
                               name=key, seed=seed)
            done[key] = loop.evaluate_checkpoint(final, [HELDOUT])[HELDOUT].id
            results.setdefault("runs", {}).update(loop.figures.get("runs", {}))
            checkpoint(loop, "agreement", results)
        runs[arm] = loop.evaluation.evals.get(done[key])
    return runs


def compare_arms(loop: Loop, start: Any, runs: Mapping[str, Any], seed: int) -> dict[str, Any]:
    return {"start_to_as_is": loop.compare(start, runs["as_is"], what=f"start -> as-is seed{seed}"),
            "start_to_agreed": loop.compare(start, runs["agreed"], what=f"start -> agreed seed{seed}"),
            "as_is_to_agreed": loop.compare(runs["as_is"], runs["agreed"], what=f"as-is -> agreed seed{seed}")}


def stored_or(loop: Loop, done: dict[str, Any], key: str, make: Callable[[], Any]) -> Any:
    """An evaluation run recorded in `done` under `key`, or `make()`'s (then recorded)."""
    if key in done:
        return loop.evaluation.evals.get(done[key])
    run = make()
    done[key] = run.id
    return run


def run(loop: Loop, reviewers: tuple[Reviewer, ...], results: dict[str, Any]) -> dict[str, Any]:
    a = loop.args
    print(f"does agreement pay? on {a.model} ({loop.domain.key}), {a.backend} backend; {load_line()}")
    for name, pairs in sets(loop).items():
        loop.import_set(name, pairs)
    done = results.setdefault("done", {})
    start = stored_or(loop, done, "start", lambda: loop.evaluate(HELDOUT))
    stored_or(loop, done, "pool", lambda: loop.evaluate(POOL, strategies=("reflectrm",)))
    checkpoint(loop, "agreement", results)
    open_round(loop, reviewers)
    clock = stopwatch()
    answered = work_round(loop, reviewers)
    decided = adjudicate(loop, a.adjudicator_error)
    progress = loop.services.rounds.progress(ROUND)
    print(f"  {answered} answers in {clock.stop():.0f} s; {progress.agreed} items agreed, {decided} adjudicated "
          f"({progress.adjudicated} in all)")
    answers = exported_answers(loop)
    truth = {s.id: truth_of(loop, s) for s in loop.services.runtime.store.load_many(
        sorted({row["judgment_id"] for row in answers}))}
    results["round"] = {"items": progress.round.items, "answers": progress.answered, "agreed": progress.agreed,
                        "adjudicated": progress.adjudicated,
                        "agreement": agreement_figures(loop, reviewers, answers, truth)}
    results["snapshots"] = snapshots(loop, answers, truth)
    checkpoint(loop, "agreement", results)
    for seed in range(a.seeds):
        runs = trained_runs(loop, done, seed, results)
        results.setdefault("heldout", {})[f"seed{seed}"] = compare_arms(loop, start, runs, seed)
        checkpoint(loop, "agreement", results)
    results.setdefault("runs", {}).update(loop.figures.get("runs", {}))
    print_summary(results)
    return results


def print_summary(results: Mapping[str, Any]) -> None:
    """The held-out table: each comparison of each seed, per strategy."""
    s = results["snapshots"]
    print(f"held-out accuracy, {s['items']['matched']} corrections per arm (as is: {fmt(s['as_is']['verdict_error'])} "
          f"of verdicts wrong; agreed: {fmt(s['agreed']['verdict_error'])})")
    print("  seed   comparison          strategy   before   after    gain  95 % interval     McNemar p")
    for seed, comparisons in results["heldout"].items():
        for what, strategies in comparisons.items():
            for strategy, r in strategies.items():
                print(f"  {seed:<6} {what:<19} {strategy:<9} {r['before']:6.1f}  {r['after']:6.1f}  {r['gain']:+6.1f}  "
                      f"[{r['low']:+5.1f}, {r['high']:+5.1f}]  {r['mcnemar_p']:9.3g}")


# --- the command line --------------------------------------------------------------------------------------------


def arguments() -> Any:
    ap = parser(__doc__)
    loop_arguments(ap)
    ap.add_argument("--resume", action="store_true",
                    help="go on in OUT where a stopped run of the same arguments left off (OUT/partial.json)")
    ap.add_argument("--heldout", type=int, default=600, help="held-out pairs each checkpoint is compared on")
    ap.add_argument("--pool", type=int, default=400, help="pairs judged for the Review queue")
    ap.add_argument("--top", type=int, default=120, help="the queue's first judgments the round covers")
    ap.add_argument("--overlap", type=int, default=2, help="reviewers per item")
    ap.add_argument("--reviewers", default=DEFAULT_REVIEWERS,
                    help="simulated reviewers as NAME=ERROR_RATE, comma-separated (the chance of flipping a verdict, "
                         "and each mark)")
    ap.add_argument("--adjudicator-error", type=float, default=0.05, help="the simulated adjudicator's error rate")
    ap.add_argument("--rule", default="agreed-or-adjudicated", choices=LABEL_RULES, help="arm (b)'s snapshot rule")
    ap.add_argument("--steps", type=int, default=40, help="each run's steps (the rate decays over them)")
    ap.add_argument("--seeds", type=int, default=2, help="training seeds: one run of each arm per seed")
    ap.add_argument("--mix", default="paper", choices=("paper", "as_is"), help="the Train tab's mix, both arms")
    ap.add_argument("--lr", type=float, default=3e-4, help="peak rate (the demo judge is tiny: far above the paper's)")
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=16, help="pairs judged together (evaluation)")
    ap.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples of the agreement intervals")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the whole path")
    args = ap.parse_args()
    for name in ("heldout", "pool", "top", "overlap", "steps", "seeds", "resamples"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not 0.0 <= args.adjudicator_error <= 1.0:
        ap.error(f"--adjudicator-error must be a rate from 0 to 1, got {args.adjudicator_error}")
    try:
        reviewers = parse_reviewers(args.reviewers, overlap=args.overlap)
    except ValueError as e:
        ap.error(str(e))
    if args.quick:  # after the checks: a bad size is refused with --quick too
        args.heldout, args.pool, args.top, args.steps, args.seeds = 8, 12, 6, 2, 1
        args.prompts_per_step, args.num_generations, args.resamples = 2, 2, 200
    args.max_steps = args.steps
    return ap, args, reviewers


def resumed(ap: Any, args: Any) -> tuple[Loop, dict[str, Any]]:
    """The services over OUT's store again and what OUT/partial.json says was done."""
    done = partial_results(ap, args, "agreement", may_change=MAY_CHANGE)
    logging.basicConfig(level=logging.WARNING)
    return Loop(args), done


def plain_args(args: Any) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def main() -> int:
    ap, args, reviewers = arguments()
    clock = stopwatch()
    loop, results = resumed(ap, args) if args.resume else (open_loop(ap, args), {})
    results["args"] = plain_args(args)
    try:
        results = run(loop, reviewers, results)
    finally:
        loop.services.close()
    results["seconds"] = round(clock.stop())
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    return finish(results)


if __name__ == "__main__":
    sys.exit(main())
