"""Build a demo judge on the multi-step domain (`reflectrm.demo.steps`), with build.py's machinery.

    python -m research.demojudge.steps_build --out DIR [--steps N] [--lr X] [--carry-drop P] [--init DIR]
    python -m research.demojudge.steps_build --out DIR --recipe careless

Same tokenizer (every integer below 1000 one token), the same 3.8 M-parameter Qwen3 and the same
training loop as `research.demojudge.build`; only the data differ: running sums of 4-6 steps, and
reflections that check the first equation where two critiques differ by its inverse. Writes the
model, tokenizer and `demo_card.json` (build arguments, time, the training problems' seed) to --out.

`--recipe careless` runs the stages of the careless judge on which reflection measurably helps (the
README's demo section): a careful judge first, then the careless habit. Each stage but the last is
kept beside --out as DIR-stageK (a stopped recipe continues from one with --init); the last stage's
card names every stage before it. About 2 hours on 2 CPU cores. It does not reproduce the README's c2:
c2's first stage was trained on an earlier walk format, and a run of this recipe (r1) never learned to reflect.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from reflectrm.core.config import counting, share
from reflectrm.defaults import DEMO_MODEL_DIR
from reflectrm.demo.heldout import TRAIN_SEED, lessons, write_trained_problems
from reflectrm.demo.steps import DEFAULT_RANGES, DOMAIN_KEY, RANGES
from research.demojudge.build import build_model, build_tokenizer, render_prompt, save_atomically, train, writable_folder

log = logging.getLogger(__name__)

class StepExample(NamedTuple):
    prompt: str
    target: str
    untaught: tuple[tuple[int, int], ...] = ()  # character spans of the target left out of the loss


DECISIVE = (
    re.compile(r"= (-?\d+)[.,;]"),  # every equation's result (steps, both copies in a reflection, the inverse check)
    re.compile(r"(-?\d+) [-+] \d+ = "),  # its first operand (copied from the question or the previous step)
    re.compile(r"-?\d+ [-+] (\d+) = "),  # and its second; a build that weighed only results never learned to copy them
    re.compile(r"(?:Step \d+:|;) (add|subtract) \d+,"),  # the question's step, quoted (both critiques' in a reflection)
    re.compile(r"(?:Step \d+:|;) (?:add|subtract) (\d+),"),
    re.compile(r"-?\d+, (right|wrong)[.;]"),  # each check's word
    # a reflection: walk on, or check here
    re.compile(r"(?:^<Analysis>|\. )(Step|The question|The critiques|Response)"),
    re.compile(r"The question says (add|subtract) \d+"),  # the question's step, read again where the critiques differ
    re.compile(r"The question says (?:add|subtract) (\d+)"),
    re.compile(r"The question says (?:add|subtract) \d+([.,])"),  # a misread (",": Critique 2) or a check (".")
    re.compile(r"Critique (\d) is right"),  # the reflection's decision
    re.compile(r"<Result>(?:Response|Critique) (\d)"),  # the verdict
)


def spans(ex: StepExample) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    decisive = [m.span(1) for pattern in DECISIVE for m in pattern.finditer(ex.target)]
    untaught = list(ex.untaught)
    return [s for s in decisive if s not in untaught], untaught


def training_examples(n_pairs: int, *, seed: int, **stream: Any) -> tuple[list[StepExample], list[Any]]:
    """(examples, pairs): the stage's lessons (`reflectrm.demo.heldout.lessons`, which takes the same keywords and
    draws the same pairs) rendered as the model reads them."""
    taught, pairs = lessons(n_pairs, seed=seed, **stream)
    return [StepExample(render_prompt(list(t.messages)), t.target, t.untaught) for t in taught], pairs


RECIPES: dict[str, tuple[dict[str, Any], ...]] = {
    # c2 of the README: 1750 + 1000 careful steps (its first stage was built on an earlier walk format), then
    # 400 steps that teach dropping the carry at a rate of 0.65 and 300 at 0.7 (a teacher-forced rate of 0.45 results)
    "careless": (
        {"steps": 1750, "lr": 3e-3, "seed": 1234},
        {"steps": 1000, "lr": 2e-3, "seed": 1235},
        {"steps": 400, "lr": 1e-3, "seed": 1250, "carry_drop": 0.65},
        {"steps": 300, "lr": 2e-3, "seed": 1251, "carry_drop": 0.7},
    ),
}
"""Named multi-stage builds: each stage's flags (the rest: --misread-frac 0, narrow ranges, batch 16), each
stage after the first continuing the one before it."""
RECIPE_FLAGS = frozenset({"--out", "--recipe", "--checkpoint-every"})
"""What a recipe leaves to its caller; every other flag is the recipe's."""


