"""The training worker: `python -m reflectrm.training.worker RUN_DIR [--resume]` (started by `jobs`).

Reads RUN_DIR/run.json, trains, and records the outcome in RUN_DIR/status.json. SIGTERM (or the
run's `cancel` file) stops it at the next step boundary with a checkpoint; exit codes: 0 completed
(its steps done, or its time budget spent), 130 cancelled (as `reflectrm train`), 1 failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from reflectrm.errors import OutputBusy
from reflectrm.training.runs import RunFiles, now_iso

EXIT_CANCELLED = 130  # as `reflectrm train` (`reflectrm_app.commands.train.EXIT_CANCELLED`)


def log_policy() -> None:
    """The run's log (train.log) is what a failed run is diagnosed from: progress at INFO, and the libraries'
    warnings in it whatever quiet the command that launched the worker chose for its own terminal (`reflectrm`
    without -v sets TRANSFORMERS_VERBOSITY=error, which a child inherits). Before transformers is imported."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    os.environ["TRANSFORMERS_VERBOSITY"] = "warning"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    args = ap.parse_args(argv)
    log_policy()
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    files = RunFiles(args.run_dir)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        from reflectrm.training.grpo import TrainConfig, train
        from reflectrm.training.jobs import run_spec

        spec = run_spec(files.root)
        config = TrainConfig.from_dict(spec["config"])
        if stop.is_set() or files.cancel.exists():  # cancelled while starting up
            files.update_status(state="cancelled", ended_by="cancel", finished_at=now_iso(), finished_unix=time.time())
            return EXIT_CANCELLED
        result = train(spec["data"], model=spec["model"], output_dir=files.root, config=config,
                       resume=args.resume, stop=stop)
    except OutputBusy as exc:  # another process trains this folder: its status is its own, left as it is
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # reported on the log, then recorded for the watcher
        traceback.print_exc()  # first: a watcher that sees `failed` must find the traceback already in the log
        sys.stderr.flush()
        status = files.read_status()
        if status.get("state") != "failed":  # a failure before train() started recording
            files.update_status(state="failed", error=f"{type(exc).__name__}: {exc}"[:2000], finished_at=now_iso(),
                                finished_unix=time.time())
        return 1
    logging.getLogger(__name__).info("run %s: %s at step %d (ended by %s)", files.root, result.state, result.step,
                                     result.ended_by)
    return EXIT_CANCELLED if result.state == "cancelled" else 0


if __name__ == "__main__":
    raise SystemExit(main())
