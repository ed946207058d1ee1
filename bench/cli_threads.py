"""`reflectrm judge --input FILE` on the demo judge at one thread against two, with and without a busy neighbour.

    python bench/cli_threads.py [--pairs 24] [--repeats 2] [--busy 0,1]

Each setting runs the real command (a fresh process: model load included) on the same pairs,
alternating the two thread counts so that a change in the machine's load hits both. `--busy K`
starts K pure-Python spinning processes beside it (a shared machine's other jobs). Prints the load
(`uptime`) before each group, seconds per run, and the ratio two threads / one; the last line is one
JSON object of the medians.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import finish, load_line, parser, ratio, timer


def pairs_file(folder: Path, count: int) -> Path:
    path = folder / "pairs.jsonl"
    rows = [{"id": f"p{k}", "query": f"What is {k + 2} * 7?", "response_1": f"It is {(k + 2) * 7}.",
             "response_2": f"It is {(k + 2) * 7 + 1}."} for k in range(count)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def judge_seconds(pairs: Path, threads: int) -> float:
    out = pairs.with_name(f"out-{threads}.jsonl")
    out.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["HF_HUB_OFFLINE"] = "1"
    with timer() as t:
        subprocess.run([sys.executable, "-m", "reflectrm_app.cli", "judge", "--input", str(pairs), "--output",
                        str(out), "--threads", str(threads)], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    seconds = t.seconds
    lines = out.read_text(encoding="utf-8").count("\n")
    if lines != sum(1 for _ in pairs.open()):
        raise SystemExit(f"the run with {threads} thread(s) wrote {lines} judgments")
    return seconds


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--busy", default="0,1", help="comma-separated counts of spinning neighbours")
    args = ap.parse_args()
    summary = {}
    with tempfile.TemporaryDirectory() as tmp:
        pairs = pairs_file(Path(tmp), args.pairs)
        for busy in (int(b) for b in args.busy.split(",")):
            spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
            try:
                time.sleep(2 if busy else 0)
                print(f"busy neighbours {busy}; {load_line()}")
                times: dict[int, list[float]] = {1: [], 2: []}
                for _ in range(args.repeats):
                    for threads in (2, 1):
                        times[threads].append(judge_seconds(pairs, threads))
                        print(f"  {threads} thread(s): {times[threads][-1]:.1f} s", flush=True)
            finally:
                for s in spinners:
                    s.kill()
                    s.wait()
            one, two = statistics.median(times[1]), statistics.median(times[2])
            print(f"  median: one thread {one:.1f} s, two {two:.1f} s; two / one = {ratio(two, one)}")
            summary[f"busy_{busy}"] = {"one_thread_s": round(one, 1), "two_threads_s": round(two, 1),
                                       "two_over_one": ratio(two, one)}
    finish({"pairs": args.pairs, **summary})


if __name__ == "__main__":
    main()
