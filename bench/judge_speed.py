"""Judge demo pairs two ways and print seconds per judgment and the speedup.

    python bench/judge_speed.py [--pairs 50] [--batch-size 8] [--model PATH] [--device cpu] [--threads N|auto]

* naive: one `model.generate()` call per sample and per reflection, log-probs through
  `output_scores=True` + `compute_transition_scores` (the straightforward implementation);
* real: the project's transformers backend (shared prompt encoding, batched pairs and
  reflections, only sampled-token log-probs kept, finished rows leave the batch).

`--model`, `--device` and `--threads` are `reflectrm judge`'s (`BackendConfig`, the same defaults: the
demo judge on one CPU thread); the backend is always transformers, whose model the naive column drives.

Both run the same pipeline, config and pairs; only the backend differs. The last line printed is
one JSON object: {"naive_s_per_judgment", "s_per_judgment", "speedup", ...}.

Engine columns (`--engines`): the transformers backend, the vLLM engine in process, and the OpenAI
backend against a local vLLM server, on the demo judge and on a Qwen3-0.6B-shaped model with random
weights (28 layers, hidden 1024, the demo tokenizer; built and saved under --cache on first use):

    python bench/judge_speed.py --engines [--shapes demo,qwen3-0.6b] [--pairs 4] [--tokens 64] [--dtype float32]

For each: stage 1 alone (pairs x 8 samples x --tokens, same prompts, after a warm-up) in tokens/s,
and on the demo judge full judgments per minute. The bound is measured in the same run: the model's
own weight matrix products (every linear layer and the output head, fp32) at the batch it generates
with (pairs x 8 rows); bound tokens/s = rows / (seconds per step). Every figure is also printed as a
share of that bound. The bound is the best of one thread and torch's count, and the in-process
transformers column runs at that count. For the transformers backend the bench also prints where the time
went (the backend's `last_timings`: tokenising, prompt forward, decode forwards, sampling/log-probs, the
rest; CPU user and system seconds; the decode steps alone as a share of the bound).
Needs vllm (`.[vllm]`); run `uptime` beside it, the machine is shared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from reflectrm_app.commands import options  # noqa: E402
from reflectrm.backends import BackendConfig, EngineConfig, load_backend  # noqa: E402
from reflectrm.backends.base import Completion, GenerationRequest, SamplingParams  # noqa: E402
from reflectrm.core import JudgeConfig  # noqa: E402
from reflectrm.demo import demo_domain  # noqa: E402
from reflectrm.pipeline import judge_many  # noqa: E402
from harness import finish, load, ratio, parser


class NaiveBackend:
    """One `generate()` per completion; the textbook way to get sampled-token log-probs."""

    name = "naive-generate"

    def __init__(self, real) -> None:  # noqa: ANN001
        self.real = real
        self.model_id, self.model_revision = real.model_id, real.model_revision

    def check_prompt(self, prompt, *, max_new_tokens: int) -> None:  # noqa: ANN001
        self.real.check_prompt(prompt, max_new_tokens=max_new_tokens)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams, *,
                 should_stop=None) -> list[list[Completion]]:  # noqa: ANN001 - Stop is not timed here
        import torch

        model, tok = self.real.model, self.real.tokenizer
        out = []
        for req in requests:
            ids = torch.tensor([self.real.encode(req.prompt)], device=self.real.device)
            row = []
            for seed in req.seeds:
                torch.manual_seed(seed & 0x7FFFFFFF)
                sample = params.temperature > 0
                gen = model.generate(
                    ids, attention_mask=torch.ones_like(ids), max_new_tokens=params.max_new_tokens,
                    do_sample=sample, temperature=params.temperature if sample else None, top_k=0 if sample else None,
                    top_p=1.0 if sample else None, return_dict_in_generate=True, output_scores=True,
                    eos_token_id=sorted(self.real.stop_ids), pad_token_id=self.real.pad_id,
                )
                new = gen.sequences[0, ids.shape[1]:].tolist()
                lps = model.compute_transition_scores(gen.sequences, gen.scores, normalize_logits=True)[0].tolist()
                stopped = bool(new) and new[-1] in self.real.stop_ids
                if stopped:
                    new, lps = new[:-1], lps[:-1]
                text = tok.decode(new, skip_special_tokens=True)
                row.append(Completion(text, tuple(lps) if params.logprobs else (), len(new), "stop" if stopped else "length"))
            out.append(row)
        return out


def run(backend, pairs, config, batch_size: int) -> tuple[float, list]:  # noqa: ANN001
    started = time.perf_counter()
    judgments = list(judge_many(pairs, backend, config, batch_size=batch_size))
    return time.perf_counter() - started, judgments


def main() -> None:
    if "--engines" in sys.argv:
        return engines_main([a for a in sys.argv[1:] if a != "--engines"])
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    options.add_backend_flags(ap, skip=("backend",))  # as `judge` takes them; transformers only
    args = ap.parse_args()
    real = options.load_judge(*options.backend_configs(args))
    naive = NaiveBackend(real)
    pairs = demo_domain().make_pairs(args.pairs, seed=2024, source="bench")
    config = JudgeConfig(max_new_tokens=args.max_new_tokens, reflection_max_new_tokens=args.max_new_tokens)
    run(real, pairs[:2], config, 2)  # warm-up (first call at a shape is slower)
    naive_s, naive_j = run(naive, pairs, config, args.batch_size)
    real_s, real_j = run(real, pairs, config, args.batch_size)
    tokens = sum(j.tokens_generated for j in real_j)
    acc = lambda js: sum(bool(j.correct) for j in js) / len(js)  # noqa: E731
    rows = [("naive generate()", naive_s, acc(naive_j)), ("transformers backend", real_s, acc(real_j))]
    print(f"{'implementation':<22} {'total s':>9} {'s/judgment':>11} {'accuracy':>9}")
    for name, secs, a in rows:
        print(f"{name:<22} {secs:>9.1f} {secs / len(pairs):>11.3f} {a:>9.2%}")
    print(f"{len(pairs)} pairs, {tokens} tokens generated by the real backend ({tokens / real_s:.0f} tokens/s)")
    finish({
        "pairs": len(pairs),
        "naive_s_per_judgment": round(naive_s / len(pairs), 4),
        "s_per_judgment": round(real_s / len(pairs), 4),
        "speedup": ratio(naive_s, real_s),
        "tokens_per_s": round(tokens / real_s, 1),
        "device": str(real.device),
    })


# --- engine columns ---------------------------------------------------------------------------------------------

QWEN3_06B = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128}  # Qwen3-0.6B's shape (its vocabulary replaced by the demo's)


def shaped_model(cache: Path, shape: str) -> str:
    """The demo judge's folder, or a random-weight model of `shape` with the demo tokenizer (built once)."""
    from reflectrm.demo import DEMO_MODEL_DIR

    if shape == "demo":
        return str(DEMO_MODEL_DIR)
    where = cache / shape
    if (where / "config.json").exists():
        return str(where)
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(str(DEMO_MODEL_DIR))
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tok), max_position_embeddings=4096, tie_word_embeddings=True,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **QWEN3_06B)
    Qwen3ForCausalLM(config).save_pretrained(where)
    tok.save_pretrained(where)
    return str(where)


