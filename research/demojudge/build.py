"""Build the demo judge from scratch: tokenizer, Qwen3-architecture model, training, evaluation.

    python -m research.demojudge.build --out DIR [--steps N]

Trains a byte-level BPE tokenizer (every integer below 1000 one token) on the synthetic domain, then a
small `Qwen3ForCausalLM` by supervised fine-tuning on both tasks of the unified format: response
preference (right against wrong arithmetic answers) and analysis preference (a right against a
wrong analysis). It is deliberately small and briefly trained, so that it is imperfect: sampling,
reflection and retraining have something to fix. Writes the model, tokenizer and `demo_card.json`
(how it was built and what it scored) to --out. Needs the `train` extra (torch, transformers).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from reflectrm.backends.cpu_decode import cpu_has_bf16
from reflectrm.core.prompts import Task, format_output, reflection_prompt, response_prompt
from reflectrm.core.types import messages_to_dicts
from reflectrm.demo.heldout import EVAL_SEED
from reflectrm.demo.tasks import make_pair, make_pairs, reflection_example, response_analysis, response_example, slip

log = logging.getLogger(__name__)

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TRAIN_SEED = 1234


NUMBER_TOKENS = 1000
"""Every integer below this is one token."""


def build_tokenizer(texts: list[str], *, vocab_size: int, spaced_numbers: bool = False) -> Any:
    """A byte-level BPE trained offline, with every integer 0..999 a single token.

    Whole-number tokens make the problem's arithmetic and the answer checks (a subtraction each)
    single-token facts, which a short training learns in part: the source of the judge's mistakes.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    numbers = [" ".join(str(i) for i in range(NUMBER_TOKENS))]
    if spaced_numbers:  # " 17" is one token too (and a different one from "17"): equations cost half the tokens
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        numbers.append("\n".join(str(i) for i in range(NUMBER_TOKENS)))
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=False), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size + len(numbers) * NUMBER_TOKENS, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([*texts, *(numbers * 20)], trainer=trainer)
    forms = ("{}", " {}") if spaced_numbers else ("{}",)
    missing = [f.format(i) for i in range(NUMBER_TOKENS) for f in forms if len(tok.encode(f.format(i)).ids) != 1]
    if missing:
        raise RuntimeError(f"{len(missing)} numbers are not single tokens (e.g. {missing[:5]}): raise --vocab-size")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None,
        bos_token=None, padding_side="left", model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


class Example(NamedTuple):
    prompt: str
    target: str
    learn_result: bool = True  # False: the analysis's computed result is a given mistake, not taught


def training_texts(n_pairs: int, *, seed: int, refl_every: int, mistake_frac: float = 0.25) -> list[Example]:
    """Training examples: every pair gives a preference example, every `refl_every`-th also a
    reflection example. A `mistake_frac` of the preference examples work from a wrong result (the
    wrong response's, or another plausible slip) and check the answers against it, with the wrong
    result itself left out of the loss: the model learns to compare what it computed with what the
    responses say, rather than "exactly one answer is right"."""
    from transformers import PreTrainedTokenizerFast  # noqa: F401  (fail early without the extra)

    rng = random.Random(seed)
    out = []
    for i in range(n_pairs):
        pair = make_pair(rng, index=i, source="demo-train")
        if rng.random() < mistake_frac:
            analysis, choice = response_analysis(pair, slip(rng, pair, invent=0.5))
            out.append(Example(render_prompt(response_prompt(pair)), format_output(analysis, choice, task=Task.RESPONSE), False))
        else:
            out.append(Example(render_prompt(response_prompt(pair)), response_example(pair)))
        if i % refl_every == 0:
            c1, c2, target = reflection_example(rng, pair)
            out.append(Example(render_prompt(reflection_prompt(pair, c1, c2)), target))
    return out


def writable_folder(out: Path) -> str | None:
    """Why a build could not write its model to `out` (None: it can), without creating anything: a build
    that fails or is stopped must leave no empty folder behind."""
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file: pass a folder"
    base = out
    while not base.exists():
        if base.parent == base:
            break
        base = base.parent
    if not base.is_dir():
        return f"--out {out}: {base} is a file, so the folder cannot be created: pick another path"
    if out.is_dir() and any(out.iterdir()) and not any((out / n).is_file() for n in ("demo_card.json", "config.json")):
        return (f"--out {out} holds files that are not a model's, and a build replaces the whole folder: "
                "pass a new or empty folder")
    try:  # a folder made and removed at once: the only sure test (os.access says yes to root, even on /proc)
        os.rmdir(tempfile.mkdtemp(prefix=".reflectrm-probe-", dir=base))
    except OSError as exc:
        return f"--out {out}: {base} is not writable ({exc.strerror}): pick a writable folder"
    return None


