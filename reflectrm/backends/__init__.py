"""Backends behind one small protocol (`Backend`), and `load_backend` to load the one a `BackendConfig` names."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from reflectrm.backends.base import Backend, Completion, GenerationRequest, SamplingParams
from reflectrm.backends.config import BACKENDS, BackendConfig
from reflectrm.backends.scripted import ScriptedBackend
from reflectrm.defaults import default_model
from reflectrm.backends.engine import ENGINE_BACKENDS, EngineConfig
from reflectrm.errors import ConfigError


def load_backend(config: BackendConfig | str | None = None, engine: EngineConfig | None = None,
                 **built: Any) -> Backend:
    """Load the backend `config` names (default: the bundled demo judge on transformers).

        load_backend()                                            # the demo judge
        load_backend("Qwen/Qwen3-4B")                             # a model id or path: BackendConfig(model=...)
        load_backend(BackendConfig(model="/models/judge", backend="vllm"), EngineConfig(tensor_parallel_size=2))

    Args:
        config: which model, backend, device and CPU threads (`BackendConfig`); a string is its model.
        engine: the vllm/openai backend's options (`EngineConfig`; None: its defaults).
        **built: for transformers, passed to its constructor (dtype, max_batch_rows, ...).
    """
    config = BackendConfig(model=config) if isinstance(config, str) or config is None else config
    restated = sorted(set(built) & {f.name for f in fields(BackendConfig)})
    if restated:
        raise ConfigError(f"load_backend({restated[0]}=...) restates a BackendConfig field: pass "
                          f"BackendConfig({restated[0]}=...) as its first argument")
    if config.backend in ENGINE_BACKENDS:
        if built:
            raise ConfigError(f"load_backend({sorted(built)[0]}=...) is not an option of --backend {config.backend}: "
                              "pass an EngineConfig")
        return _load_engine_backend(config, engine or EngineConfig())
    if engine is not None:
        raise ConfigError("an EngineConfig sets the vllm and openai backends: drop it, or pick one of them")
    from reflectrm.backends.transformers_backend import TransformersBackend

    return TransformersBackend.from_pretrained(default_model(config.model), device=config.device,
                                               **{**config.load_options(), **built})


__all__ = ["BACKENDS", "Backend", "BackendConfig", "Completion", "EngineConfig", "GenerationRequest", "SamplingParams", "ScriptedBackend", "load_backend"]


def _load_engine_backend(config: BackendConfig, engine: EngineConfig) -> Backend:
    """The `vllm` or `openai` backend under `engine`'s options."""
    if config.backend == "openai":
        from reflectrm.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(engine.base_urls, model=config.model, config=engine)
    from reflectrm.backends.vllm_backend import VLLMBackend

    return VLLMBackend.from_pretrained(default_model(config.model), config=engine)