def matmul_bound(model_dir: str, rows: int, *, reps: int = 20) -> tuple[float, int]:
    """Tokens/s if a decode step cost only the model's weight matrix products at `rows` rows (fp32, measured),
    and the thread count that gave it."""
    import json as _json

    import torch

    c = _json.loads((Path(model_dir) / "config.json").read_text())
    h, i, heads, kv, hd = (c["hidden_size"], c["intermediate_size"], c["num_attention_heads"],
                           c["num_key_value_heads"], c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])
    # q, k, v, o, gate, up, down: (out, in)
    layer = [(heads * hd, h), (kv * hd, h), (kv * hd, h), (h, heads * hd), (i, h), (i, h), (h, i)]
    shapes = layer * c["num_hidden_layers"] + [(c["vocab_size"], h)]
    weights = {s: torch.randn(*s) for s in set(shapes)}
    x = {n: torch.randn(rows, n) for n in {s[1] for s in shapes}}
    for s in shapes[:8]:
        torch.nn.functional.linear(x[s[1]], weights[s])  # warm-up
    best, best_threads = float("inf"), 1
    threads = torch.get_num_threads()
    # On a busy machine two OpenMP threads can be 3x slower than one (spin-waits on a preempted thread; measured
    # 27.6 against 86.5 tokens/s for the 0.6B shape at load 4.5): the bound is the best thread count's.
    for count in sorted({1, threads}):
        torch.set_num_threads(count)
        for _ in range(reps):
            started = time.perf_counter()
            for s in shapes:
                torch.nn.functional.linear(x[s[1]], weights[s])
            secs = time.perf_counter() - started
            if secs < best:
                best, best_threads = secs, count
    torch.set_num_threads(threads)
    return rows / best, best_threads


def stage1(backend, pairs, tokens: int) -> tuple[float, int]:  # noqa: ANN001
    """Seconds and generated tokens (stop tokens included) for 8 samples x `tokens` of each pair's prompt."""
    from reflectrm.core.prompts import response_prompt

    requests = [GenerationRequest(tuple(response_prompt(p)), tuple(range(8))) for p in pairs]
    params = SamplingParams(max_new_tokens=tokens, logprobs=True)
    started = time.perf_counter()
    rows = backend.generate(requests, params)
    secs = time.perf_counter() - started
    return secs, sum(c.num_tokens + (c.finish_reason == "stop") for row in rows for c in row)


def start_server(model_dir: str, dtype: str, port: int, log: Path) -> subprocess.Popen:
    import httpx

    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
           "VLLM_NO_USAGE_STATS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
                             "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype, "--served-model-name",
                             "bench"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the vLLM server exited: see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(1)
    raise SystemExit(f"the vLLM server did not start: see {log}")


