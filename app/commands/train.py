"""`reflectrm build-data`, `reflectrm train` and `reflectrm train-status`: thin shells over the library.

    reflectrm build-data --pairs pairs.jsonl [--model PATH] [--eval heldout.jsonl] [--extra corrections_hf]
                         [--mix 4:1] [--out data] [--name demo]
    reflectrm train --data data/demo-1a2b3c4d5e6f --model PATH --output runs/r1 [--max-steps N] [--lora]
    reflectrm train-status runs/r1 [--json]

`reflectrm_app.cli` adds these to the `reflectrm` command. Several processes (CPUs, GPUs, nodes) run this module
under a launcher: `torchrun --nproc_per_node N -m reflectrm_app.commands.train train ...` or
`accelerate launch --config_file CFG -m reflectrm_app.commands.train train ...`; rank 0 alone reports the run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from reflectrm_app.commands import options
from reflectrm_app.commands.options import add_backend_flags, backend_configs
from reflectrm import flags
from reflectrm.display import printable
from reflectrm.errors import InputError
from reflectrm.files.readers import read_pairs
from reflectrm.flags import Flag, add_config_flags
from reflectrm.files.locks import exclusive
from reflectrm.training.data import SUBSAMPLE, DataConfig
from reflectrm.training.grpo import OBJECTIVES, TrainConfig


def register(sub: argparse._SubParsersAction) -> None:
    """Add `build-data`, `train` and `train-status` to a sub-command parser."""
    _register_build_data(sub)
    _register_train(sub)
    p = sub.add_parser("train-status", help="show a training run's progress")
    p.add_argument("run_dir", type=Path, help="the run folder (train --output)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(func=cmd_train_status)


def _mix_flag(text: str) -> tuple[int, int]:
    try:
        return parse_mix(text)
    except InputError as exc:  # argparse prints it after the flag's name and exits 2
        raise argparse.ArgumentTypeError(str(exc)) from None


DATA_FLAGS = MappingProxyType({
    "mix": Flag(convert=_mix_flag, show=lambda mix: f"{mix[0]}:{mix[1]}", metavar="P:R"),
    "subsample": Flag(choices=SUBSAMPLE),
})
"""What the build-data flags add to `DataConfig`'s fields; every other flag, default and help comes from the class."""

ROLLOUT_SKIP = ("strategy", "bottom_frac", "reflection_temperature", "reflection_max_new_tokens", "skip_unanimous",
                "matched_compute_n")
"""`JudgeConfig` fields build-data has no flag for: stage 2 and the strategies play no part in rollouts."""


def _register_build_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build-data", help="roll out the judge on labelled pairs and write a training snapshot",
                       description="Build GRPO training data (PAPER.md 2): rollouts, easy-item filter, preference "
                                   "examples, one reflection pair per mixed item, the mix, extra rows, dedupe.")
    p.add_argument("--pairs", type=Path, help="JSONL of labelled pairs to roll out on")
    p.add_argument("--judgments", type=Path, help="JSONL of judgments already sampled (instead of rolling out --pairs)")
    p.add_argument("--extra", type=Path, action="append", default=[],
                   help="training rows from elsewhere (a dataset folder or JSONL, e.g. the store's hf export of "
                        "human-correction examples); repeatable; kept over generated rows on a clash")
    p.add_argument("--eval", type=Path, help="JSONL of evaluation pairs: refuse data that shares a conversation with them")
    options.add_batch_flag(p)  # pairs rolled out together
    p.add_argument("--out", type=Path, default=Path("data"), help="folder for snapshots (default ./data)")
    p.add_argument("--name", default="train", help="snapshot name prefix (default train)")
    add_config_flags(p.add_argument_group("data (DataConfig: one flag per field, defaults from the paper)"),
                     DataConfig, extra=DATA_FLAGS, skip=("judge",))
    options.add_judge_flags(p, skip=ROLLOUT_SKIP)  # the judge that rolls out: `judge`'s flags, as it spells them
    add_backend_flags(p)  # the judge that rolls out, as `judge` and `eval` name it
    p.set_defaults(func=cmd_build_data)


TRAIN_FLAGS = MappingProxyType({
    "learning_rate": Flag(names=("--lr",)),
    "vllm_mode": Flag(choices=("colocate", "server")),
    "scale_rewards": Flag(choices=("group", "batch", "none")),
    "threads": Flag(renamed_from=("--cpu-threads",), metavar="N"),  # as judge, eval, serve; "auto" needs a judge to time
})
"""What the training flags add to `TrainConfig`'s fields; every other flag, default and help comes from the class."""


