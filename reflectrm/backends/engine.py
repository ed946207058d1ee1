"""Settings of the serving engines (`vllm`, `openai`), and the error a stopped generation raises.

One frozen dataclass holds every engine option; the CLI derives its flags from it
(`reflectrm_app.commands.options.add_engine_flags`), so a flag, its default and its check live here only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from reflectrm.backends.fleet import ROUTINGS
from reflectrm.errors import ConfigError

ENGINE_BACKENDS = ("vllm", "openai")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Options of the vLLM engine (in process) and of the OpenAI-compatible HTTP backend."""

    # --- vLLM in process -------------------------------------------------------------------------
    dtype: str = "auto"  # auto, bfloat16, float16, float32 (CPUs without AVX512-BF16/AMX: float32)
    gpu_memory_utilization: float = 0.9  # share of each GPU's memory vLLM may take (weights + KV cache)
    max_model_len: int | None = None  # context length; None = the model's own (lower it when the KV cache is short)
    tensor_parallel_size: int = 1  # GPUs one model is split across (within a node)
    data_parallel_size: int = 1  # model replicas; > 1 runs as `vllm serve --data-parallel-size` (use --backend openai)
    enforce_eager: bool = False  # no CUDA graphs / compilation: faster start, slower decode
    kv_cache_gib: float | None = None  # KV-cache size in GiB; None = vLLM's own sizing (CPU: VLLM_CPU_KVCACHE_SPACE)
    # --- OpenAI-compatible servers --------------------------------------------------------------
    base_urls: tuple[str, ...] = ()  # http://host:port/v1 of each server; requests are spread over them
    api_key_env: str = "REFLECTRM_OPENAI_API_KEY"  # env var holding the bearer key (then OPENAI_API_KEY)
    max_concurrency: int = 16  # requests in flight per server
    timeout_s: float = 300.0  # one HTTP request, connect to last byte
    max_retries: int = 4  # further tries after a connection error, timeout or HTTP 5xx (backoff with jitter)
    routing: str = "least-loaded"  # least-loaded: each request to the server with the fewest in flight; or round-robin
    cooldown_s: float = 10.0  # a server that fails gets no requests this long, then a probe (GET /health)
    cooldown_max_s: float = 120.0  # the cool-down doubles per failure in a row, up to this

    def __post_init__(self) -> None:
        if self.dtype not in ("auto", "bfloat16", "bf16", "float16", "fp16", "float32", "fp32"):
            raise ConfigError(f"dtype {self.dtype!r} is unknown: use auto, bfloat16, float16 or float32")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        for name in ("tensor_parallel_size", "data_parallel_size", "max_concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_model_len is not None and self.max_model_len < 16:
            raise ConfigError(f"max_model_len must be >= 16 tokens, got {self.max_model_len}")
        if self.kv_cache_gib is not None and not (math.isfinite(self.kv_cache_gib) and self.kv_cache_gib > 0):
            raise ConfigError(f"kv_cache_gib must be a positive number of GiB, got {self.kv_cache_gib}")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ConfigError(f"timeout_s must be a positive number of seconds, got {self.timeout_s}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.routing not in ROUTINGS:
            raise ConfigError(f"routing {self.routing!r} is unknown: use {' or '.join(ROUTINGS)}")
        if not (self.cooldown_s > 0 and math.isfinite(self.cooldown_s)):
            raise ConfigError(f"cooldown_s must be a positive number of seconds, got {self.cooldown_s}")
        if not (math.isfinite(self.cooldown_max_s) and self.cooldown_max_s >= self.cooldown_s):
            raise ConfigError(f"cooldown_max_s must be a number of seconds >= cooldown_s ({self.cooldown_s:g}), "
                              f"got {self.cooldown_max_s}: raise --cooldown-max-s or lower --cooldown-s")
        for url in self.base_urls:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"base URL {url!r} must start with http:// or https:// (e.g. http://127.0.0.1:8000/v1)")

    @property
    def vllm_dtype(self) -> str:
        return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(self.dtype, self.dtype)

    @classmethod
    def from_kwargs(cls, kw: dict[str, Any]) -> EngineConfig:
        """An `EngineConfig` from the keyword arguments of `load_backend` that name its fields (popped)."""
        names = {f.name for f in fields(cls)}
        given = {k: kw.pop(k) for k in list(kw) if k in names}
        if "base_urls" in given:
            given["base_urls"] = tuple(given["base_urls"])  # a list after a JSON round trip
        return cls(**given)
