"""Run one build stage of a demo judge into the repository, and write its record beside the weights.

    python research/build_stage.py --out research/builds/careless/stage5 --init research/builds/careless/stage4 \
        -- --steps 300 --lr 0.001 --seed 1252 --misread-frac 0 --carry-drop 0.7 --both-orders

Runs `python -m research.demojudge.steps_build --out OUT [--init INIT] ARGS...` (or `--module` another build
tool) at the checked-out commit, times it, and writes OUT/record.json: the command, the commit of the code
(refused when the build's code has uncommitted changes: the record must name code that exists), the
seed, the precision (bf16 autocast or fp32), torch, threads, the CPU's kind, the seconds and the sha256
of the weights. Commit OUT at once: a stage that lives only on a machine is lost with it.
The last line printed is one JSON object (the record).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the shared bench harness
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # research.demojudge

from research.demojudge.replay import WEIGHTS, machine, sha256_of  # noqa: E402
from harness import finish, parser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CODE = ("reflectrm", "research/demojudge")
"""What a build runs: uncommitted changes here would make the record name code that does not exist."""


def commit_of_code() -> str:
    """HEAD's full hash; a `SystemExit` when the build's code differs from it."""
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *CODE], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    if dirty:
        raise SystemExit(f"build_stage: uncommitted changes in {', '.join(c + '/' for c in CODE)} (first: {dirty.splitlines()[0]}): "
                         "commit them first, so the record names the code that ran")
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def seed_of(argv: list[str]) -> int | None:
    return int(argv[argv.index("--seed") + 1]) if "--seed" in argv[:-1] else None


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", type=Path, required=True, help="the stage's folder (inside the repository)")
    ap.add_argument("--init", type=Path, help="the stage it continues")
    ap.add_argument("--module", default="research.demojudge.steps_build", help="the build tool")
    ap.add_argument("--what", default="", help="one line: what this stage teaches")
    ap.add_argument("args", nargs="*", help="the build tool's own flags, after --")
    a = ap.parse_args()
    if a.out.exists():
        ap.error(f"--out {a.out} exists: a stage is written once (pick a new folder)")
    commit = commit_of_code()
    argv = ["--out", str(a.out), *(["--init", str(a.init)] if a.init else []), *a.args]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", a.module, *argv], cwd=ROOT)
    if done.returncode != 0:  # the build tool said why (its own one line) above; no record for a stage not built
        raise SystemExit(f"build_stage: {a.module} exited {done.returncode}: no record written for {a.out}")
    seconds = round(time.perf_counter() - started, 1)
    m = machine()
    record = {
        "name": a.out.name, "what": a.what,
        "command": " ".join(["python", "-m", a.module, *argv]), "module": a.module, "argv": a.args,
        "init": str(a.init) if a.init else None, "commit": commit, "seed": seed_of(a.args),
        "precision": "bf16 autocast over fp32 weights" if m["bf16_autocast"] else "fp32",
        "threads": m["threads"], "torch": m["torch"], "python": m["python"], "cpu": m["cpu_kind"],
        "seconds": seconds, "sha256": sha256_of(a.out / WEIGHTS),
    }
    (a.out / "record.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {a.out}/record.json: commit it now (git add {a.out} && git commit)")
    return finish(record)


if __name__ == "__main__":
    raise SystemExit(main())
