"""`reflectrm eval` and `reflectrm compare`: a thin shell over `reflectrm_app.evaluations.Evaluations`.

    reflectrm eval --benchmark judgebench --data ../shared/data --strategies reflectrm,greedy --out out/
    reflectrm eval --benchmark file --data prefs.csv --map "query=prompt,label=winner" --labels auto
    reflectrm eval --benchmark demo --shard 2/3 --db shared.db   # one of 3 shards; any order, any machine
    reflectrm eval-merge 7 --out out/                          # the whole report, from any shard's run id
    reflectrm compare 3 4 [--strategy reflectrm] [--json]
    reflectrm compare 3 4 --gate && promote    # exit 3 when run 4 is significantly worse than run 3

Rerunning the same `eval` command resumes its run: pairs already stored are not judged again.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from reflectrm_app.commands import options
from reflectrm_app.commands.options import (add_backend_flags, add_batch_flag, add_file_reading_flags, add_judge_flags,
                                            add_store_flag, backend_configs, config_from_args)
from reflectrm.core.config import row_id, seed_number
from reflectrm.display import printable
from reflectrm.errors import InputError
from reflectrm.eval.benchmarks import BENCHMARKS, limit_units
from reflectrm.eval.compare import alpha_level
from reflectrm.files.readers import format_counts, label_counts
from reflectrm.eval.runner import DEFAULT_STRATEGIES, TOO_LONG, EvalPlan, parse_strategies
from reflectrm.eval.shards import parse_shard
from reflectrm.files.locks import exclusive


def register(sub: argparse._SubParsersAction) -> None:
    """Add `eval` and `compare` to the `reflectrm` parser."""
    p = sub.add_parser("eval", help="evaluate a judge on a benchmark or a labelled file, with intervals",
                       description="Evaluate: accuracy with 95 % Wilson intervals, both orders, strategies "
                                   "sharing one rollout pass, calibration; stored, resumable, reported.")
    p.add_argument("--benchmark", required=True, choices=[*BENCHMARKS, "file"],
                   help="a benchmark, or 'file' for any labelled file given with --data")
    p.add_argument("--data", type=Path, help="local file or folder (a data root holding every benchmark works); "
                                             "without it, Hub benchmarks are read from the Hub")
    p.add_argument("--subset", help="one subset (or a prefix ending in '/')")
    p.add_argument("--limit", type=int, help="at most N units, drawn with --sample-seed: a unit is a pair, or a whole "
                                             "group where the score needs one (a best-of-N prompt; an RM-Bench "
                                             "prompt is 9 pairs)")
    p.add_argument("--sample-seed", type=seed_number, default=0,
                   help="the --limit draw (default 0); apart from --seed, so two judge seeds see the same pairs")
    add_file_reading_flags(p, title="reading a labelled file (--benchmark file only)")
    p.add_argument("--strategies", default="reflectrm",
                   help=f"comma-separated, or 'all' ({','.join(DEFAULT_STRATEGIES)})")
    p.add_argument("--both-orders", action=argparse.BooleanOptionalAction, default=None,
                   help="also judge every pair swapped (paper Table 5); default on for judgebench, whose official "
                        "protocol it is, off otherwise")
    p.add_argument("--too-long", default="skip", choices=TOO_LONG, help="a pair over the context (default skip)")
    add_batch_flag(p)
    add_store_flag(p)
    _add_out_flag(p)
    p.add_argument("--shard", metavar="K/N",
                   help="judge only shard K of N (pairs split by a hash of their id) as its own stored run, so N "
                        "processes or machines share one evaluation over one store; the shard that completes the "
                        "set prints and writes the whole evaluation's report (or `reflectrm eval-merge RUN`)")
    add_judge_flags(p, skip=("strategy",))  # --strategies names the strategies, all from one rollout pass
    add_backend_flags(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("eval-merge", help="the report of a sharded evaluation, from its shards in the store",
                       description="Merge a sharded evaluation (`eval --shard K/N`): the report of every shard's "
                                   "pairs together, figure for figure the one a single `eval` writes. Refused while "
                                   "a shard is missing or unfinished.")
    p.add_argument("run", type=row_id, help="the run id of any one shard")
    _add_out_flag(p)
    add_store_flag(p)
    p.set_defaults(func=cmd_eval_merge)

    p = sub.add_parser("compare", help="compare two evaluation runs item by item (McNemar, paired bootstrap)")
    p.add_argument("run_a", type=row_id, help="the baseline run id")
    p.add_argument("run_b", type=row_id, help="the run compared with it")
    p.add_argument("--strategy", help="only this strategy")
    p.add_argument("--strategy-b", help="compare run A's --strategy with this strategy of run B (runs may be equal)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--gate", action="store_true",
                   help="a promotion gate: print a verdict per set (worse, better, no difference; under 'gate' with "
                        "--json) and exit 3 when run B is significantly worse than run A on any gated set (McNemar "
                        "p below --alpha and the 95 %% interval of B - A below 0), 0 otherwise. Gated: 'overall' "
                        "and 'both orders' of each strategy; subsets are reported, not gated, unless --gate-subsets")
    p.add_argument("--alpha", type=alpha_level,
                   help="the gate's significance level, above 0 and at most 0.5 (default 0.05)")
    p.add_argument("--gate-subsets", action="store_true", help="with --gate, gate every subset too")
    add_store_flag(p)
    p.set_defaults(func=cmd_compare)


def _add_out_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="folder for report.json, report.md and accuracy_vs_tokens.svg")


def request_from_args(args: argparse.Namespace) -> Any:
    from reflectrm_app.evaluations import EvalRequest
    from reflectrm_app.services.evaluation import both_orders_by_default
    from reflectrm_db.importing import parse_mapping

    both = args.both_orders if args.both_orders is not None else both_orders_by_default(args.benchmark)
    plan = EvalPlan(strategies=parse_strategies(args.strategies), both_orders=both,
                    too_long=args.too_long, batch_size=args.batch_size)
    return EvalRequest(benchmark=args.benchmark, data=args.data, subset=args.subset, limit=args.limit,
                       mapping=parse_mapping(args.mapping), labels=args.labels, plan=plan, seed=args.sample_seed,
                       skip_invalid=args.skip_invalid, shard=None if args.shard is None else parse_shard(args.shard))


def describe_data(request: Any, bench: Any) -> list[str]:
    """What `eval` is about to judge: the --limit draw in its unit, skipped rows, and the pairs per label."""
    lines = []
    if request.limit is not None:
        units, unit = limit_units(bench)
        lines.append(f"--limit {request.limit}: {units} {unit}, {len(bench.pairs)} pairs "
                     f"(drawn with --sample-seed {request.seed})")
    if bench.dropped:
        lines.append(f"skipped {bench.dropped} invalid row(s): {bench.dropped_reason}")
    lines.append(format_counts(label_counts(bench.pairs)) + f" ({len(bench.pairs)} pairs)")
    return lines


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C (SIGINT) or a kill (SIGTERM) stops after the current batch, whose write ends cleanly, and the report of
    what was judged is written, saying it is incomplete; a second Ctrl-C stops at once. The same command resumes."""

    def request_stop(signum: int, frame: Any) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        print("\nstopping after the current batch (the report says how far it got); Ctrl-C again to stop now",
              file=sys.stderr)
        stop.set()

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, request_stop)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRun:
    """Where `eval` keeps what it judges (the store) and writes its report, beside what it judges (`EvalRequest`)."""

    db: str | None = None  # None: the settings' store
    out: Path | None = None  # folder for report.json, report.md and the plot; None: printed only