def _register_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train the judge with GRPO on a data snapshot",
                       description="GRPO with TRL on a snapshot from build-data (or the store's hf export). "
                                   "Defaults are the paper's for real models; rerunning resumes.")
    p.add_argument("--data", type=Path, required=True, help="the dataset snapshot folder")
    p.add_argument("--model", help="model to train (default: the bundled demo judge)")
    p.add_argument("--output", type=Path, required=True, help="the run folder: checkpoints, final/, metrics")
    p.add_argument("--fresh", action="store_true", help="do not resume from the run folder's last checkpoint")
    p.add_argument("--detach", action="store_true", help="run in a background process; watch with train-status")
    config = p.add_argument_group("training (TrainConfig: one flag per field, defaults from the paper)")
    add_config_flags(config, TrainConfig, extra=TRAIN_FLAGS)
    # Shorthands kept from before the flags were derived; each sets part of a field above.
    config.add_argument("--max-minutes", type=float, dest="max_minutes",
                        help="--max-time-s in minutes: stop (completed, with a checkpoint) after this much training")
    config.add_argument("--objective", choices=tuple(OBJECTIVES), default=None,
                        help="set --beta and --loss-type together: 'original-grpo' (KL 0.04, per-sequence loss, "
                             "Shao et al. 2024) or 'trl' (TRL's defaults: no KL, token-level loss)")
    config.add_argument("--format-reward", type=float, default=0.0,
                        help="add the format reward to --reward-weights with this weight (default 0: none)")
    p.set_defaults(func=cmd_train)


def parse_mix(text: str) -> tuple[int, int]:
    """The preference : reflection mix of a training set, "4:1" -> (4, 1)."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise InputError(f"--mix must look like 4:1 (preference:reflection), got {text!r}") from None
    return a, b


def data_config_from_args(args: argparse.Namespace) -> DataConfig:
    """The `DataConfig` the build-data flags give (one per field; see `DATA_FLAGS`), its judge from `judge`'s flags."""
    return flags.config_from_args(DataConfig, args, extra=DATA_FLAGS, judge=options.config_from_args(args))


def cmd_build_data(args: argparse.Namespace) -> int:
    from reflectrm.training.data import build_training_set, collect_rollouts, read_examples, write_snapshot

    config = data_config_from_args(args)
    backend, engine = backend_configs(args)  # a bad model or backend flag fails before anything is read
    if args.pairs is None and args.judgments is None and not args.extra:
        raise InputError("give --pairs (labelled pairs to roll out on), --judgments, or --extra rows")
    # Every input is read and checked before the model loads and rolls out (minutes on a real judge).
    _check_out_folder(args.out)
    judgments = _read_judgments(args.judgments) if args.judgments else []
    pairs = read_pairs(args.pairs, source="") if args.pairs is not None else []
    extra = [e for path in args.extra for e in read_examples(path, origin=path.name)]
    eval_pairs = read_pairs(args.eval, source="") if args.eval else []
    with exclusive(args.out, flag="--out", folder=True):  # one build-data per snapshot folder at a time
        if args.pairs is not None:
            judge = options.load_judge(backend, engine)
            judgments += collect_rollouts(pairs, judge, config, batch_size=args.batch_size,
                                          progress=_progress_bar())
        built = build_training_set(judgments, config=config, extra=extra, eval_pairs=eval_pairs)
        snapshot = write_snapshot(built, args.out, name=args.name, extra_manifest={
            "model": backend.model or "demo", "pairs": str(args.pairs or ""), "eval": str(args.eval or ""),
            "extra": [str(p) for p in args.extra]})
    print(json.dumps({"snapshot": str(snapshot.path), "content_hash": snapshot.content_hash, "rows": snapshot.rows,
                      "report": asdict(built.report), "mix": mix_summary(built)}, indent=2))  # ASCII: escaped
    print(printable(mix_line(built)), file=sys.stderr)
    return 0


def mix_summary(built: Any) -> dict[str, Any]:
    """The mix as trained on, and the named choices that made it (`DataConfig`)."""
    r, c = built.report, built.config
    pref, refl = r.preference + r.extra_preference, r.reflection + r.extra_reflection
    return {"preference": pref, "reflection": refl, "ratio": f"{pref / refl:.2f}:1" if refl else "no reflection",
            "target": f"{c.mix[0]}:{c.mix[1]}", "subsample": c.subsample, "extra_in_mix": c.extra_in_mix,
            "unparseable_is_incorrect": c.unparseable_is_incorrect}


