"""Hostile inputs, third round: the failures of the libraries underneath (transformers, peft, TRL, torch, safetensors).

    the model folder   config, tokenizer files and weights checked before a judge loads: a folder without tokenizer
                       files loaded an empty tokenizer and crashed in generation; damaged weights were a traceback
    the device         --device cuda on a CPU build was "Torch not compiled with CUDA enabled" (an uncaught exception
                       in the app's loading thread); now one line naming the devices this machine has
    training options   bounded where parsed (a negative warm-up, a LoRA dropout of 2, a group of 100,000 that grew
                       until the OOM killer), target modules checked against the model's own before a run starts
    run files          a torn or damaged metrics.jsonl / status.json reads (the rest of the run shows, with a note);
                       a damaged checkpoint is named, with what to do, before a resume touches anything

Refusals: exit 2, one line on stderr, no traceback, every file as it was. The in-process cases replace model loading
and training by a function that fails the test: each refusal must come before any model work.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from reflectrm.defaults import DEMO_MODEL_DIR
from reflectrm_app.cli import main
from tests.hostile import assert_one_line_refusal, copy_world, snapshot

ROOT = Path(__file__).resolve().parents[1]
ONE = ["--query", "What is 2 + 2?", "--response-1", "4", "--response-2", "5"]
TRAIN = ["train", "--data", "{w}/data", "--output", "{w}/r"]
GOOD_STATE = {"global_step": 2, "log_history": [{"step": 1, "loss": 0.5}]}


def _damage(remove: tuple[str, ...] = (), write: dict[str, bytes] | None = None) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        for name in remove:
            (folder / name).unlink()
        for name, data in (write or {}).items():
            (folder / name).write_bytes(data)
    return apply


def _truncate(name: str, size: int) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        with (folder / name).open("r+b") as fh:
            fh.truncate(size)
    return apply


MODELS: dict[str, Callable[[Path], None]] = {
    "no-tokenizer": _damage(remove=("tokenizer.json", "tokenizer_config.json")),  # loaded empty, crashed generating
    "no-tokenizer-json": _damage(remove=("tokenizer.json",)),  # a config without a vocabulary
    "no-config": _damage(remove=("config.json",)),
    "config-torn": _damage(write={"config.json": b'{"model_type": "qwen3", "hidden_'}),
    "config-list": _damage(write={"config.json": b"[1, 2]"}),
    "config-no-type": _damage(write={"config.json": b"{}"}),
    "config-latin1": _damage(write={"config.json": '{"model_type": "caf\u00e9"}'.encode("latin-1")}),
    "no-weights": _damage(remove=("model.safetensors",)),
    "weights-truncated": _truncate("model.safetensors", 1000),  # SafetensorError: invalid header length
    "weights-garbage": _damage(write={"model.safetensors": bytes(range(256)) * 200}),  # header too large
    "no-chat-template": _damage(remove=("chat_template.jinja",)),  # ValueError at the first judgment
}


def _run_folder(root: Path, *, state: bytes = json.dumps(GOOD_STATE).encode(), status: bytes | None = None,
                metrics: bytes = b"", run: bytes | None = None) -> None:
    """A run folder as `train` leaves it after two steps (a checkpoint at step 2), with the given files."""
    (root / "checkpoint-2").mkdir(parents=True)
    (root / "checkpoint-2" / "trainer_state.json").write_bytes(state)
    shutil.copy(DEMO_MODEL_DIR / "config.json", root / "checkpoint-2" / "config.json")
    (root / "run.json").write_bytes(run if run is not None else json.dumps(
        {"data": str(root.parent / "data"), "model": str(DEMO_MODEL_DIR), "config": {}}).encode())
    (root / "status.json").write_bytes(status if status is not None else json.dumps(
        {"state": "failed", "step": 2, "total_steps": 4, "error": "boom"}).encode())
    (root / "metrics.jsonl").write_bytes(
        b'{"step": 1, "loss": 0.5, "reward": 0.25}\n{"step": 2, "loss": 0.4, "reward": 0.5}\n' + metrics)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("libraries") / "world"
    root.mkdir()
    (root / "pairs.jsonl").write_text(json.dumps({"id": "p1", "query": "2 + 2?", "response_1": "4",
                                                  "response_2": "5", "label": 1}) + "\n")
    (root / "data").mkdir()
    (root / "notes.txt").write_text("not a model\n")
    for name, damage in MODELS.items():
        shutil.copytree(DEMO_MODEL_DIR, root / name)
        damage(root / name)
    for name, state in {"state-torn": b'{"global_step": 2, "log_hist', "state-list": b"[2]",
                        "state-step-text": b'{"global_step": "two"}', "state-binary": bytes(range(256)),
                        "state-history-number": b'{"global_step": 2, "log_history": 5}'}.items():
        _run_folder(root / name, state=state)
    _run_folder(root / "run-json-torn", run=b'{"data": "da')
    _run_folder(root / "run-json-list", run=b"[]")
    return root


@pytest.fixture
def world(template: Path, tmp_path: Path) -> Path:
    return copy_world(template, tmp_path)


def _fill(args: list[str], root: Path) -> list[str]:
    return [a.replace("{w}", str(root)) for a in args]


def _has(device: str) -> bool:
    from reflectrm.backends.preflight import available_devices

    kind = device.split(":")[0]
    return any(d == device or (":" not in device and d.split(":")[0] == kind) for d in available_devices())


# --- refused before any model work, in one line ------------------------------------------------------------------

CASES = [
    # the model folder: each missing or damaged piece named, before minutes of loading
    pytest.param(["judge", *ONE, "--model", "{w}/no-tokenizer"], "has no tokenizer files", id="judge-no-tokenizer"),
    pytest.param(["judge", *ONE, "--model", "{w}/no-tokenizer-json"], "has no tokenizer files",
                 id="judge-tokenizer-config-without-vocabulary"),
    pytest.param(["judge", *ONE, "--model", "{w}/no-config"], "has no config.json", id="judge-no-config"),
    pytest.param(["judge", *ONE, "--model", "{w}/config-torn"], "config.json is damaged", id="judge-config-torn"),
    pytest.param(["judge", *ONE, "--model", "{w}/config-list"], "config.json is damaged", id="judge-config-list"),
    pytest.param(["judge", *ONE, "--model", "{w}/config-no-type"], "names no model_type", id="judge-config-no-type"),
    pytest.param(["judge", *ONE, "--model", "{w}/config-latin1"], "config.json is damaged",
                 id="judge-config-not-utf8"),
    pytest.param(["judge", *ONE, "--model", "{w}/no-weights"], r"has no weights \(\*.safetensors",
                 id="judge-no-weights"),
    pytest.param(["judge", *ONE, "--model", "{w}/notes.txt"], "is a file, not a model folder", id="judge-model-file"),
    pytest.param(["eval", "--benchmark", "demo", "--model", "{w}/no-tokenizer"], "has no tokenizer files",
                 id="eval-no-tokenizer"),
    pytest.param(["serve", "--model", "{w}/no-config"], "has no config.json", id="serve-no-config"),
    pytest.param(["build-data", "--pairs", "{w}/pairs.jsonl", "--out", "{w}/d", "--model", "{w}/no-weights"],
                 "has no weights", id="build-data-no-weights"),
    pytest.param([*TRAIN, "--model", "{w}/no-tokenizer"], "has no tokenizer files", id="train-no-tokenizer"),
    pytest.param(["app", "--port", "0", "--db", "{w}/app.db", "--model", "{w}/no-config"], "has no config.json",
                 id="app-no-config"),
    # the device: its spelling when parsed, and whether this machine has it before loading
    pytest.param(["judge", *ONE, "--device", "gpu"], "'gpu' is not a device: use auto, cpu, cuda", id="judge-gpu"),
    pytest.param(["judge", *ONE, "--device", "cuda:x"], "is not a device", id="judge-cuda-x"),
    pytest.param(["judge", *ONE, "--device", "cuda"], "this machine has no such device", id="judge-cuda"),
    pytest.param(["judge", *ONE, "--device", "cuda:999"], "this machine has no such device", id="judge-cuda-999"),
    pytest.param(["judge", *ONE, "--device", "mps"], "this machine has no such device", id="judge-mps"),
    pytest.param(["eval", "--benchmark", "demo", "--device", "xpu:999"], "no such device", id="eval-xpu-999"),
    pytest.param(["serve", "--device", "cuda:999"], "no such device", id="serve-cuda-999"),
    pytest.param([*TRAIN, "--device", "cuda:999"], "--device cuda:999: this machine has no such device",
                 id="train-cuda-999"),
    pytest.param(["app", "--port", "0", "--db", "{w}/app.db", "--device", "cuda:999"], "no such device",
                 id="app-cuda-999"),
    # training options TRL, transformers and peft took unchecked
    pytest.param([*TRAIN, "--warmup-steps", "-1"], "warmup_steps must be a finite number >= 0", id="warmup-negative"),
    pytest.param([*TRAIN, "--warmup-steps", "nan"], "warmup_steps must be", id="warmup-nan"),
    pytest.param([*TRAIN, "--warmup-steps", "2.5"], "a whole number of steps, or a share", id="warmup-fractional"),
    pytest.param([*TRAIN, "--warmup-steps", "50", "--max-steps", "10"], "longer than the run",
                 id="warmup-longer-than-run"),
    pytest.param([*TRAIN, "--lora", "--lora-dropout", "2"], "lora_dropout must be a share from 0", id="dropout-2"),
    pytest.param([*TRAIN, "--lora", "--lora-dropout", "1"], "lora_dropout must be", id="dropout-1"),
    pytest.param([*TRAIN, "--lora", "--lora-r", "100000"], "lora_r must be a whole number from 1 to 1,024",
                 id="lora-r-huge"),
    pytest.param([*TRAIN, "--lora", "--lora-target-modules", "q_proj,attn_qkv"],
                 "names 'attn_qkv', which model .* lacks: use .*q_proj", id="lora-target-the-model-lacks"),
    pytest.param([*TRAIN, "--lora", "--lora-target-modules", "mlp"], "names 'mlp', which model",
                 id="lora-target-a-container"),  # a module, but not one LoRA can adapt (peft's ValueError)
    pytest.param([*TRAIN, "--lora", "--lora-target-modules", ","], "must name one or more modules",
                 id="lora-target-nothing"),
    pytest.param([*TRAIN, "--num-generations", "100000"], "num_generations must be a whole number from 2 to 64",
                 id="group-100000"),
    pytest.param([*TRAIN, "--lr", "nan"], "learning_rate must be a finite number", id="lr-nan"),
    pytest.param([*TRAIN, "--lr", "inf"], "learning_rate must be a finite number", id="lr-inf"),
    pytest.param([*TRAIN, "--temperature", "inf"], "temperature must be a finite number", id="temperature-inf"),
    pytest.param([*TRAIN, "--max-steps", str(10**12)], "max_steps must be a whole number from 1 to 1,000,000,000",
                 id="max-steps-trillion"),
    pytest.param([*TRAIN, "--max-completion-length", str(10**9)], "max_completion_length must be",
                 id="completion-billion-tokens"),
    pytest.param([*TRAIN, "--weight-decay", "-1"], "weight_decay must be", id="weight-decay-negative"),
    pytest.param([*TRAIN, "--max-grad-norm", "nan"], "max_grad_norm must be", id="grad-norm-nan"),
    pytest.param([*TRAIN, "--save-total-limit", "0"], "save_total_limit must be", id="keep-no-checkpoint"),
    pytest.param([*TRAIN, "--epochs", "inf"], "epochs must be", id="epochs-inf"),
    pytest.param([*TRAIN, "--vllm-gpu-memory-utilization", "1.5"], "vllm_gpu_memory_utilization must be",
                 id="vllm-share-above-1"),
    # TRL's ValueError after the model loaded: checked with the other inputs now
    pytest.param([*TRAIN, "--batch-size", "3", "--num-generations", "2", "--per-device-batch-size", "4"],
                 "change per_device_batch_size or batch_size", id="passes-do-not-divide-a-step"),
    # a damaged checkpoint: named, with what to do, before the run folder is written
    *[pytest.param(["train", "--data", "{w}/data", "--output", f"{{w}}/{name}"],
                   f"cannot resume from .*{name}/checkpoint-2: its trainer_state.json {why}.*--fresh", id=name)
      for name, why in [("state-torn", "is not valid JSON"), ("state-list", "is not a JSON object"),
                        ("state-step-text", "has no step count"), ("state-binary", "is not valid JSON"),
                        ("state-history-number", "has a log_history that is not a list")]],
    pytest.param(["train", "--data", "{w}/data", "--output", "{w}/run-json-torn", "--detach"], "run.json is damaged",
                 id="detached-resume-run-json-torn"),
    pytest.param(["train", "--data", "{w}/data", "--output", "{w}/run-json-list", "--detach"], "run.json is damaged",
                 id="detached-resume-run-json-list"),
]


@pytest.fixture
def no_model_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model, training or starting a worker fails the test: every refusal must come before them."""
    import reflectrm.backends
    import reflectrm.training.grpo
    import reflectrm.training.jobs
    import reflectrm_app.ui.blocks

    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("model work was reached before the input was refused")

    monkeypatch.setattr(reflectrm.backends, "load_backend", reached)
    monkeypatch.setattr(reflectrm.training.grpo, "_train", reached)
    monkeypatch.setattr(reflectrm.training.jobs, "_launch", reached)
    monkeypatch.setattr(reflectrm_app.ui.blocks, "build_app", reached)


