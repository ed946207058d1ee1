"""What makes the transformers backend's decode loop cheap at real shapes on a CPU.

At a Qwen3-0.6B shape (28 layers, 8 KV heads, 16 query heads, head_dim 128), two costs besides the weight
matrix products dominated every decode step (`bench/judge_speed.py --engines` prints where the time goes):

* grouped-query attention with a padding mask: transformers' `sdpa` attention cannot pass `enable_gqa` when a
  mask is given (CUDA's kernels would fall back to the math path), so it copies every layer's K and V to the
  query head count first (`repeat_kv`): 2 x [32, 16, ~180, 128] floats per layer per step, several times
  the cost of the same attention with `enable_gqa=True` (identical output), and most of the step;
* `DynamicCache` grows by `torch.cat`, copying the whole cache every step, with a fresh large allocation
  each time (page faults: as much system time as user time).

`gqa_attention` is `sdpa` attention that passes `enable_gqa=True` on CPU (and is `sdpa` itself anywhere
else); `GrowingLayer` is a cache layer that writes new keys and values into a buffer with room to spare, so a
step copies one position, not the whole cache.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

GQA_ATTENTION = "reflectrm_gqa_sdpa"


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AMX or AVX512-BF16), where bf16 pays; Linux only.

    Without either, bf16 matrix products are emulated, many times slower than fp32 (training steps under
    bf16 autocast included)."""
    info = _cpuinfo()
    return info is not None and (_has_flag(info, "amx_bf16") or _has_flag(info, "avx512_bf16"))


def _cpuinfo() -> str | None:
    """/proc/cpuinfo's text (None where there is none: not Linux)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return None


def _has_flag(info: str, flag: str) -> bool:
    return re.search(rf"\b{flag}\b", info) is not None


def cpu_kind() -> str:
    """This CPU as a build record names it: its model and how it multiplies bf16, e.g. "AMD EPYC, AVX512-BF16
    without AMX" (bf16 autocast's bits follow the kernels the CPU has, so a replay record needs it)."""
    info = _cpuinfo()
    if info is None:
        return "unknown CPU (no /proc/cpuinfo)"
    model = re.search(r"^model name\s*:\s*(.+)$", info, flags=re.M)
    amx, avx = _has_flag(info, "amx_bf16"), _has_flag(info, "avx512_bf16")
    bf16 = ("AMX and AVX512-BF16" if amx and avx else "AMX" if amx else "AVX512-BF16 without AMX" if avx
            else "no bf16 support (AVX2 at most)" if _has_flag(info, "avx2") else "no bf16 support")
    return f"{model.group(1).strip() if model else 'unknown model'}, {bf16}"


def gqa_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                  scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any) -> tuple[Any, None]:
    """`sdpa` attention; on CPU with grouped KV heads and a mask, the KV heads are not copied per query head.

    Without a mask transformers' `sdpa` already passes `enable_gqa`; with one it is the same call with
    `is_causal=False` (the mask says it all), so the output is the same.
    """
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (attention_mask is None or query.device.type != "cpu" or getattr(module, "num_key_value_groups", 1) <= 1
            or kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
            or key.shape[-1] != value.shape[-1]):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=False,
        enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_gqa_attention(model: Any) -> bool:
    """Switch a model on plain `sdpa` attention with grouped KV heads to `gqa_attention`; True when switched."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = model.config
    heads = getattr(config, "num_attention_heads", 0)
    kv_heads = getattr(config, "num_key_value_heads", heads) or heads
    if getattr(config, "_attn_implementation", None) != "sdpa" or not heads or kv_heads >= heads:
        return False
    AttentionInterface.register(GQA_ATTENTION, gqa_attention)
    AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)
    try:
        model.set_attn_implementation(GQA_ATTENTION)
    except (ValueError, AttributeError, KeyError):  # a model that does not dispatch through AttentionInterface
        return False
    return getattr(model.config, "_attn_implementation", None) == GQA_ATTENTION


def growing_cache(model: Any, capacity: int) -> Any | None:
    """A `DynamicCache` whose layers are `GrowingLayer`s reserving `capacity` positions; None when the model's
    cache has other layer kinds (sliding windows, linear attention), which keep transformers' own cache."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=model.config)
    if not cache.layers or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [GrowingLayer(capacity) for _ in cache.layers]
    return cache


@functools.cache
def _growing_layer_class() -> type:
    """The class, made on first use (transformers is imported lazily)."""
    from transformers.cache_utils import DynamicLayer

    class _GrowingLayer(DynamicLayer):
        """A `DynamicLayer` that appends in place into a buffer of `capacity` positions (grown by half when full).

        `keys` / `values` are views of the first `length` positions, so everything that reads a
        `DynamicLayer` (sequence length, mask sizes) reads this one the same way.
        """

        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity = max(1, int(capacity))
            self.length = 0
            self._k = self._v = None

        def _grow(self, index: Any = None) -> None:
            """A new buffer: `capacity` positions at first, half as many again when full; rows `index` only."""
            import torch

            k, v = self._k, self._v
            if index is not None:  # rows leave (or fan out): same room
                cap = max(k.shape[2], self.capacity)
            else:
                cap = max(self.length + 1, self.capacity if k.shape[2] < self.capacity else k.shape[2] * 3 // 2)
            keep_k, keep_v = k[:, :, :self.length], v[:, :, :self.length]
            if index is not None:
                keep_k, keep_v = keep_k[index], keep_v[index]
            self._k = torch.empty((keep_k.shape[0], k.shape[1], cap, k.shape[3]), dtype=k.dtype, device=k.device)
            self._v = torch.empty((keep_v.shape[0], v.shape[1], cap, v.shape[3]), dtype=v.dtype, device=v.device)
            self._k[:, :, :self.length].copy_(keep_k)
            self._v[:, :, :self.length].copy_(keep_v)

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = key_states.shape[-2]
            end = self.length + n
            if self._k is None:
                # The prompt's own rows: exactly its length, the buffer is made at the fan-out (batch_select_indices).
                b, h, _, d = key_states.shape
                self._k = key_states.new_empty((b, h, end, d))
                self._v = value_states.new_empty((b, h, end, value_states.shape[-1]))
            while end > self._k.shape[2]:
                self._grow()
            self._k[:, :, self.length:end].copy_(key_states)
            self._v[:, :, self.length:end].copy_(value_states)
            self.length = end
            self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def batch_select_indices(self, indices: Any) -> None:
            if self._k is None or not self.length:
                return
            self._grow(index=indices)
            self.keys, self.values = self._k[:, :, :self.length], self._v[:, :, :self.length]

        def reset(self) -> None:
            self._k = self._v = None
            self.length = 0
            super().reset()

        def crop(self, tokens_to_remove: int) -> None:
            raise NotImplementedError("GrowingLayer is for the backend's own decode loop; it is never cropped")

        def reorder_cache(self, beam_idx: Any) -> None:
            self.batch_select_indices(beam_idx)

    return _GrowingLayer


def GrowingLayer(capacity: int) -> Any:
    """A new growing cache layer."""
    return _growing_layer_class()(capacity)