def engine_backends(model_dir: str, args):  # noqa: ANN001, ANN201
    """(name, make backend, close) for each engine column, built one at a time (two cores: never two at once)."""
    import signal

    def transformers():
        return load_backend(BackendConfig(model=model_dir, device="cpu"),
                            dtype="fp32" if args.dtype == "float32" else "bf16"), None

    def vllm():
        b = load_backend(BackendConfig(model=model_dir, backend="vllm"), EngineConfig(dtype=args.dtype, kv_cache_gib=2))
        return b, b.llm.llm_engine.engine_core.shutdown

    def openai():
        proc = start_server(model_dir, args.dtype, args.port, args.cache / "server.log")
        b = load_backend(BackendConfig(backend="openai"), EngineConfig(base_urls=(f"http://127.0.0.1:{args.port}/v1",)))
        return b, lambda: (os.killpg(proc.pid, signal.SIGTERM), proc.wait(60))

    return [("transformers", transformers), ("vllm engine", vllm), ("openai -> vllm server", openai)]


def engine_row(name: str, make, pairs, model_dir: str, shape: str, args, bound: float,  # noqa: ANN001
               threads: int | None = None) -> dict:
    import torch

    backend, close = make()
    before = torch.get_num_threads()
    if threads and name == "transformers":  # in process: the thread count the bound was measured best with
        torch.set_num_threads(threads)
    try:
        stage1(backend, pairs[:1], 8)  # warm-up: the first call at a shape pays one-off costs
        cpu0 = os.times()
        secs, tokens = stage1(backend, pairs, args.tokens)
        cpu1 = os.times()
        row = {"shape": shape, "backend": name, "stage1_s": round(secs, 2), "tokens_per_s": round(tokens / secs, 1),
               "share_of_bound": round(tokens / secs / bound, 3), "bound_tokens_per_s": round(bound, 1),
               "load": load()}
        timings = getattr(backend, "last_timings", None)
        if timings:  # where the time goes (the transformers backend times its own phases)
            row["threads"] = torch.get_num_threads()
            row["breakdown_s"] = {k: round(v, 2) if isinstance(v, float) else v for k, v in timings.items()}
            row["breakdown_s"]["user_s"] = round(cpu1.user - cpu0.user, 2)
            row["breakdown_s"]["system_s"] = round(cpu1.system - cpu0.system, 2)
            steps = max(1, timings.get("steps", 0))
            # the decode steps alone, against the bound (rows per step / seconds per step)
            row["decode_share_of_bound"] = round(timings.get("rows", 0) / (timings["forward_s"] / steps) / bound, 3)
        if shape == "demo":
            config = JudgeConfig(max_new_tokens=96, reflection_max_new_tokens=96)
            judge_s, _ = run(backend, pairs, config, len(pairs))
            row["judgments_per_min"] = round(60 * len(pairs) / judge_s, 1)
        return row
    finally:
        torch.set_num_threads(before)
        if close is not None:
            close()


def engines_main(argv: list[str]) -> None:
    ap = parser("engine columns of the judge speed bench")
    ap.add_argument("--shapes", default="demo,qwen3-0.6b", help="comma-separated: demo, qwen3-0.6b")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per stage-1 sample")
    ap.add_argument("--dtype", default="float32", help="float32 or bfloat16 (bf16 needs AVX512-BF16/AMX to be fast)")
    ap.add_argument("--backends", default="transformers,vllm engine,openai -> vllm server")
    ap.add_argument("--port", type=int, default=18765)
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "reflectrm-bench")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    pairs = demo_domain().make_pairs(args.pairs, seed=2024, source="bench")
    wanted = args.backends.split(",")
    rows = []
    for shape in args.shapes.split(","):
        model_dir = shaped_model(args.cache, shape)
        bound, threads = matmul_bound(model_dir, rows=8 * len(pairs))
        for name, make in engine_backends(model_dir, args):
            if name in wanted:
                rows.append(engine_row(name, make, pairs, model_dir, shape, args, bound, threads))
                print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'shape':<11} {'backend':<23} {'stage-1 tok/s':>13} {'of bound':>9} {'bound':>7} {'judgments/min':>14}")
    for r in rows:
        print(f"{r['shape']:<11} {r['backend']:<23} {r['tokens_per_s']:>13.1f} {r['share_of_bound']:>9.2f} "
              f"{r['bound_tokens_per_s']:>7.1f} {r.get('judgments_per_min', float('nan')):>14.1f}")
    for r in rows:
        if "breakdown_s" in r:
            b = r["breakdown_s"]
            print(f"{r['shape']} {r['backend']} ({r['threads']} threads): stage 1 {b['total_s']:.1f} s = tokenise "
                  f"{b['encode_s']:.2f} + prompt forward {b['prefill_s']:.2f} + {b['steps']} decode forwards "
                  f"{b['forward_s']:.2f} + sampling/log-probs {b['sample_s']:.2f} + rest {b['other_s']:.2f} "
                  f"(CPU user {b['user_s']:.1f}, system {b['system_s']:.1f}); decode steps alone at "
                  f"{r['decode_share_of_bound']:.2f} of the bound")
    finish({"engines": rows, "pairs": args.pairs, "tokens": args.tokens, "dtype": args.dtype})


if __name__ == "__main__":
    main()
