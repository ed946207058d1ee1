"""GRPO step time on the demo judge: one process on 2 threads against 2 processes on 1 thread each (torchrun, gloo).

    python bench/grpo_processes.py [--steps 6] [--batch-size 4] [--num-generations 4] [--completion-tokens 96]
                                   [--repeats 1] [--out DIR]

Both settings train the same steps on the same snapshot, seed and global batch (batch_size x num_generations
completions a step, `--per-device-batch-size` half of them: the one process accumulates two passes, each of the two
processes runs one), launched as a user launches them: `python -m reflectrm_app.commands.train train` and
`torchrun --standalone --nproc_per_node 2 -m reflectrm_app.commands.train train`. A step's time is TRL's
`step_time` from the run's metrics.jsonl; the first step of each run (warm-up) is left out. Settings alternate
per repeat, so a change in the machine's load hits both. Prints the load (`uptime`) before each run, each run's
median step seconds and wall time (model load included), and the ratio one process / two processes (above 1: two
processes are faster); the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import finish, load_line, parser, ratio, timer

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "2"]
SETTINGS = {  # name: (launcher, torch threads a process)
    "1 process x 2 threads": ([sys.executable], 2),
    "2 processes x 1 thread": (TORCHRUN, 1),
}


def snapshot(folder: Path, rows: int) -> Path:
    """A training snapshot of the demo judge's own domain (preference examples), written as `build-data` writes one."""
    from reflectrm.demo import demo_domain
    from reflectrm.training.data import BuildReport, DataConfig, TrainingSet, preference_example, write_snapshot

    pairs = demo_domain().make_pairs(rows, seed=4242, source="bench-grpo-processes")
    examples = tuple(preference_example(p, config=DataConfig()) for p in pairs)
    return write_snapshot(TrainingSet(examples=examples, report=BuildReport()), folder, name="bench").path


def run_once(launcher: list[str], threads: int, *, data: Path, run: Path, args: argparse.Namespace) -> dict[str, float]:
    """One training run; its median step seconds (warm-up step left out) and wall seconds."""
    per_pass = args.batch_size * args.num_generations // 2
    command = [*launcher, "-m", "reflectrm_app.commands.train", "train", "--data", str(data), "--output", str(run),
               "--device", "cpu", "--max-steps", str(args.steps), "--batch-size", str(args.batch_size),
               "--num-generations", str(args.num_generations), "--per-device-batch-size", str(per_pass),
               "--max-completion-length", str(args.completion_tokens), "--no-gradient-checkpointing",
               "--threads", str(threads), "--save-steps", str(args.steps), "--completions-to-record", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    with timer() as t:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    errors = run.with_name(run.name + ".err")  # the whole of stderr, beside the run folder
    errors.write_text(done.stderr, encoding="utf-8")
    if done.returncode != 0:
        raise SystemExit(f"training failed ({done.returncode}; all of stderr in {errors}): "
                         f"{done.stderr[-2000:]}")
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    times = [float(s["step_time"]) for s in steps if s.get("step", 0) > 1 and "step_time" in s]
    return {"step_s": statistics.median(times) if times else float("nan"), "wall_s": t.seconds}


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps a run (the first is warm-up; default 6)")
    ap.add_argument("--batch-size", type=int, default=4, help="prompts a step (default 4)")
    ap.add_argument("--num-generations", type=int, default=4, help="completions a prompt (default 4)")
    ap.add_argument("--completion-tokens", type=int, default=96, help="max completion length (default 96)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each setting, alternating (default 1)")
    ap.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args()
    if args.steps < 2 or args.batch_size * args.num_generations % 2:
        raise SystemExit("--steps must be at least 2 and batch_size x num_generations even")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        data = snapshot(out / "data", rows=max(8, args.batch_size * args.steps))
        measured: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
        for repeat in range(args.repeats):
            for name, (launcher, threads) in SETTINGS.items():
                print(f"{name}, run {repeat + 1}: {load_line()}", flush=True)
                figures = run_once(launcher, threads, data=data, run=out / f"run-{threads}-{repeat}", args=args)
                print(f"  median step {figures['step_s']:.2f} s, wall {figures['wall_s']:.1f} s", flush=True)
                measured[name].append(figures)
    medians = {name: round(statistics.median(f["step_s"] for f in runs), 3) for name, runs in measured.items()}
    one, two = medians["1 process x 2 threads"], medians["2 processes x 1 thread"]
    print(f"step seconds: 1 process x 2 threads {one:.2f}, 2 processes x 1 thread {two:.2f}; "
          f"ratio one / two {ratio(one, two)}")
    return finish({"steps": args.steps, "batch_size": args.batch_size, "num_generations": args.num_generations,
                   "completion_tokens": args.completion_tokens, "repeats": args.repeats,
                   "one_process_step_s": one, "two_processes_step_s": two, "ratio_one_over_two": ratio(one, two)})


if __name__ == "__main__":
    raise SystemExit(main())
