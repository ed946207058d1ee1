"""Time one full judgment, and many batched, of a Qwen3-4B-shaped random-weight model on each backend (a GPU machine).

    python bench/gpu_judge.py                       # on a CUDA machine: bf16, the paper's shape
    python bench/gpu_judge.py --dry-run             # on a CPU: a tiny shape, to check the script end to end
    python bench/gpu_judge.py --backends transformers,vllm --batched 200 --base-url http://127.0.0.1:8000/v1

One judgment = stage 1 (a 1024-token prompt, 8 samples x 512 new tokens, sampled, log-probs) + stage 2
(7 reflections, 2048-token prompts, 256 new tokens each, greedy), the shape of ../shared/ENVIRONMENT.md's
reference figures (naive transformers: 63.9 s first call; memory-bandwidth floor 1.46 s; targets: <= 3 s
per judgment on vLLM, >= 10 judgments/s batched). The weights are random (speed does not depend on their
values), so no output parses: the stages are driven through the backend protocol directly, with lengths
forced (a random model almost never samples its stop token). The model is built from Qwen3-4B's config
with the demo tokenizer (ids it cannot decode are skipped in text) and saved under --cache.

Backends: `transformers` (always), `vllm` (when importable), `openai` (with --base-url, a server already
serving the same folder). Each is warmed up at a small shape first. The last line is one JSON object.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from harness import finish, parser

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

from reflectrm import flags  # noqa: E402
from reflectrm.backends.config import BackendConfig  # noqa: E402
from reflectrm_app.commands.options import BACKEND_FLAGS  # noqa: E402

QWEN3_4B = {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936}
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 1476}


@dataclass(frozen=True)
class Shape:
    """Token counts of one judgment."""

    prompt: int = 1024  # stage-1 prompt tokens
    samples: int = 8  # stage-1 samples
    sample_tokens: int = 512
    reflections: int = 7
    reflection_prompt: int = 2048
    reflection_tokens: int = 256

    @property
    def tokens(self) -> int:
        return self.samples * self.sample_tokens + self.reflections * self.reflection_tokens


FULL = Shape()
DRY = Shape(prompt=64, sample_tokens=16, reflection_prompt=128, reflection_tokens=8)


def build_model(where: Path, arch: dict, *, dtype: str) -> str:
    """A random-weight Qwen3 of `arch` with the demo tokenizer, saved once under `where`."""
    if (where / "config.json").exists():
        return str(where)
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from reflectrm.demo import DEMO_MODEL_DIR

    tok = AutoTokenizer.from_pretrained(str(DEMO_MODEL_DIR))
    config = Qwen3Config(max_position_embeddings=8192, tie_word_embeddings=arch["vocab_size"] < 200_000,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **arch)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return str(where)


def prompt_of(tokens: int, tokenizer, salt: int):  # noqa: ANN001, ANN201
    """A one-turn chat prompt whose encoding (chat template included) is about `tokens` long."""
    from reflectrm.core.types import ChatMessage

    words = [f"w{(salt * 7919 + k) % 997}" for k in range(tokens)]
    lo, hi = 1, tokens
    while lo < hi:  # the longest word count whose encoding fits
        mid = (lo + hi + 1) // 2
        text = " ".join(words[:mid])
        n = len(tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                              add_generation_prompt=True))
        lo, hi = (mid, hi) if n <= tokens else (lo, mid - 1)
    return (ChatMessage("user", " ".join(words[:lo])),)


def judgments(backend, tokenizer, shape: Shape, count: int) -> tuple[float, float, int]:  # noqa: ANN001
    """Seconds of stage 1 and stage 2 for `count` judgments generated together, and tokens generated."""
    from reflectrm.backends.base import GenerationRequest, SamplingParams

    s1 = [GenerationRequest(prompt_of(shape.prompt, tokenizer, j), tuple(range(shape.samples))) for j in range(count)]
    s2 = [GenerationRequest(prompt_of(shape.reflection_prompt, tokenizer, 10_000 + j * 16 + k), (k,))
          for j in range(count) for k in range(shape.reflections)]
    started = time.perf_counter()
    out1 = backend.generate(s1, SamplingParams(max_new_tokens=shape.sample_tokens, logprobs=True))
    mid = time.perf_counter()
    out2 = backend.generate(s2, SamplingParams(temperature=0.0, max_new_tokens=shape.reflection_tokens))
    end = time.perf_counter()
    tokens = sum(c.num_tokens + (c.finish_reason == "stop") for rows in (out1, out2) for row in rows for c in row)
    return mid - started, end - mid, tokens


def load(name: str, model_dir: str, args):  # noqa: ANN001, ANN201
    from reflectrm.backends import BackendConfig, EngineConfig, load_backend

    if name == "transformers":
        return load_backend(BackendConfig(model=model_dir, device=args.device),
                            dtype="bf16" if args.dtype == "bfloat16" else "fp32")
    if name == "vllm":
        return load_backend(BackendConfig(model=model_dir, backend="vllm"),
                            EngineConfig(dtype=args.dtype, enforce_eager=args.dry_run,
                                         kv_cache_gib=1 if args.dry_run else None, max_model_len=4096))
    return load_backend(BackendConfig(backend="openai"), EngineConfig(base_urls=tuple(args.base_url)))


def available(names: list[str], args) -> list[str]:  # noqa: ANN001
    import importlib.util

    keep = []
    for name in names:
        if name == "vllm" and importlib.util.find_spec("vllm") is None:
            print("skipping vllm: not importable here (pip install vllm)", flush=True)
        elif name == "openai" and not args.base_url:
            print("skipping openai: no --base-url (start `vllm serve` on the model folder first)", flush=True)
        else:
            keep.append(name)
    return keep


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--dry-run", action="store_true", help="tiny shape on CPU (checks the script, times nothing real)")
    ap.add_argument("--backends", default="transformers,vllm,openai")
    ap.add_argument("--batched", type=int, default=200, help="judgments generated together")
    ap.add_argument("--batched-transformers", type=int, default=16,
                    help="judgments batched on the transformers backend (200 would take many minutes)")
    ap.add_argument("--base-url", action="append", default=[], help="OpenAI-compatible server(s) for `openai`")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    # the transformers column's device, as `reflectrm judge` takes it (BackendConfig); --backends picks the columns
    flags.add_config_flags(ap, BackendConfig, extra=BACKEND_FLAGS, skip=("model", "backend", "threads"))
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "reflectrm-gpu-bench")
    args = ap.parse_args()
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        raise SystemExit("no CUDA device: run on a GPU machine, or pass --dry-run for a tiny CPU check")
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    shape, arch = (DRY, TINY) if args.dry_run else (FULL, QWEN3_4B)
    if args.dry_run:
        args.batched, args.batched_transformers = min(args.batched, 4), min(args.batched_transformers, 4)
    model_dir = build_model(args.cache / ("tiny" if args.dry_run else "qwen3-4b"), arch, dtype=args.dtype)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    results = []
    for name in available(args.backends.split(","), args):
        backend = load(name, model_dir, args)
        judgments(backend, tokenizer, Shape(prompt=64, sample_tokens=8, reflection_prompt=64, reflection_tokens=8), 1)
        s1, s2, tokens = judgments(backend, tokenizer, shape, 1)
        count = args.batched_transformers if name == "transformers" else args.batched
        b1, b2, btokens = judgments(backend, tokenizer, shape, count)
        row = {"backend": name, "one_judgment_s": round(s1 + s2, 3), "stage1_s": round(s1, 3), "stage2_s": round(s2, 3),
               "tokens": tokens, "batched": count, "batched_s": round(b1 + b2, 2),
               "judgments_per_s": round(count / (b1 + b2), 3), "batched_tokens_per_s": round(btokens / (b1 + b2), 1)}
        results.append(row)
        print(json.dumps(row), flush=True)
        if name == "vllm":
            backend.llm.llm_engine.engine_core.shutdown()
        del backend
    finish({"shape": vars(shape) | {"tokens_per_judgment": shape.tokens}, "arch": arch, "dtype": args.dtype,
            "device": torch.cuda.get_device_name(0) if cuda else "cpu", "results": results})


if __name__ == "__main__":
    main()