def mix_line(built: Any) -> str:
    """One line of counts: what was kept, what was cut and why some mixed items gave no pair."""
    r, m = built.report, mix_summary(built)
    return (f"mix {m['preference']}:{m['reflection']} ({m['ratio']}, target {m['target']}, subsample "
            f"{m['subsample']}): generated {r.preference} preference (cut {r.preference_cut}) + {r.reflection} "
            f"reflection (cut {r.reflection_cut}), extra {r.extra_preference} + {r.extra_reflection}; items "
            f"{r.items}, easy {r.easy_dropped}, mixed {r.mixed}, no distinct analyses {r.no_distinct_analyses}, "
            f"right-or-unparseable only {r.right_or_unparseable} (unparseable_is_incorrect="
            f"{m['unparseable_is_incorrect']})")


def _check_out_folder(out: Path) -> None:
    existing = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise InputError(f"--out {str(out)!r} cannot be a folder: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"--out {str(out)!r}: {str(existing)!r} is not writable")


def _read_judgments(path: Path) -> list[Any]:
    from reflectrm.core.types import Judgment

    if not path.is_file():
        raise InputError(f"judgments file {str(path)!r} does not exist: check the path")
    out = []
    for lineno, raw in enumerate(path.read_bytes().splitlines(), 1):
        if raw.strip():
            try:
                out.append(Judgment.from_dict(json.loads(raw.decode("utf-8"))))
            except (UnicodeDecodeError, RecursionError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise InputError(f"{path}:{lineno}: not a judgment line ({exc}): pass `reflectrm judge --output` lines") from exc
    return out


def _progress_bar() -> Any:
    from tqdm import tqdm

    from reflectrm.pipeline import Progress, Stage

    bar = tqdm(unit="pair", file=sys.stderr, disable=None, desc="rollouts")

    def update(event: Progress) -> None:
        if event.stage is not Stage.DECIDED:
            return
        bar.total = event.total
        bar.n = event.done
        bar.refresh()
        if event.done >= event.total:
            bar.close()

    return update


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The `TrainConfig` the training flags give (one per field), with the shorthands folded in."""
    changes: dict[str, Any] = {}
    if args.max_minutes is not None:
        changes["max_time_s"] = args.max_minutes * 60
    if args.format_reward:
        changes["reward_weights"] = {**dict(args.reward_weights), "format": args.format_reward}
    if args.objective is not None:
        changes.update(OBJECTIVES[args.objective])
    return flags.config_from_args(TrainConfig, args, extra=TRAIN_FLAGS, **changes)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainRun:
    """What `train` trains and where (its `TrainConfig` says how)."""

    data: Path  # the dataset snapshot folder
    model: str  # the model to train (the demo judge's folder when none was named)
    output: Path  # the run folder
    resume: bool = True  # from the run folder's last checkpoint (--fresh: False)
    detach: bool = False  # in a background process


def cmd_train(args: argparse.Namespace) -> int:
    from reflectrm.defaults import default_model
    from reflectrm.training.grpo import check_train_inputs
    from reflectrm.training.launch import launched

    config = config_from_args(args)
    run = TrainRun(data=args.data, model=default_model(args.model), output=args.output, resume=not args.fresh,
                   detach=args.detach)
    check_train_inputs(run.data, model=run.model, output_dir=run.output, config=config, resume=run.resume)
    if run.detach and launched().world_size > 1:  # each process of the launch would start a run of its own
        raise InputError("--detach starts one background process and cannot run under a multi-process launch "
                         "(torchrun, accelerate launch): drop --detach, and run the launcher in the background "
                         "(nohup, tmux) if needed")
    if run.detach:
        from reflectrm.training import jobs

        has_run = jobs.RunFiles(run.output).run.exists()
        job = (jobs.resume_run(run.output) if has_run and run.resume
               else jobs.start_run(run.output, data=run.data, model=run.model, config=config))
        print(printable(f"started {job.run_dir} (pid {job.process.pid if job.process else '?'}): "
                        f"watch with `reflectrm train-status {job.run_dir}`"))
        return 0
    return _train_foreground(run, config)


def _train_foreground(run: TrainRun, config: TrainConfig) -> int:
    """Train in this process; under a launcher (torchrun, accelerate) the main process (rank 0) alone shows progress
    and the result, and every other process ends with the same exit status, saying nothing."""
    from reflectrm.training.grpo import leave_process_group, train
    from reflectrm.training.launch import launched

    main = launched().main
    stop = threading.Event()
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def request_stop(signum: int, frame: Any) -> None:
        if stop.is_set():  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        if main:  # a Ctrl-C reaches every process of a launch: one says so
            print("stopping after this step (a checkpoint is saved); Ctrl-C again to stop now", file=sys.stderr)
        stop.set()

    for s in previous:
        signal.signal(s, request_stop)
    if main:
        threading.Thread(target=_print_progress, args=(run.output, stop), daemon=True).start()
    try:
        result = train(run.data, model=run.model, output_dir=run.output, config=config, resume=run.resume, stop=stop)
    finally:
        stop.set()  # ends the progress watcher too, however training ended (a refusal, a failure)
        for s, handler in previous.items():
            signal.signal(s, handler)
        leave_process_group()
    if not result.main:
        return EXIT_CANCELLED if result.state == "cancelled" else 0
    print(json.dumps({"state": result.state, "step": result.step, "ended_by": result.ended_by,
                      "processes": result.processes,
                      "final_model": str(result.final_model) if result.final_model else None,
                      "last_checkpoint": str(result.last_checkpoint) if result.last_checkpoint else None}, indent=2))
    print(printable(outcome_line(result, config)), file=sys.stderr)
    return EXIT_CANCELLED if result.state == "cancelled" else 0


EXIT_CANCELLED = 130
"""`train`'s exit status when the run was cancelled (Ctrl-C, SIGTERM, the run's cancel file, the app's Cancel):
as a shell reports a Ctrl-C, so that a script or scheduler never reads a cancelled run as a finished one."""


def outcome_line(result: Any, config: TrainConfig) -> str:
    """One line on how the run ended: cancelled (and how to resume), the time budget spent, or completed."""
    if result.state == "cancelled":
        where = f"from {result.last_checkpoint}" if result.last_checkpoint else "(no checkpoint was saved yet)"
        return f"cancelled at step {result.step}: rerun the same command to resume {where}"
    if result.ended_by == "time budget":
        return (f"completed at step {result.step}: the time budget of {config.max_time_s:g}s was spent (a planned "
                f"stop); the model is in {result.final_model}")
    return f"completed at step {result.step}: the model is in {result.final_model}"


def _print_progress(run_dir: Path, stop: threading.Event, *, every_s: float = 10.0) -> None:
    from reflectrm.training.runs import read_progress

    last = -1
    while not stop.wait(every_s):
        p = read_progress(run_dir, completions=0, log_chars=0)
        if p.step != last and p.state == "running":
            last = p.step
            print(printable(_progress_line(p)), file=sys.stderr)


def _progress_line(p: Any) -> str:
    loss = f" loss {p.loss[-1][1]:.4f}" if p.loss else ""
    reward = f" reward {p.reward[-1][1]:.3f}" if p.reward else ""
    eta = f" eta {p.eta_s:.0f}s" if p.eta_s is not None else ""
    return f"{p.state}: step {p.step}/{p.total_steps or '?'}{loss}{reward}{eta}"


def cmd_train_status(args: argparse.Namespace) -> int:
    from reflectrm.training.runs import check_run_dir, read_progress

    check_run_dir(args.run_dir)
    p = read_progress(args.run_dir)
    if args.json:
        d = {k: v for k, v in asdict(p).items() if k not in ("metrics",)}
        d["run_dir"] = str(p.run_dir)
        d["checkpoints"] = [{**asdict(c), "path": str(c.path)} for c in p.checkpoints]
        print(json.dumps(d, default=str))  # ASCII: every control and non-ASCII character escaped
        return 0
    print(printable(_progress_line(p)))  # the run folder's files are data: a state or an error can hold anything
    for c in p.checkpoints:
        print(printable(f"  {'final' if c.final else 'checkpoint'} step {c.step}: {c.path}"
                        f"{' (LoRA adapter)' if c.lora else ''}"))
    if p.error:
        print(printable(f"  error: {p.error}"))
    if p.skipped_metrics:  # a torn last line is what a killed run leaves: the rest still reads
        print(f"  note: {p.skipped_metrics} line(s) of metrics.jsonl could not be read (cut off or damaged) and are "
              "left out")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point for `python -m reflectrm_app.commands.train` (what `accelerate launch -m` runs)."""
    from reflectrm_app.commands.running import run_command

    parser = argparse.ArgumentParser(prog="reflectrm-train")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
