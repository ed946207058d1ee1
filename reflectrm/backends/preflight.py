"""Checks made before a model loads: the model folder holds what a loader needs, and the device exists.

A loader that meets a folder without tokenizer files, or a device the torch build lacks, fails late and
with a traceback (a tokenizer that loads empty and crashes in generation; "Torch not compiled with CUDA
enabled"); these say what is missing and the fix in one line, before minutes of loading.

    check_device_name("cuda:1")          # the spelling, no torch: ConfigError for "gpu"
    check_device_available("cuda:1")     # this machine has it: DeviceError naming what it has
    check_model_folder("/models/judge")  # config, tokenizer and weights are there: ModelFolderError naming what is not

`check_device_name` and `check_model_folder` need only the standard library; `check_device_available`
imports torch, and only for a device other than auto or cpu.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from reflectrm.errors import ConfigError, DeviceError, ModelFolderError

DEVICE_PATTERN = re.compile(r"^(auto|cpu|(cuda|xpu)(:\d{1,4})?|mps)$")
"""The devices a judge may name: auto (CUDA when there is one), cpu, cuda[:N], xpu[:N], mps."""
DEVICE_HELP = "auto, cpu, cuda, cuda:N, mps or xpu"

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model")
"""Any one of these holds a tokenizer's vocabulary (tokenizer_config.json alone holds none: a folder with it and
no vocabulary loaded an empty tokenizer that crashed in generation)."""
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.pt", "*.gguf")
ADAPTER_CONFIG = "adapter_config.json"  # a LoRA checkpoint: its base model's config is found through this file
FOLDER_FIX = "pass --model a folder saved with save_pretrained (a training run's final/ or checkpoint-N/) or a Hugging Face id"


def check_device_name(device: object, *, name: str = "device") -> str:
    """`device` if it is spelled as a device (`DEVICE_PATTERN`), else a `ConfigError` naming the choices."""
    if not isinstance(device, str) or not DEVICE_PATTERN.match(device):
        shown = repr(device) if len(repr(device)) <= 40 else f"{repr(device)[:30]}..."
        raise ConfigError(f"{name} {shown} is not a device: use {DEVICE_HELP}")
    return device


def available_devices() -> list[str]:
    """The devices this machine's torch build can use: always cpu, then cuda:N, mps, xpu:N."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        found += [f"xpu:{i}" for i in range(xpu.device_count())]
    return found


def check_device_available(device: str, *, name: str = "--device") -> None:
    """Refuse (`DeviceError`) a device this machine or its torch build lacks, naming the devices it has."""
    check_device_name(device, name=name)
    if device in ("auto", "cpu"):
        return
    have = available_devices()
    kind, _, index = device.partition(":")
    if device in have or (not index and any(d.split(":")[0] == kind for d in have)):
        return
    import torch

    build = " (a CPU-only build)" if kind == "cuda" and torch.version.cuda is None and getattr(
        torch.version, "hip", None) is None else ""
    raise DeviceError(f"{name} {device}: this machine has no such device; torch {torch.__version__}{build} "
                       f"sees {', '.join(have)}: use one of those, or --device auto")


def check_model_folder(model: str) -> None:
    """Refuse (`ModelFolderError`) a local model folder that lacks its config, tokenizer or weights; a Hub id passes.

    A path that does not exist is refused too when it can only be a path (it starts with . / ~ or has more
    than one slash); anything else is left to the loader as a Hugging Face id.
    """
    folder = Path(model).expanduser()
    if not folder.is_dir():
        if model.startswith((".", "/", "~")) or model.count("/") > 1 or folder.exists():
            what = "is a file, not a model folder" if folder.exists() else "does not exist"
            raise ModelFolderError(f"model path {model!r} {what}: {FOLDER_FIX}")
        return
    adapter = (folder / ADAPTER_CONFIG).is_file()
    if not adapter:
        _check_config(folder, model)
    missing = [what for what, present in (
        ("tokenizer files (tokenizer.json, or a vocabulary such as vocab.json or tokenizer.model)",
         any((folder / f).is_file() for f in TOKENIZER_FILES)),
        ("weights (*.safetensors or *.bin)", any(next(folder.glob(p), None) for p in WEIGHT_PATTERNS)),
    ) if not present]
    if missing:
        raise ModelFolderError(f"model folder {model!r} has no {' and no '.join(missing)}: {FOLDER_FIX}")


def _check_config(folder: Path, model: str) -> None:
    config = folder / "config.json"
    if not config.is_file():
        raise ModelFolderError(f"model folder {model!r} has no config.json: {FOLDER_FIX}")
    try:
        data = json.loads(config.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise ModelFolderError(f"model folder {model!r}: its config.json is damaged (not a JSON object): copy the model "
                           f"folder again, or {FOLDER_FIX}")
    if not isinstance(data.get("model_type"), str):
        raise ModelFolderError(f"model folder {model!r}: its config.json names no model_type: copy the model folder again, "
                           f"or {FOLDER_FIX}")