def cmd_eval(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit is {args.limit}: give a count of at least 1, or leave it out for every pair")
    backend, engine = backend_configs(args)  # a bad flag fails before the data is read or a model loaded
    request, config, run = request_from_args(args), config_from_args(args), EvalRun(db=args.db, out=args.out)  # --shard too
    _check_store(run.db)  # a file that is not a store fails before a benchmark is read or generated
    bench = request.load()  # bad data or a bad subset fails before a model is loaded
    with contextlib.ExitStack() as stack:
        # one writer per report folder, held from before the run until its report is written; shards, which may
        # share one --out, hold it only while the one that completes the set writes the whole report
        if run.out and request.shard is None:
            stack.enter_context(exclusive(run.out, flag="--out", folder=True))
        elif run.out:  # a bad --out, or one a whole run is writing, fails now, not after the shard is judged
            with exclusive(run.out, flag="--out", folder=True):
                pass
        return _evaluate(run, request, bench, config, backend=backend, engine=engine)


def _check_store(db: str | None) -> None:
    """What `JudgmentStore.open` checks before it connects (nothing is created or written), done first."""
    from reflectrm_db.services import check_before_connect
    from reflectrm_db.settings import load_store_settings, normalise_url

    settings = load_store_settings()
    url = settings.database_url if db is None else normalise_url(db)
    check_before_connect(url, settings, create=True, writes=True, in_memory_ok=False)


def _evaluate(run_options: EvalRun, request: Any, bench: Any, config: Any, *, backend: Any, engine: Any) -> int:
    from reflectrm_app.evaluations import Evaluations
    from reflectrm_db.services import JudgmentStore

    from reflectrm.eval.report import markdown

    for line in describe_data(request, bench):  # on stdout: a failure after it stays one line on stderr
        print(printable(line), flush=True)
    stop = threading.Event()
    with JudgmentStore.open(run_options.db, in_memory_ok=False) as store:  # a run's records must outlive it
        store.check_writable()  # a read-only store fails now, not after the first batch is judged
        judge = options.load_judge(backend, engine)
        evals = Evaluations(store)
        with _stop_on_signals(stop):  # from here on a stop leaves a report; before, Ctrl-C ends the command (130)
            run = evals.run(request, backend=judge, config=config, should_stop=stop.is_set,
                            progress=lambda done, total: print(f"\r{done}/{total} pairs", end="", file=sys.stderr))
        print(file=sys.stderr)
        if request.shard is not None and run.status == "completed":
            return _finish_shard(evals, run, out=run_options.out)
        report = evals.report(run.id)
    if run_options.out and request.shard is None:  # an unfinished shard's figures are not the evaluation's
        _write(report, run_options.out)
    print(markdown(report))  # every text from data in it escaped (`reflectrm.eval.report`)
    print(f"evaluation run {run.id}: {printable(run.status)} ({run.items_done}/{run.items_total} pair-orders)")
    if run.status == "completed":
        return 0
    print(f"{printable(run.status)} after {run.items_done} of {run.items_total} pair-orders: the report says it is "
          "incomplete; rerun the same command to go on", file=sys.stderr)
    return EXIT_STOPPED


def _finish_shard(evals: Any, run: Any, *, out: Path | None) -> int:
    """A completed shard: the whole evaluation's report when every shard is complete, else what is left to run."""
    left = [k for k, r in evals.shards(run).items() if r is None or r.status != "completed"]
    count = run.config["shard"]["count"]
    here = f"evaluation run {run.id}: completed (shard {run.config['shard']['index']}/{count}, " \
           f"{run.items_done}/{run.items_total} pair-orders)"
    if left:
        names = ", ".join(f"{k}/{count}" for k in left[:10]) + (" ..." if len(left) > 10 else "")
        print(f"{here}; shards {names} not complete yet: run the same command with each --shard; the last to "
              f"complete prints the whole evaluation's report, or `reflectrm eval-merge {run.id}` does")
        return 0
    report = evals.merged_report(run.id)
    _print_merged(report, out=out)
    print(f"{here}; every shard is complete: the report above is the whole evaluation's")
    return 0


def cmd_eval_merge(args: argparse.Namespace) -> int:
    from reflectrm_app.evaluations import Evaluations
    from reflectrm_db.services import JudgmentStore

    with JudgmentStore.open(args.db, read_only=True, in_memory_ok=False) as store:
        report = Evaluations(store).merged_report(args.run)
    _print_merged(report, out=args.out)
    return 0


def _print_merged(report: Any, *, out: Path | None) -> None:
    from reflectrm.eval.report import markdown

    if out:
        with exclusive(out, flag="--out", folder=True):
            _write(report, out)
    print(markdown(report))
    print(printable(f"merged from shard runs {', '.join(f'{k}: {v}' for k, v in report['shards'].items())}"))


def _write(report: Any, out: Path) -> None:
    from reflectrm.eval.report import write_report

    for path in write_report(report, out):
        print(printable(f"wrote {path}"), file=sys.stderr)


EXIT_STOPPED = 130
"""`eval`'s exit status when it was stopped before every pair was judged (as a shell reports a Ctrl-C; `train`'s
for a cancelled run too): a script never reads an incomplete report as a finished one."""


EXIT_WORSE = 3
"""`compare --gate`'s exit status when run B is significantly worse than run A on a gated set: apart from 1 (a
crash) and 2 (bad input, `running.EXIT_USAGE`), so `reflectrm compare 3 4 --gate && promote` promotes only a
checkpoint that passed, and a script can tell a failed gate from a command that failed."""


def cmd_compare(args: argparse.Namespace) -> int:
    from reflectrm_app.evaluations import Evaluations
    from reflectrm_db.services import JudgmentStore

    from reflectrm.eval.compare import gate
    from reflectrm.eval.report import compare_markdown, dumps

    if not args.gate and (args.gate_subsets or args.alpha is not None):
        raise InputError("--alpha and --gate-subsets set the promotion gate: add --gate, or leave them out")
    with JudgmentStore.open(args.db, read_only=True, in_memory_ok=False) as store:
        result = Evaluations(store).compare(args.run_a, args.run_b, strategy=args.strategy,
                                            strategy_b=args.strategy_b)
    alpha = 0.05 if args.alpha is None else args.alpha
    verdict = gate(result, alpha=alpha, subsets=args.gate_subsets) if args.gate else None
    if args.json:
        print(printable(dumps({**result, "gate": verdict.to_dict()} if verdict else result), lines=True))
    else:
        print(compare_markdown(result))
        if verdict:
            for line in (*(s.summary() for s in verdict.sets), verdict.summary()):
                print(printable(line))
    return EXIT_WORSE if verdict and not verdict.passed else 0