def save_atomically(where: Path, write: Callable[[Path], None]) -> None:
    """Run `write` into a fresh sibling folder, then put it in place of `where` in one rename: a build stopped
    while saving leaves the previous model (or none) whole, never a mix of old and new files."""
    where.parent.mkdir(parents=True, exist_ok=True)
    fresh = where.parent / f".{where.name}.saving-{os.getpid()}"
    old = where.parent / f".{where.name}.replaced-{os.getpid()}"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    try:
        write(fresh)
        if where.exists():
            where.rename(old)
        fresh.rename(where)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        if old.exists() and not where.exists():
            old.rename(where)
        raise
    shutil.rmtree(old, ignore_errors=True)


def render_prompt(prompt: list) -> str:
    """The chat-template rendering of a prompt with the generation prompt (matches the backend)."""
    from jinja2 import Template

    return Template(CHAT_TEMPLATE).render(messages=messages_to_dicts(prompt), add_generation_prompt=True)


def build_model(vocab_size: int, tokenizer: Any) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,  # many narrow heads: copying numbers from the prompt needs attention patterns
        num_key_value_heads=4,
        head_dim=32,  # vLLM's CPU attention needs head_dim >= 32
        max_position_embeddings=4096,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    return Qwen3ForCausalLM(config)


RESULT = re.compile(r"^<Analysis>[^=]*= (-?\d+)\.")
"""The analysis's computed result."""
DECISIVE = (
    re.compile(r"= (-?\d+), (?:right|wrong)\."),  # each check's difference
    re.compile(r"\d, (right|wrong)\."),  # each check's word
    re.compile(r"<Result>(?:Response|Critique) (\d)"),  # the verdict
)
"""With the computed result, the tokens that carry a decision (each check's right / wrong, the
verdict) weigh more in the loss: they are 4 tokens of a ~50-token target, and the model otherwise
settles for the prior."""


def _arith_spans(ex: Example) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """This domain's (decisive, untaught) spans: the decisions, and the computed result (taught or not)."""
    result = [RESULT.search(ex.target).span(1)]
    decisive = [m.span(1) for pattern in DECISIVE for m in pattern.finditer(ex.target)]
    return (decisive + result, []) if ex.learn_result else (decisive, result)


def _positions(offsets: list[tuple[int, int]], spans: list[tuple[int, int]], *, start: int) -> list[int]:
    """Sequence positions (target offset + `start`) of the tokens overlapping any character span."""
    return [start + i for i, (a, b) in enumerate(offsets) if any(a < e and s < b for s, e in spans)]


def _batches(examples: list[tuple[list[int], int, list[int]]], batch_size: int, rng: random.Random):
    """Length-bucketed batches of indices into `examples` (ids first), reshuffled every epoch."""
    while True:
        order = sorted(range(len(examples)), key=lambda i: (len(examples[i][0]), rng.random()))
        chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        rng.shuffle(chunks)
        yield from chunks