def recipe_folders(name: str, out: Path) -> list[Path]:
    """Where each stage of RECIPES[name] writes its model: OUT-stageK, the last one OUT."""
    n = len(RECIPES[name])
    return [out.parent / f"{out.name}-stage{k}" for k in range(1, n)] + [out]


def run_recipe(name: str, out: Path, *, checkpoint_every: int = 0) -> int:
    """Build `out` by the stages of RECIPES[name], each continuing the one before."""
    stages = RECIPES[name]
    init: Path | None = None
    for k, (stage, where) in enumerate(zip(stages, recipe_folders(name, out)), start=1):
        argv = ["--out", str(where), "--misread-frac", "0", "--checkpoint-every", str(checkpoint_every),
                *(["--init", str(init)] if init else [])]
        for flag, value in stage.items():
            argv += [f"--{flag.replace('_', '-')}", str(value)]
        log.info("recipe %s, stage %d of %d: %s", name, k, len(stages), " ".join(argv))
        main(argv, recipe=f"{name} {k}/{len(stages)}")
        init = where
    return 0


def _unusable(args: argparse.Namespace) -> str | None:
    """What is wrong with the build's arguments before any work (None: nothing)."""
    if not (math.isfinite(args.lr) and args.lr > 0):
        return f"--lr {args.lr} must be a positive number"
    if args.checkpoint_every < 0:
        return f"--checkpoint-every {args.checkpoint_every} must be 0 (never) or more"
    if args.init is not None and not (args.init / "demo_card.json").is_file():
        return f"--init {args.init} is not a built demo judge (no demo_card.json): pass the folder a build wrote"
    if args.out.resolve() == DEMO_MODEL_DIR.resolve():
        return f"--out {args.out} is the shipped judge: build elsewhere, then replace it after its benchmark"
    return writable_folder(args.out)


