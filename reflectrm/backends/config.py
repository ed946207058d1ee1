"""`BackendConfig`: which judge model runs, on which backend and device, with how many CPU threads.

Every command that loads a judge (`judge`, `eval`, `serve`, `app`, `build-data`) takes these four options
from this one class (`reflectrm_app.commands.options.add_backend_flags`), and the app's generation settings are this class
(`REFLECTRM_MODEL`, `REFLECTRM_BACKEND`, `REFLECTRM_DEVICE`, `REFLECTRM_THREADS`), so a setting's spelling,
default and check live here only.

    backend = load_backend(BackendConfig(model="/models/judge", backend="vllm"), EngineConfig(max_model_len=8192))
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Literal

from reflectrm.backends.preflight import check_device_available, check_device_name, check_model_folder
from reflectrm.defaults import check_threads, default_model, default_threads
from reflectrm.errors import ConfigError

BACKENDS = ("transformers", "vllm", "openai")
"""The generation backends `load_backend` knows."""


def thread_count(text: str) -> int | str:
    """An argparse type: a torch CPU thread count (1 up to the usable CPUs), or "auto"."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a thread count: give a number of at least 1, or auto")
    try:
        return check_threads(count, name="--threads")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


DEFAULT_THREADS = "1 for the bundled demo judge on a CPU unless OMP_NUM_THREADS is set, torch's setting otherwise"
"""What `threads=None` means (`reflectrm.defaults.default_threads`), as `--help` says it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendConfig:
    """The judge model and where it runs. Engine options of vllm/openai are `EngineConfig`'s."""

    # None: the bundled demo judge (`reflectrm.defaults.DEMO_MODEL_DIR`)
    model: str | None = field(default=None, metadata={"help": "Hugging Face id or local path"})
    backend: str = "transformers"  # generation backend: transformers, vllm or openai
    device: str = "auto"  # transformers backend: cpu, cuda, cuda:1 ... (auto: cuda when available)
    # None: DEFAULT_THREADS (`reflectrm.defaults.default_threads`)
    threads: int | Literal["auto"] | None = field(default=None, metadata={"parse": thread_count, "help": (
        "transformers backend: torch CPU threads while generating, or auto (times one thread against torch's count "
        "and keeps the faster)")})

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend {self.backend!r} is unknown: use one of {', '.join(BACKENDS)}")
        check_device_name(self.device, name="device")
        if self.threads is not None and self.threads != "auto":
            check_threads(self.threads, name="threads")
        if self.threads is not None and self.backend != "transformers":
            raise ConfigError(f"--threads sets the transformers backend's CPU threads; --backend {self.backend} "
                              "runs its own: drop --threads")

    def check_ready(self) -> None:
        """Refuse, before anything loads, a local model folder that lacks a file and a device this machine lacks.

        The transformers backend checks a device other than auto or cpu (importing torch for it); the vllm backend
        checks the folder only (it picks its own device); an openai server's model is the server's business."""
        if self.backend == "openai":
            return
        check_model_folder(default_model(self.model))
        if self.backend == "transformers":
            check_device_available(self.device)

    def fixed_threads(self) -> int | None:
        """A whole thread count for work that cannot time "auto" (the Train tab's worker): `threads` when it is a
        number, else `DEFAULT_THREADS`' rule (None: torch's own setting)."""
        if isinstance(self.threads, int):
            return self.threads
        return default_threads(self.model, self.device) if self.backend == "transformers" else None

    def load_options(self) -> dict[str, Any]:
        """`load_backend`'s `threads` for the transformers backend ({} when torch keeps its own setting)."""
        if self.backend != "transformers":
            return {}
        threads = self.threads if self.threads is not None else default_threads(self.model, self.device)
        return {} if threads is None else {"threads": threads}