def train(
    model: Any,
    tokenizer: Any,
    examples: list[Example],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    checkpoint: Any = None,
    checkpoint_every: int = 0,
    decision_weight: float = 8.0,
    spans: Any = None,
) -> list[float]:
    """Supervised fine-tuning on the targets only (prompt tokens are masked out of the loss).

    `spans(example)` gives the target's (decisive, untaught) character spans: tokens that weigh
    `decision_weight` and tokens left out of the loss. Default: this domain's `_arith_spans`."""
    import torch

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    prompts = tokenizer([ex.prompt for ex in examples], add_special_tokens=False)["input_ids"]
    targets = tokenizer([ex.target for ex in examples], add_special_tokens=False, return_offsets_mapping=True)
    encoded = []
    for ex, p, t, offsets in zip(examples, prompts, targets["input_ids"], targets["offset_mapping"]):
        weighted, left_out = (spans or _arith_spans)(ex)
        decisive = _positions(offsets, weighted, start=len(p))
        untaught = _positions(offsets, left_out, start=len(p))
        encoded.append((p + t + [eos], len(p), decisive, untaught))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    )
    rng = random.Random(0)
    batches = _batches(encoded, batch_size, rng)
    bf16 = cpu_has_bf16()  # bf16 autocast only where native: emulated, it is many times slower than fp32
    log.info("training in %s", "bf16 autocast" if bf16 else "fp32 (this CPU has no AVX512-BF16 or AMX)")
    model.train()
    losses = []
    started = time.perf_counter()
    for step in range(steps):
        idx = next(batches)
        width = max(len(encoded[i][0]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        labels = torch.full((len(idx), width), -100, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        weights = torch.zeros((len(idx), width), dtype=torch.float)
        for row, i in enumerate(idx):
            seq, plen, decisive, untaught = encoded[i]
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, plen : len(seq)] = torch.tensor(seq[plen:])
            mask[row, : len(seq)] = 1
            weights[row, plen : len(seq)] = 1.0
            weights[row, decisive] = decision_weight
            weights[row, untaught] = 0.0
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()  # [B, T-1, V]
        target = labels[:, 1:]
        per_token = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100, reduction="none"
        ).view_as(target)
        weights = weights[:, 1:]
        loss = (per_token * weights).sum() / weights.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            log.info("step %d/%d loss %.4f (%.0fs)", step + 1, steps, losses[-1], time.perf_counter() - started)
        if checkpoint is not None and checkpoint_every and (step + 1) % checkpoint_every == 0 and step + 1 < steps:
            checkpoint(step + 1)
    model.eval()
    return losses


def evaluate(model_dir: Path, *, n_pairs: int, seed: int = EVAL_SEED) -> dict[str, Any]:
    """Parse rate of sampled outputs and greedy / two-stage accuracy on held-out pairs, judged by the evaluation
    runner (`reflectrm.eval.runner.evaluate`, what `reflectrm eval` runs): both strategies from one pass per pair."""
    from reflectrm.backends import load_backend
    from reflectrm.core.config import JudgeConfig
    from reflectrm.eval.runner import EvalPlan
    from reflectrm.eval.runner import evaluate as run

    backend = load_backend(str(model_dir))
    pairs = make_pairs(n_pairs, seed=seed, source="demo-heldout")
    config = JudgeConfig(max_new_tokens=96, reflection_max_new_tokens=96)
    judged = [(item, j) for batch in run(pairs, backend, config, plan=EvalPlan(strategies=("reflectrm", "greedy")),
                                          done=set()) for item, j in batch if j is not None]
    greedy = [j for item, j in judged if item.strategy == "greedy"]
    two_stage = [j for item, j in judged if item.strategy == "reflectrm"]
    samples = [r for j in two_stage for r in j.rollouts]
    reflections = [r for j in two_stage for r in j.reflections]
    by_kind: dict[str, list[bool]] = {}
    for j in greedy:
        by_kind.setdefault(j.pair.subset, []).append(bool(j.correct))
    return {
        "heldout_pairs": n_pairs,
        "sample_parse_rate": sum(r.parseable for r in samples) / len(samples),
        "reflection_parse_rate": sum(r.status.parseable for r in reflections) / max(1, len(reflections)),
        "greedy_accuracy": sum(bool(j.correct) for j in greedy) / len(greedy),
        "greedy_accuracy_by_kind": {k: sum(v) / len(v) for k, v in sorted(by_kind.items())},
        "sample_accuracy": sum(r.prediction == j.pair.label for j in two_stage for r in j.rollouts) / len(samples),
        "reflectrm_accuracy": sum(bool(j.correct) for j in two_stage) / len(two_stage),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="where to write the model (the shipped judge is a running-sum one)")
    ap.add_argument("--steps", type=int, default=1800, help="optimizer steps")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--pairs", type=int, default=24000, help="synthetic training pairs")
    ap.add_argument("--vocab-size", type=int, default=640)
    ap.add_argument("--eval-pairs", type=int, default=150, help="held-out pairs to evaluate (0 = skip)")
    ap.add_argument("--seed", type=int, default=TRAIN_SEED)
    ap.add_argument("--checkpoint-every", type=int, default=0, help="also save DIR-stepN every N steps (0 = never)")
    ap.add_argument("--eval-only", action="store_true", help="evaluate the model at --out and update its card")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.eval_only:
        card_path = args.out / "demo_card.json"
        card = json.loads(card_path.read_text()) if card_path.exists() else {}
        card["eval"] = evaluate(args.out, n_pairs=args.eval_pairs)
        card_path.write_text(json.dumps(card, indent=2) + "\n")
        print(json.dumps(card, indent=2))
        return 0
    import torch

    torch.manual_seed(args.seed)
    started = time.perf_counter()
    examples = training_texts(args.pairs, seed=args.seed, refl_every=2)
    tokenizer = build_tokenizer([ex.prompt + ex.target for ex in examples[:6000]], vocab_size=args.vocab_size)
    model = build_model(len(tokenizer), tokenizer)
    log.info("model: %.2fM parameters; %d examples", sum(p.numel() for p in model.parameters()) / 1e6, len(examples))
    def save(where: Path) -> None:
        def write(folder: Path) -> None:
            model.save_pretrained(folder, state_dict={k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
            tokenizer.save_pretrained(folder)

        save_atomically(where, write)

    losses = train(model, tokenizer, examples, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                   checkpoint=lambda step: save(args.out.parent / f"{args.out.name}-step{step}"),
                   checkpoint_every=args.checkpoint_every)
    save(args.out)
    train_s = time.perf_counter() - started
    card: dict[str, Any] = {
        "what": "ReflectRM demo judge: a tiny Qwen3-architecture model trained on synthetic arithmetic judging",
        "parameters": sum(p.numel() for p in model.parameters()),
        "build_args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "out"},
        "train_seconds": round(train_s, 1),
        "final_loss": sum(losses[-20:]) / len(losses[-20:]),
    }
    if args.eval_pairs:
        card["eval"] = evaluate(args.out, n_pairs=args.eval_pairs)
    (args.out / "demo_card.json").write_text(json.dumps(card, indent=2) + "\n")
    print(json.dumps(card, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
