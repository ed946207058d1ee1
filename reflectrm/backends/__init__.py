"""Backends behind one small protocol (`Backend`), and `load_backend` to pick one by name."""

from __future__ import annotations

from typing import Any

from reflectrm.backends.base import Backend, Completion, GenerationRequest, SamplingParams
from reflectrm.backends.config import BACKENDS, BackendConfig
from reflectrm.backends.scripted import ScriptedBackend
from reflectrm.defaults import default_model
from reflectrm.errors import ConfigError


def load_backend(model: str | None = None, *, backend: str = "transformers", **kw: Any) -> Backend:
    """Load a backend for `model` (a Hugging Face id or local path; default: the bundled demo judge).

    Args:
        model: model id or path; None for the demo judge shipped with the package.
        backend: "transformers", "vllm" or "openai" (model None: the server's only model).
        **kw: passed to the backend's constructor (device, dtype, max_batch_rows, ...); for vllm/openai,
            `EngineConfig` fields (base_urls, tensor_parallel_size, ...).
    """
    if backend in ("vllm", "openai"):
        return _load_engine_backend(model, backend=backend, **kw)

    model = default_model(model)
    if backend == "transformers":
        from reflectrm.backends.transformers_backend import TransformersBackend

        return TransformersBackend.from_pretrained(model, **kw)
    raise ConfigError(f"backend {backend!r} is unknown: use one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "BackendConfig", "Completion", "GenerationRequest", "SamplingParams", "ScriptedBackend", "load_backend"]


def _load_engine_backend(model: str | None, *, backend: str, **kw: Any) -> Backend:
    """The `vllm` or `openai` backend; `kw` holds `EngineConfig` fields (others, like device, are ignored)."""
    from reflectrm.backends.engine import EngineConfig

    config = kw.pop("engine", None) or EngineConfig.from_kwargs(kw)
    if backend == "openai":
        from reflectrm.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(config.base_urls, model=model, config=config)
    from reflectrm.backends.vllm_backend import VLLMBackend

    return VLLMBackend.from_pretrained(default_model(model), config=config)
