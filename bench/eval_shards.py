"""A sharded evaluation against one process: wall time of `reflectrm eval` on the demo judge as one process and as
two `--shard K/2` processes at once on one store, and whether the merged report equals the single one.

    python bench/eval_shards.py [--pairs 48] [--strategies reflectrm,greedy] [--max-new-tokens 96]
                                [--batch-size 8] [--repeats 1] [--out DIR]

Both settings judge the same demo pairs with the same seed, launched as a user launches them: the one process with
`--threads 2`, each shard process with `--threads 1`, so both use the machine's two cores (on two machines, or one
GPU each, a shard has a whole machine: the ratio here is what splitting one machine's cores buys, the lower bound).
Settings alternate per repeat, so a change in the machine's load hits both. Prints the load (`uptime`) before each
run, each run's wall time (model load included), whether the sharded report's figures equal the single report's
(they must: a pair's judgment does not depend on which process judged it; confidences, sums of log-probabilities,
differ in their last digits with the batch and the thread count, so floats are compared to a relative 1e-5), and
the ratio one process / two shards (above 1: the shards are faster); the last line is one JSON object.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import finish, load_line, parser, ratio, timer

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


def _argv(args: Any, *extra: str) -> list[str]:
    return [sys.executable, "-m", "reflectrm_app.cli", "eval", "--benchmark", "demo", "--limit", str(args.pairs),
            "--strategies", args.strategies, "--max-new-tokens", str(args.max_new_tokens), "--batch-size",
            str(args.batch_size), "--device", "cpu", "--seed", "0", *extra]


def _wait(procs: list[subprocess.Popen[str]], folder: Path) -> None:
    for k, proc in enumerate(procs):
        _, err = proc.communicate()
        (folder / f"stderr-{k}.txt").write_text(err, encoding="utf-8")
        if proc.returncode != 0:
            raise SystemExit(f"eval failed ({proc.returncode}; all of stderr in {folder}): {err[-2000:]}")


def one_process(args: Any, folder: Path) -> float:
    folder.mkdir(parents=True)
    with timer() as t:
        proc = subprocess.Popen(_argv(args, "--threads", "2", "--db", str(folder / "one.db"), "--out",
                                      str(folder / "report")), env=_env(), cwd=folder, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _wait([proc], folder)
    return t.seconds


def two_shards(args: Any, folder: Path) -> float:
    folder.mkdir(parents=True)
    db = str(folder / "shared.db")
    with timer() as t:
        procs = [subprocess.Popen(_argv(args, "--threads", "1", "--shard", f"{k}/2", "--db", db, "--out",
                                        str(folder / f"report{k}")), env=_env(), cwd=folder, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in (1, 2)]
        _wait(procs, folder)
    return t.seconds


def figures(folder: Path) -> dict[str, Any]:
    """The report without what names its run (its run id, the shards' run ids): what must not depend on sharding."""
    reports = sorted(folder.glob("report*/report.json"))
    if not reports:
        raise SystemExit(f"no report.json under {folder}: the run did not finish its report")
    report = json.loads(reports[0].read_text(encoding="utf-8"))
    return {k: v for k, v in report.items() if k not in ("run_id", "shards")}


def differences(a: Any, b: Any, path: str = "") -> tuple[list[str], float]:
    """(paths where the reports differ beyond float rounding, the largest float difference seen). Confidences are
    sums of log-probabilities, which a different batch or thread count rounds differently (1e-8 here); counts,
    verdicts and accuracies must be equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())}"], 0.0
        found = [differences(a[k], b[k], f"{path}/{k}") for k in sorted(a)]
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        found = [differences(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b))]
    elif isinstance(a, float) and isinstance(b, float):
        gap = abs(a - b)
        return ([] if math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7) else [f"{path}: {a} != {b}"]), gap
    else:
        return ([] if a == b else [f"{path}: {a!r} != {b!r}"]), 0.0
    return [p for paths, _ in found for p in paths], max((gap for _, gap in found), default=0.0)


def accuracies(report: dict[str, Any]) -> str:
    return ", ".join(f"{name} {s['accuracy']['value']}" for name, s in sorted(report["strategies"].items()))


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=int, default=48, help="demo pairs to judge (default 48)")
    ap.add_argument("--strategies", default="reflectrm,greedy", help="strategies (default reflectrm,greedy)")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="analysis tokens (default 96)")
    ap.add_argument("--batch-size", type=int, default=8, help="pairs a batch (default 8)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each setting, alternating (default 1)")
    ap.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        walls: dict[str, list[float]] = {"one process": [], "two shards": []}
        same: list[bool] = []
        for repeat in range(args.repeats):
            print(f"one process x 2 threads, run {repeat + 1}: {load_line()}", flush=True)
            walls["one process"].append(one_process(args, out / f"one-{repeat}"))
            print(f"  wall {walls['one process'][-1]:.1f} s", flush=True)
            print(f"two shards x 1 thread, run {repeat + 1}: {load_line()}", flush=True)
            walls["two shards"].append(two_shards(args, out / f"shards-{repeat}"))
            print(f"  wall {walls['two shards'][-1]:.1f} s", flush=True)
            single, merged = figures(out / f"one-{repeat}"), figures(out / f"shards-{repeat}")
            apart, gap = differences(single, merged)
            same.append(not apart)
            print(f"  merged report equals the single one: {same[-1]} (largest float difference {gap:.1e}; "
                  f"{accuracies(merged)}){''.join(chr(10) + '    ' + p for p in apart[:10])}", flush=True)
    one, two = statistics.median(walls["one process"]), statistics.median(walls["two shards"])
    print(f"wall seconds: one process {one:.1f}, two shards {two:.1f}; ratio one / two {ratio(one, two)}")
    return finish({"pairs": args.pairs, "strategies": args.strategies, "max_new_tokens": args.max_new_tokens,
                   "repeats": args.repeats, "one_process_s": round(one, 1), "two_shards_s": round(two, 1),
                   "ratio_one_over_two": ratio(one, two), "reports_equal": all(same)})


if __name__ == "__main__":
    raise SystemExit(main())
