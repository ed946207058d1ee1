"""Backends behind one small protocol (`Backend`), and `load_backend` to pick one by name."""

from __future__ import annotations

from typing import Any

from reflectrm.backends.base import Backend, Completion, GenerationRequest, SamplingParams
from reflectrm.backends.scripted import ScriptedBackend
from reflectrm.defaults import default_model
from reflectrm.errors import ConfigError

BACKENDS = ("transformers",)


def load_backend(model: str | None = None, *, backend: str = "transformers", **kw: Any) -> Backend:
    """Load a backend for `model` (a Hugging Face id or local path; default: the bundled demo judge).

    Args:
        model: model id or path; None for the demo judge shipped with the package.
        backend: "transformers".
        **kw: passed to the backend's constructor (device, dtype, max_batch_rows, ...).
    """
    model = default_model(model)
    if backend == "transformers":
        from reflectrm.backends.transformers_backend import TransformersBackend

        return TransformersBackend.from_pretrained(model, **kw)
    raise ConfigError(f"backend {backend!r} is unknown: use one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "Completion", "GenerationRequest", "SamplingParams", "ScriptedBackend", "load_backend"]