def main(argv: list[str] | None = None, *, recipe: str | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="where to write the model (never the shipped one)")
    ap.add_argument("--steps", type=counting, default=1800, help="optimizer steps")
    ap.add_argument("--batch-size", type=counting, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--pairs", type=counting, default=16000, help="synthetic training pairs")
    ap.add_argument("--vocab-size", type=counting, default=640)
    ap.add_argument("--seed", type=int, default=TRAIN_SEED)
    ap.add_argument("--misread-frac", type=share, default=0.5,
                    help="share of the wrong analyses (taught responses' mistakes, reflections' critiques) that "
                         "misread a step rather than slip; 0 = slips only, as builds before this flag")
    ap.add_argument("--ranges", choices=sorted(RANGES), default=DEFAULT_RANGES.name,
                    help="the problems' numbers: narrow (values 1..40, about 550 facts, all learned in a 20-minute "
                         "build), medium (values 1..60, operands 2..14) or wide (values 1..99, about 2,900)")
    ap.add_argument("--carry-drop", type=share, default=0.0,
                    help="teach a careless judge: its analyses drop the carry when adding 8 or 9 across a ten with "
                         "this probability (reflections always check rightly); 0 = a careful judge")
    ap.add_argument("--both-orders", action="store_true",
                    help="show each reflection's two critiques in both orders (the critique under test as Critique 1 "
                         "and as Critique 2), so reflections check rather than copy Critique 1; the pairs drawn are "
                         "the same as without it")
    ap.add_argument("--init", type=Path, help="continue training this judge (its tokenizer and weights) instead of a new one")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="also save DIR-stepN every N steps (0 = never)")
    ap.add_argument("--recipe", choices=sorted(RECIPES),
                    help="run a named multi-stage build (careless: the stages of the README's c2, about 2 hours on "
                         "2 CPU cores; see the README for what it gives); takes only --out and --checkpoint-every")
    args = ap.parse_args(argv)
    if args.recipe:
        given = [a.split("=", 1)[0] for a in (sys.argv[1:] if argv is None else argv) if a.startswith("--")]
        known = list(ap._option_string_actions)  # argparse accepts unique prefixes (--rec): name each flag in full
        full = {g: next((o for o in known if o == g), None) or next(o for o in known if o.startswith(g)) for g in given}
        other = sorted(set(full.values()) - RECIPE_FLAGS)
        if other:
            them = "it" if len(other) == 1 else "them"
            ap.error(f"--recipe {args.recipe} sets {', '.join(other)} itself: drop {them}")
        for where in recipe_folders(args.recipe, args.out)[:-1]:  # the last is --out, checked below
            if problem := writable_folder(where):
                ap.error(f"a stage of --recipe {args.recipe} writes {where.name} beside --out: {problem}")
    problem = _unusable(args)
    if problem:  # before the build: a path that cannot be used must not cost an hour of training
        ap.error(problem)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.recipe:
        return run_recipe(args.recipe, args.out, checkpoint_every=args.checkpoint_every)
    args.recipe = recipe  # the stage of a recipe this build is, on its card
    import torch

    torch.manual_seed(args.seed)
    started = time.perf_counter()
    examples, _ = training_examples(args.pairs, seed=args.seed, misread_frac=args.misread_frac,
                                    ranges=RANGES[args.ranges], carry_drop=args.carry_drop,
                                    both_orders=args.both_orders)
    if args.init:  # a second training stage: same tokenizer, weights from the first stage
        from transformers import AutoTokenizer, Qwen3ForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(args.init)
        model = Qwen3ForCausalLM.from_pretrained(args.init, torch_dtype=torch.float32)
        before = json.loads((args.init / "demo_card.json").read_text())
        args.prior = {k: before.get(k) for k in ("trained_steps", "train_seconds", "build_args", "prior")}
    else:
        tokenizer = build_tokenizer([ex.prompt + ex.target for ex in examples[:6000]], vocab_size=args.vocab_size,
                                    spaced_numbers=True)
        model = build_model(len(tokenizer), tokenizer)
    log.info("model: %.2fM parameters; %d examples", sum(p.numel() for p in model.parameters()) / 1e6, len(examples))

    def save(where: Path, step: int) -> None:
        save_atomically(where, lambda folder: write(folder, step))

    def write(where: Path, step: int) -> None:
        model.save_pretrained(where, state_dict={k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
        tokenizer.save_pretrained(where)
        card = {
            "what": "ReflectRM demo judge (multi-step running sums; reflections check the first differing step)",
            "domain": DOMAIN_KEY,
            "parameters": sum(p.numel() for p in model.parameters()),
            "build_args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "trained_steps": step,
            "train_seconds": round(time.perf_counter() - started, 1),
        }
        (where / "demo_card.json").write_text(json.dumps(card, indent=2) + "\n")
        write_trained_problems(card, where)  # what it trained on, so a benchmark need not replay the lessons

    train(model, tokenizer, examples, steps=args.steps, batch_size=args.batch_size, lr=args.lr, spans=spans,
          checkpoint=lambda step: save(args.out.parent / f"{args.out.name}-step{step}", step),
          checkpoint_every=args.checkpoint_every)
    save(args.out, args.steps)
    print((args.out / "demo_card.json").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
