"""Replay a demo judge's recorded build, stage by stage, each at the commit that first ran it:

    python -m research.demojudge.replay --out DIR                 # the shipped judge's stages
    python -m research.demojudge.replay --out DIR --from MODEL    # another judge's (its demo_card.json)
    python -m research.demojudge.replay --out DIR --stages FILE   # a plan: a JSON list of stages (no hashes yet)
    python -m research.demojudge.replay --out DIR --stages research/demojudge/careless_stages.json   # the careless judge

A demo judge is a released artifact built in stages; its card's "stages" list records, per stage, the
exact build command (the arguments after `python -m MODULE`), the commit of the code that ran it, the
seed, the data ranges, the duration and the sha256 of the weights it produced. This tool checks each
recorded commit out into a temporary `git worktree`, runs the stage there (the stage before it as
--init), times it, hashes what it wrote and compares the hash with the record. It writes DIR/stageK for
every stage and DIR/replay.json with what it measured; the last stage is the judge.

Bit-exact replay needs the same torch build, thread count and CPU kind (bf16 autocast is used only on
CPUs with AVX512-BF16 or AMX, and its rounding differs from fp32): replay.json names each difference
it can see, and where the hashes differ the benchmark (`research/demo_reflection.py`) is the judge of
whether the rebuild is as good. Needs a git checkout of this project that holds the recorded commits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reflectrm.defaults import DEMO_MODEL_DIR
from reflectrm.demo import RUNNING_SUMS, domain_by_key
from reflectrm.demo.heldout import write_trained_problems

WEIGHTS = "model.safetensors"
STAGE_KEYS = ("stage", "name", "module", "commit", "argv", "seed", "ranges")
"""What a stage record must hold before it can be replayed (a plan); a replayed record adds the rest."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def machine() -> dict[str, Any]:
    """What a replay's bits depend on beyond the code: torch's version and threads, and the CPU's bf16 support."""
    import torch

    from reflectrm.backends.cpu_decode import cpu_has_bf16, cpu_kind

    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "bf16_autocast": cpu_has_bf16(),
            "cpu": platform.processor() or platform.machine(), "cpu_kind": cpu_kind(),
            "python": platform.python_version()}


