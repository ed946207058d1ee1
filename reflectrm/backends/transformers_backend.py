"""The transformers backend: any Hugging Face causal LM, on CPU or CUDA.

Why a decode loop of its own instead of `generate()`:

* the completions of one prompt share one prompt encoding: each distinct prompt is prefilled once
  and its KV cache is fanned out to its samples;
* only the sampled token's log-prob is kept per step ([rows] floats), never the full-vocabulary
  scores of every step (151,936 floats per token per sequence for a Qwen3 vocabulary);
* every completion has its own seeded generator, so a sample depends on its seed only, not on
  which other prompts share the batch;
* finished rows leave the batch, so long and short completions don't cost the same;
* `should_stop` is checked before every decode step (what a `StoppingCriteria` would do inside
  `generate()`), so Stop ends an 8 x 1024-token stage 1 within one step.
"""

from __future__ import annotations

import contextlib
import hashlib
import pickle
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from reflectrm.backends.base import Completion, GenerationRequest, SamplingParams, StopCheck
from reflectrm.backends.cpu_decode import growing_cache, use_gqa_attention
from reflectrm.backends.preflight import check_device_available, check_model_folder
from reflectrm.core.types import ChatMessage, messages_to_dicts
from reflectrm.defaults import check_threads
from reflectrm.errors import (BackendError, ConfigError, ContextLengthError, GenerationCancelled, ReflectRMError,
                              require)

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