@pytest.mark.parametrize(("args", "expected"), CASES)
def test_a_library_failure_is_one_line_before_any_model_work(
    args: list[str], expected: str, world: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    no_model_work: None,
) -> None:
    import re

    device = args[args.index("--device") + 1] if "--device" in args else None
    if device and "no such device" in expected and _has(device):  # cuda:999 is missing everywhere; cuda, mps not
        pytest.skip(f"this machine has {device}")
    monkeypatch.chdir(world)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = snapshot(world)
    try:
        code = main(_fill(args, world))
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert_one_line_refusal(code, err, expected)
    assert snapshot(world) == before  # nothing changed, nothing created


def test_a_device_setting_the_app_reads_from_the_environment_is_one_line(
        world: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_model_work: None) -> None:
    monkeypatch.chdir(world)
    monkeypatch.setenv("REFLECTRM_DEVICE", "gpu")
    before = snapshot(world)
    assert main(["app", "--port", "0", "--db", str(world / "app.db")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "REFLECTRM_DEVICE" in err and "'gpu' is not a device" in err, err
    assert snapshot(world) == before


# --- found only by loading: one line from a real process -----------------------------------------------------------


@pytest.mark.parametrize(("model", "expected"), [
    # the header of a cut-off or overwritten .safetensors file: SafetensorError's traceback
    pytest.param("weights-truncated", "cannot load model .*SafetensorError.*copy the model folder again",
                 id="weights-truncated"),
    pytest.param("weights-garbage", "cannot load model .*SafetensorError", id="weights-garbage"),
    # the tokenizer loads without a template: apply_chat_template's ValueError at the first judgment
    pytest.param("no-chat-template", "has no chat template", id="no-chat-template"),
])
def test_a_model_that_fails_to_load_is_one_line_in_a_real_process(model: str, expected: str, world: Path) -> None:
    import re

    before = snapshot(world)
    done = subprocess.run([sys.executable, "-m", "reflectrm_app.cli", "judge", *ONE, "--model", str(world / model)],
                          capture_output=True, text=True, cwd=world, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: "), done.stderr[-2000:]
    assert re.search(expected, done.stderr), done.stderr
    assert snapshot(world) == before


def test_the_apps_loading_thread_reports_a_damaged_model_in_the_header(world: Path) -> None:
    """The app loads its judge in a background thread: a damaged model is the header's one line, not an uncaught
    thread exception (`threading.excepthook`), and the first judgment meets the same error."""
    from reflectrm.backends import BackendConfig, load_backend
    from reflectrm.errors import BackendError
    from reflectrm_app.resources import ModelHolder

    uncaught: list[BaseException | None] = []
    previous, threading.excepthook = threading.excepthook, lambda args: uncaught.append(args.exc_value)
    try:
        holder = ModelHolder(lambda: load_backend(BackendConfig(model=str(world / "weights-truncated"), device="cpu")), name="damaged")
        holder.warm_up().join()
    finally:
        threading.excepthook = previous
    assert uncaught == []
    assert "cannot load model" in holder.error and "\n" not in holder.error
    with pytest.raises(BackendError, match="cannot load model"):
        holder.get()


# --- run files a watcher reads: what is damaged is left out, the rest still shows ----------------------------------


@pytest.mark.parametrize(("files", "state", "step", "skipped"), [
    # a killed run's last line, cut off mid-write: the steps before it still show
    pytest.param({"metrics": b'{"step": 3, "lo'}, "failed", 2, 1, id="metrics-torn-last-line"),
    pytest.param({"metrics": bytes(range(128, 256)) + b"\n"}, "failed", 2, 1, id="metrics-binary-line"),
    pytest.param({"metrics": b'[1, 2]\n"x"\n7\n'}, "failed", 2, 3, id="metrics-not-objects"),
    # rows whose step is not a count: not plotted, never int()-ed into a traceback
    pytest.param({"metrics": b'{"step": "abc", "loss": 1}\n{"step": 1e400}\n{"step": null}\n{"step": -4}\n'},
                 "failed", 2, 0, id="metrics-steps-not-counts"),
    pytest.param({"metrics": b"x" * (3 << 20) + b"\n"}, "failed", 2, 1, id="metrics-3mb-line"),
    # status.json damaged: the run reads as interrupted (its process unknown), its metrics still show
    pytest.param({"status": b"[1, 2]"}, "interrupted", 0, 0, id="status-list"),
    pytest.param({"status": bytes(range(256))}, "interrupted", 0, 0, id="status-binary"),
    pytest.param({"status": b'{"state": 5, "step": "two", "pid": 1e30, "started_unix": "x"}'}, "interrupted", 0, 0,
                 id="status-wrong-types"),
    pytest.param({"status": b'{"state": "running", "pid": 99999999999999999999, "step": 2}'}, "interrupted", 2, 0,
                 id="status-pid-past-any-process"),  # os.kill's OverflowError
])
def test_train_status_reads_a_damaged_run_folder(files: dict[str, bytes], state: str, step: int, skipped: int,
                                                 tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    _run_folder(run, **files)
    before = snapshot(tmp_path)
    assert main(["train-status", str(run), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["state"], shown["step"], shown["skipped_metrics"]) == (state, step, skipped)
    assert shown["loss"] == [[1, 0.5], [2, 0.4]]  # the readable lines, as written
    assert main(["train-status", str(run)]) == 0
    out = capsys.readouterr().out
    assert ("could not be read" in out) == bool(skipped)
    assert snapshot(tmp_path) == before  # a watcher writes nothing


def test_a_run_file_line_past_the_bound_is_never_held_whole(tmp_path: Path) -> None:
    """A metrics file of one 64 MiB line without a newline: read a block at a time, skipped, counted."""
    import tracemalloc

    from reflectrm.training.runs import MAX_LINE_BYTES, read_rows

    path = tmp_path / "metrics.jsonl"
    with path.open("wb") as fh:
        fh.write(b'{"step": 1, "loss": 0.5}\n')
        for _ in range(64):
            fh.write(b"y" * (1 << 20))
    tracemalloc.start()
    try:
        rows = read_rows(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (rows.rows, rows.skipped) == ([{"step": 1, "loss": 0.5}], 1)
    assert peak < 8 * MAX_LINE_BYTES  # a few blocks, never the 64 MiB line