def read_stages(source: Path) -> list[dict[str, Any]]:
    """The stage records of a model folder's card, a card file, or a plan file (a JSON list)."""
    path = source / "demo_card.json" if source.is_dir() else source
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SystemExit(f"replay: {path}: not readable JSON ({exc})")
    stages = data.get("stages") if isinstance(data, dict) else data
    if not isinstance(stages, list) or not stages:
        raise SystemExit(f"replay: {path} records no build stages: only a judge whose card lists its stages replays")
    for k, stage in enumerate(stages, start=1):
        missing = [key for key in STAGE_KEYS if not isinstance(stage, dict) or key not in stage]
        if missing:
            raise SystemExit(f"replay: {path}: stage {k} lacks {', '.join(missing)}")
    return stages


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def run_stage(stage: dict[str, Any], repo: Path, out: Path, init: Path | None, log) -> dict[str, Any]:
    """Run one stage in a worktree at its commit; return its record with what this run measured."""
    commit = git("rev-parse", "--verify", f"{stage['commit']}^{{commit}}", cwd=repo)
    where = out / f"stage{stage['stage']}"
    if where.exists():
        shutil.rmtree(where)
    with tempfile.TemporaryDirectory(prefix="reflectrm-replay-") as tmp:
        tree = Path(tmp) / "tree"
        git("worktree", "add", "--detach", str(tree), commit, cwd=repo)
        try:
            argv = [sys.executable, "-m", stage["module"], "--out", str(where.resolve()),
                    *(["--init", str(init.resolve())] if init else []), *map(str, stage["argv"])]
            env = {**os.environ, "PYTHONPATH": str(tree)}
            print(f"stage {stage['stage']} ({stage.get('name', '')}) at {commit[:10]}: {' '.join(argv[1:])}", flush=True)
            started = time.perf_counter()
            subprocess.run(argv, cwd=tree, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
            seconds = round(time.perf_counter() - started, 1)
        finally:
            git("worktree", "remove", "--force", str(tree), cwd=repo)
    digest = sha256_of(where / WEIGHTS)
    recorded = stage.get("sha256")
    return {**stage, "commit": commit, "replayed_seconds": seconds, "replayed_sha256": digest,
            "matches": None if recorded is None else digest == recorded}


def record_stages(model_dir: Path, report: dict[str, Any]) -> None:
    """Write a replayed plan's stages into the last stage's card: each stage's command, commit, seed, ranges,
    duration, the sha256 of its weights and the machine it ran on, so the judge can be replayed and checked."""
    path = model_dir / "demo_card.json"
    card = json.loads(path.read_text(encoding="utf-8"))
    card["stages"] = [
        {**{k: v for k, v in r.items() if k not in ("replayed_seconds", "replayed_sha256", "matches")},
         "command": " ".join(["python -m", r["module"], "--out", f"STAGE{r['stage']}",
                              *([f"--init STAGE{r['stage'] - 1}"] if r["stage"] > 1 else []), *map(str, r["argv"])]),
         "seconds": r["replayed_seconds"], "sha256": r["replayed_sha256"], "machine": report["machine"]}
        for r in report["stages"]]
    path.write_text(json.dumps(card, indent=2) + "\n")


def record_trained(model_dir: Path) -> Path | None:
    """A running-sum judge's record of the problems it trained on, beside its card (stages built at commits
    before the record existed wrote none); None for a judge of another domain."""
    card = json.loads((model_dir / "demo_card.json").read_text(encoding="utf-8"))
    return write_trained_problems(card, model_dir) if domain_by_key(card.get("domain")) is RUNNING_SUMS else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="an empty or new folder for the stages and replay.json")
    ap.add_argument("--from", dest="source", type=Path, default=DEMO_MODEL_DIR,
                    help="the judge whose card's stages to replay (default: the shipped demo judge)")
    ap.add_argument("--stages", type=Path, help="a plan instead: a JSON list of stage records without hashes")
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2],
                    help="the git checkout that holds the recorded commits (default: this one)")
    args = ap.parse_args(argv)
    stages = read_stages(args.stages or args.source)
    if not (args.repo / ".git").exists():
        ap.error(f"--repo {args.repo} is not a git checkout: replay needs this project's history")
    if args.out.exists() and any(args.out.iterdir()) and not (args.out / "replay.json").exists():
        ap.error(f"--out {args.out} holds files that are not a replay: pick an empty or new folder")
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"source": str(args.stages or args.source), "machine": machine(), "stages": []}
    init: Path | None = None
    with (args.out / "replay.log").open("a") as log:
        for stage in stages:
            record = run_stage(stage, args.repo, args.out, init, log)
            report["stages"].append(record)
            (args.out / "replay.json").write_text(json.dumps(report, indent=2) + "\n")
            verdict = {True: "matches the record", False: "differs from the record",
                       None: "no recorded hash"}[record["matches"]]
            print(f"  {record['replayed_seconds']:.0f} s, sha256 {record['replayed_sha256'][:16]}: {verdict}",
                  flush=True)
            init = args.out / f"stage{stage['stage']}"
    if args.stages:  # a plan replayed: the judge's card records its stages as they ran here
        record_stages(init, report)
    record_trained(init)  # so the demo benchmark of this judge need not replay its lessons
    differs = [r["stage"] for r in report["stages"] if r["matches"] is False]
    if differs:
        print(f"stages {differs} differ bit for bit (recorded on {stages[0].get('machine', 'an unrecorded machine')},"
              f" replayed on {report['machine']}): judge the rebuild by research/demo_reflection.py")
    print(f"the judge: {init}")
    return 0


if __name__ == "__main__":
    # a stop by SIGTERM unwinds like Ctrl-C: the running stage is killed and its worktree removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    raise SystemExit(main())