class TransformersBackend:
    """Generation with a `transformers` model and tokenizer.

    Args:
        model: a loaded causal LM (eval mode is set here).
        tokenizer: its tokenizer, with a chat template.
        model_id: id or path, for the record.
        model_revision: content hash or revision of the weights, for the record.
        max_batch_rows: most sequences decoded at once (prompts x completions); bounds memory.
        threads: torch threads while generating: None leaves torch's setting; a number sets it for the call;
            "auto" times decode steps on one thread and on torch's count and keeps the faster, probing again
            every `PROBE_EVERY` steps (on a shared machine two OpenMP threads, one of them preempted, spin
            at every barrier, so one thread can be several times faster). torch's setting is restored when
            the call returns.
    """

    name = "transformers"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_id: str = "",
        model_revision: str = "",
        max_batch_rows: int = 64,
        threads: int | str | None = None,
    ) -> None:
        if not (threads is None or threads == "auto" or (isinstance(threads, int) and threads >= 1)):
            raise ConfigError(f"threads must be None, 'auto' or a positive count, got {threads!r}")
        if isinstance(threads, int):
            check_threads(threads)
        self.torch = require("torch", extra="train")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.model_id = model_id or getattr(model.config, "_name_or_path", "") or "model"
        self.model_revision = model_revision
        self.max_batch_rows = max_batch_rows
        self.threads = threads
        self._tuner: ThreadTuner | None = None
        self.device = next(model.parameters()).device
        self.pad_id = _pad_id(tokenizer)
        self.stop_ids = _stop_ids(model, tokenizer)
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        # The longest vocabulary entry: no prompt of more than max_context x this many characters can fit.
        self.max_token_chars = max(map(len, tokenizer.get_vocab()), default=1)
        # Grouped-query attention without copying the KV heads per query head (cpu_decode.py: 8x at real shapes).
        self.gqa_attention = self.device.type == "cpu" and use_gqa_attention(model)
        # Where the last `generate` call's time went (seconds; the bench reports it): tokenising, the prompt
        # forward passes, the decode steps' forward passes, sampling + log-probs + bookkeeping, and the rest.
        self.last_timings: dict[str, float] = {}

    @classmethod
    def from_pretrained(cls, model_id: str, *, device: str = "auto", dtype: str = "auto", **kw: Any) -> TransformersBackend:
        """Load a model by Hugging Face id or local path; bf16 on CUDA, fp32 on CPU by default."""
        torch = require("torch", extra="train")
        transformers = require("transformers", extra="train")
        check_device_available(device)  # before minutes of loading: "Torch not compiled with CUDA enabled" came last
        check_model_folder(model_id)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        torch_dtype = {"auto": torch.bfloat16 if device.startswith("cuda") else torch.float32,
                       "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
        local = Path(model_id).expanduser()
        source = str(local) if local.is_dir() else model_id
        with loading(model_id, "tokenizer"):
            tokenizer = transformers.AutoTokenizer.from_pretrained(source)
        if tokenizer.chat_template is None:  # apply_chat_template raised a ValueError at the first judgment
            raise BackendError(f"model {model_id!r} has no chat template (chat_template.jinja, or chat_template in "
                               "tokenizer_config.json): the judge's prompts are chat messages; pass a chat model")
        with loading(model_id, "model"):
            model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
        tokenizer.padding_side = "left"  # not persisted by transformers 5
        model.to(device)
        return cls(model, tokenizer, model_id=model_id, model_revision=weights_revision(source), **kw)

    # -- protocol -------------------------------------------------------------------------------

    def check_prompt(self, prompt: Sequence[ChatMessage], *, max_new_tokens: int) -> None:
        chars = sum(len(m.content) for m in prompt)
        if chars > self.max_context * self.max_token_chars:  # surely too long: refuse before tokenising it all
            raise ContextLengthError(
                f"the prompt is {chars:,} characters, more than the model's context of {self.max_context} tokens "
                f"can hold (a token covers at most {self.max_token_chars} characters): shorten the query or responses"
            )
        n = len(self.encode(prompt))
        if n + max_new_tokens > self.max_context:
            raise ContextLengthError(
                f"the prompt is {n} tokens and up to {max_new_tokens} more may be generated, but the model's "
                f"context is {self.max_context} tokens: shorten the query or responses, or lower max_new_tokens"
            )

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, should_stop: StopCheck | None = None
    ) -> list[list[Completion]]:
        before = self.torch.get_num_threads()
        if isinstance(self.threads, int):
            self.torch.set_num_threads(self.threads)
        elif self.threads == "auto":  # start (the prompt forward) on what the last call chose
            if self._tuner is None or self._tuner.many != before:
                self._tuner = ThreadTuner(self.torch, before)
            self.torch.set_num_threads(self._tuner.chosen)
        try:
            return self._generate(requests, params, should_stop)
        finally:
            if self.torch.get_num_threads() != before:
                self.torch.set_num_threads(before)

    def _generate(self, requests: Sequence[GenerationRequest], params: SamplingParams,
                  should_stop: StopCheck | None) -> list[list[Completion]]:
        out: list[list[Completion]] = [[] for _ in requests]
        call_started = time.perf_counter()
        self.last_timings = t = dict.fromkeys(("encode_s", "prefill_s", "forward_s", "sample_s", "other_s", "total_s"),
                                              0.0)
        t["steps"] = t["rows"] = 0
        for chunk in self._chunks(requests):
            _check_stop(should_stop, "before a batch")
            started = time.perf_counter()
            encoded = [self.encode(requests[i].prompt) for i in chunk]
            t["encode_s"] += time.perf_counter() - started
            for i, ids in zip(chunk, encoded):
                if len(ids) >= self.max_context:
                    raise ContextLengthError(
                        f"a prompt is {len(ids)} tokens but the model's context is {self.max_context}: shorten it"
                    )
            seeds = [list(requests[i].seeds) for i in chunk]
            rows = self._decode(encoded, seeds, params, should_stop)
            for i, completions in zip(chunk, rows):
                out[i] = completions
            log.debug("generated %d rows in %.2fs", sum(map(len, seeds)), time.perf_counter() - started)
        t["total_s"] = time.perf_counter() - call_started
        t["other_s"] = max(0.0, t["total_s"] - t["encode_s"] - t["prefill_s"] - t["forward_s"] - t["sample_s"])
        return out

    # -- internals ------------------------------------------------------------------------------

    def encode(self, prompt: Sequence[ChatMessage]) -> list[int]:
        """Token ids of a chat prompt with the generation prompt appended."""
        text = self.tokenizer.apply_chat_template(messages_to_dicts(prompt), tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _chunks(self, requests: Sequence[GenerationRequest]) -> list[list[int]]:
        chunks: list[list[int]] = []
        rows = 0
        for i, r in enumerate(requests):
            n = max(1, len(r.seeds))
            if not chunks or rows + n > self.max_batch_rows:
                chunks.append([])
                rows = 0
            chunks[-1].append(i)
            rows += n
        return [c for c in chunks if c]

    def _decode(
        self, encoded: list[list[int]], seeds: list[list[int]], params: SamplingParams, should_stop: StopCheck | None
    ) -> list[list[Completion]]:
        torch = self.torch
        dev = self.device
        width = max(map(len, encoded))
        input_ids = torch.full((len(encoded), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(encoded), width), dtype=torch.long)
        for b, ids in enumerate(encoded):  # left padding
            input_ids[b, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attn[b, width - len(ids):] = 1
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        budget = min(params.max_new_tokens, self.max_context - width)
        t = self.last_timings
        started = time.perf_counter()
        with torch.inference_mode():
            # On CPU a cache that appends in place (cpu_decode.py), with room for the prompt and up to 128 new
            # tokens at first (half as much again when full: never the whole budget for rows that may stop early).
            # On CUDA transformers' own cache (cat and copies are cheap there; GPU figures were measured with it).
            cache = growing_cache(self.model, width + min(budget, 128)) if dev.type == "cpu" else None
            out = self.model(input_ids=input_ids, attention_mask=attn, position_ids=positions, use_cache=True,
                             logits_to_keep=1, **({"past_key_values": cache} if cache is not None else {}))
            # Fan each prompt's cache out to its completions: rows[r] = prompt index of row r.
            rows = torch.tensor([b for b, s in enumerate(seeds) for _ in s], dtype=torch.long, device=dev)
            cache = out.past_key_values
            cache.batch_select_indices(rows)
            logits = out.logits[:, -1, :].float()[rows]  # [R, V]
            attn = attn[rows]
            next_pos = positions[rows, -1:] + 1  # [R, 1]
            gens = [self._generator(s) for seed_list in seeds for s in seed_list]
            t["prefill_s"] += time.perf_counter() - started
            t["rows"] += len(gens)
            tokens, logps = self._loop(logits, cache, attn, next_pos, gens, params, budget, should_stop)
        return self._assemble(tokens, logps, seeds, params, budget)

    def _generator(self, seed: int) -> Any:
        g = self.torch.Generator(device=self.device)
        g.manual_seed(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)
        return g

    def _loop(self, logits, cache, attn, next_pos, gens, params, budget, should_stop):  # noqa: ANN001, ANN202
        """Decode until every row stops; returns per-row token and log-prob lists.

        Raises `GenerationCancelled` at the first step where `should_stop()` is true.
        """
        torch = self.torch
        total = logits.shape[0]
        active = list(range(total))  # original row of each live row
        tokens: list[list[int]] = [[] for _ in range(total)]
        logps: list[list[float]] = [[] for _ in range(total)]
        stop = torch.tensor(sorted(self.stop_ids), device=logits.device)
        times = self.last_timings  # started by _generate, which every call goes through
        clock = time.perf_counter
        tuner = self._tuner if self.threads == "auto" else None
        mark = clock()
        for step in range(budget):
            mark = clock()
            _check_stop(should_stop, f"after {step} of up to {budget} tokens")
            logprobs = torch.log_softmax(logits, dim=-1)  # [R, V], raw model distribution
            tok = self._sample(logits, params, [gens[r] for r in active])  # [R]
            lp = logprobs.gather(1, tok[:, None]).squeeze(1)
            for j, (t, p) in enumerate(zip(tok.tolist(), lp.tolist())):
                tokens[active[j]].append(t)
                logps[active[j]].append(p)
            done = torch.isin(tok, stop)
            if step == budget - 1 or bool(done.all()):  # no forward pass whose logits nobody samples
                break
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                tok, attn, next_pos = tok[keep], attn[keep], next_pos[keep]
                active = [active[k] for k in keep.tolist()]
            attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=-1)
            if tuner is not None:
                tuner.before_step()
            forward = clock()
            times["sample_s"] += forward - mark
            out = self.model(input_ids=tok[:, None], attention_mask=attn, position_ids=next_pos,
                             past_key_values=cache, use_cache=True)
            next_pos = next_pos + 1
            logits = out.logits[:, -1, :].float()
            spent = clock() - forward
            times["forward_s"] += spent
            times["steps"] += 1
            if tuner is not None:
                tuner.after_step(spent)
                times["threads"] = tuner.chosen
        times["sample_s"] += clock() - mark
        return tokens, logps

    def _sample(self, logits, params: SamplingParams, gens: list) -> Any:  # noqa: ANN001
        torch = self.torch
        if params.temperature == 0:
            return logits.argmax(dim=-1)
        scaled = logits / params.temperature
        if params.top_k:
            kth = torch.topk(scaled, min(params.top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)
        if params.top_p < 1.0:
            sorted_p, idx = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
            probs = probs.scatter(1, idx, sorted_p.masked_fill(drop, 0.0))
        return torch.cat([torch.multinomial(probs[j], 1, generator=g) for j, g in enumerate(gens)])

    def _assemble(self, tokens, logps, seeds, params, budget) -> list[list[Completion]]:  # noqa: ANN001
        out: list[list[Completion]] = []
        r = 0
        for seed_list in seeds:
            row = []
            for _ in seed_list:
                toks, lps = tokens[r], logps[r]
                stopped = bool(toks) and toks[-1] in self.stop_ids
                if stopped:
                    toks, lps = toks[:-1], lps[:-1]  # the stop token is not counted (Eq. 5)
                text = self.tokenizer.decode(toks, skip_special_tokens=True)
                row.append(Completion(text, tuple(lps) if params.logprobs else (), len(toks),
                                      "stop" if stopped else "length", tuple(toks)))
                r += 1
            out.append(row)
        return out

    def score(self, prompt: Sequence[ChatMessage], completion_ids: Sequence[int]) -> list[float]:
        """Teacher-forced log-probs of `completion_ids` after `prompt` (for checks and rescoring)."""
        torch = self.torch
        ids = self.encode(prompt)
        x = torch.tensor([ids + list(completion_ids)], device=self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=x).logits[0].float()
        lp = torch.log_softmax(logits[len(ids) - 1 : -1], dim=-1)
        return lp.gather(1, torch.tensor(list(completion_ids), device=self.device)[:, None]).squeeze(1).tolist()


class ThreadTuner:
    """Picks the faster of one thread and torch's thread count from timed decode steps, again and again.

    A probe is two steps on each count, alternating (many, one, many, one) so that both see the same context
    length and load; the count whose better step was faster is kept. The next probe comes `PROBE_EVERY`
    steps later, twice as late each time the choice did not change (up to `PROBE_MAX`): a losing count
    can be many times slower than the winner on a busy machine, so
    it is tried rarely, but the load changes, so never never. The choice carries over to the next call
    (and its prompt forward pass).
    """

    PROBE_EVERY = 32
    PROBE_MAX = 512
    PROBES = 4

    def __init__(self, torch: Any, many: int) -> None:
        self.torch = torch
        self.many = many
        self.chosen = many
        self.interval = self.PROBE_EVERY
        self.countdown = 0  # steps until the next probe; 0: probe now
        self.probe_step = -1  # step within the running probe, -1 when not probing
        self.best: dict[int, float] = {}

    def before_step(self) -> None:
        if self.probe_step < 0 and self.countdown <= 0 and self.many > 1:
            self.probe_step, self.best = 0, {}
        count = (self.many if self.probe_step % 2 == 0 else 1) if self.probe_step >= 0 else self.chosen
        if self.torch.get_num_threads() != count:
            self.torch.set_num_threads(count)

    def after_step(self, seconds: float) -> None:
        if self.probe_step < 0:
            self.countdown -= 1
            return
        count = self.torch.get_num_threads()
        self.best[count] = min(seconds, self.best.get(count, float("inf")))
        self.probe_step += 1
        if self.probe_step == self.PROBES:
            chosen = min(self.best, key=self.best.__getitem__)
            self.interval = min(self.interval * 2, self.PROBE_MAX) if chosen == self.chosen else self.PROBE_EVERY
            self.chosen, self.countdown, self.probe_step = chosen, self.interval, -1


def load_errors() -> tuple[type[BaseException], ...]:
    """What the Hugging Face loaders raise for a file they cannot read: a missing or damaged config, tokenizer or
    weight file, no network for a Hub id; also a tensor whose shape the config does not give (RuntimeError)."""
    errors: list[type[BaseException]] = [OSError, ValueError, TypeError, KeyError, EOFError, RuntimeError,
                                         pickle.UnpicklingError]
    with contextlib.suppress(ImportError):
        from safetensors import SafetensorError  # a truncated or overwritten .safetensors file

        errors.append(SafetensorError)
    return tuple(errors)


@contextlib.contextmanager
def loading(model_id: str, part: str) -> Iterator[None]:
    """Map a loader's failure on `model_id`'s `part` (model, tokenizer) to one `BackendError` line naming the fix."""
    try:
        yield
    except load_errors() as exc:
        if isinstance(exc, ReflectRMError):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        detail = f"{type(exc).__name__}: {first[:160]}" if first else type(exc).__name__
        what = f"model {model_id!r}" if part == "model" else f"the {part} of model {model_id!r}"
        raise BackendError(
            f"cannot load {what} ({detail}): its files are missing or damaged, or it is not "
            "on this machine; copy the model folder again, pass --model another folder, or a Hugging Face id on a "
            "machine that can reach the Hub"
        ) from exc


def _check_stop(should_stop: StopCheck | None, where: str) -> None:
    if should_stop is not None and should_stop():
        raise GenerationCancelled(f"generation stopped on request {where}: nothing was returned")


def _pad_id(tokenizer: Any) -> int:
    for attr in ("pad_token_id", "eos_token_id", "unk_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            return value
    return 0


def _stop_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for value in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(v for v in value if isinstance(v, int))
    for token in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
            ids.add(tid)
    if not ids:
        raise BackendError("the tokenizer has no end-of-sequence token: set eos_token in its config")
    return ids


def weights_revision(source: str) -> str:
    """A revision for the record: the Hub snapshot id, else a sha256 of the weight files.

    Files under 256 MiB in all are hashed whole; larger ones by name, size and their first and
    last 4 MiB (hashing 8 GB on every start would be slower than loading the model).
    """
    path = Path(source)
    if not path.is_dir():
        return "hub:" + source
    parts = path.resolve().parts
    if "snapshots" in parts:
        return parts[parts.index("snapshots") + 1]
    files = sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    total = sum(p.stat().st_size for p in files)
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode())
        with p.open("rb") as fh:
            if total <= 256 << 20:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            else:
                size = os.fstat(fh.fileno()).st_size
                h.update(str(size).encode())
                h.update(fh.read(4 << 20))
                fh.seek(max(0, size - (4 << 20)))
                h.update(fh.read(4 << 20))
    return "sha256:" + h.hexdigest()[:16]
