"""Where does a running-sum demo judge go wrong? A one-minute probe, before a 25-minute benchmark.

    python research/demo_probe.py --model DIR [--pairs 48]

On held-out pairs of the judge's own ranges (its card's), two measurements for each task:

* teacher-forced: fed the right output, how often does the judge's next token match it, per kind of
  token (a step's quoted operation, its result, a check's difference; a reflection's copy of Critique
  1's value, of Critique 2's, the walk's subtraction, its "walk on or stop", the inverse check, the
  decision). A kind near 50 % is a skill the build has not learned;
* free-running (greedy): the output exactly right, or the kind of token where it first leaves the
  right one; and the verdict right, for reflections split into the kinds of disagreement.

Reflections are judged on the build's own training mix (right against wrong critiques, two wrong ones,
a check worked wrong, critiques that agree) with slipped critiques only, in both presentation orders
by `Balance`. It found, in one minute each, that a judge never learned to stop its walk where two
values differ (53 % teacher-forced: the reason reflections walked to the right step 2.7 % of the time)
and that it computed where it had to copy. The last line printed is one JSON object.
"""

from __future__ import annotations

import os
import random
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the shared bench harness
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # research.demojudge

from reflectrm.core.config import counting  # noqa: E402
from reflectrm.core.prompts import reflection_prompt, response_prompt  # noqa: E402
from reflectrm.demo import steps  # noqa: E402
from research.demojudge.build import render_prompt  # noqa: E402
from reflectrm.demo import running_sum_card  # noqa: E402
from reflectrm.demo.heldout import heldout_pairs, ranges_of  # noqa: E402
from reflectrm.errors import ReflectRMError  # noqa: E402
from harness import finish, parser  # bench/harness.py (this script puts bench/ on the path above)

PROBE_SEED = 4242
RESPONSE_TOKENS = (
    ("quote op", r"Step \d+: (add|subtract) \d+,"), ("quote operand", r"Step \d+: (?:add|subtract) (\d+),"),
    ("step x", r", (-?\d+) [-+] \d+ = "), ("step result", r"\d+ = (-?\d+)\. "),
    ("check stated", r"Response \d: (-?\d+) - "), ("check computed", r"Response \d: -?\d+ - (-?\d+)"),
    ("check difference", r"Response \d: -?\d+ - -?\d+ = (-?\d+)"), ("check word", r"= -?\d+, (right|wrong)\."),
    ("verdict", r"<Result>Response (\d)"),
)
REFLECTION_TOKENS = (
    ("copy c1 quote", r"Step \d+: (add|subtract) \d+,"),
    ("copy c1 value", r"Step \d+: \w+ \d+, -?\d+ [-+] \d+ = (-?\d+);"),
    ("copy c2 quote", r"; (add|subtract) \d+,"),
    ("copy c2 value", r"; (?:add|subtract) \d+, -?\d+ [-+] \d+ = (-?\d+);"),
    ("walk subtraction", r"; -?\d+ - -?\d+ = (-?\d+)\."),
    ("walk on or stop", r"(?:^<Analysis>|\. )(Step|The question|The critiques|Response)"),
    ("question read", r"The question says (\w+ \d+)"),
    ("inverse check", r"Check (-?\d+ [-+] \d+ = -?\d+, -?\d+ - -?\d+ = -?\d+)"),
    ("check afresh", r"Response \d: (-?\d+ - -?\d+ = -?\d+), Critique"),
    ("decision", r"Critique (\d) is right"), ("verdict", r"<Result>Critique (\d)"),
)


def spans(target: str, kinds) -> list[tuple[tuple[int, int], str]]:
    return [(m.span(1), name) for name, pattern in kinds for m in re.finditer(pattern, target)]


class Probe:
    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)  # one thread: on the shared 2-core machines two are often slower
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.eos = self.tok.convert_tokens_to_ids("<|im_end|>")

    def teacher_forced(self, prompts: list[str], targets: list[str], kinds) -> dict[str, list[int]]:
        stats: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for prompt, target in zip(prompts, targets):
            pid = self.tok(prompt, add_special_tokens=False)["input_ids"]
            enc = self.tok(target, add_special_tokens=False, return_offsets_mapping=True)
            with self.torch.no_grad():
                logits = self.model(self.torch.tensor([pid + enc["input_ids"]])).logits[0]
            pred = logits[len(pid) - 1:-1].argmax(-1).tolist()
            tagged = spans(target, kinds)
            for j, ((a, b), gold) in enumerate(zip(enc["offset_mapping"], enc["input_ids"])):
                for (s, e), name in tagged:
                    if a < e and s < b:
                        stats[name][0] += pred[j] == gold
                        stats[name][1] += 1
        return stats

    def greedy(self, prompts: list[str], max_new: int = 256, batch: int = 32) -> list[str]:
        self.tok.padding_side = "left"
        out = []
        for i in range(0, len(prompts), batch):
            enc = self.tok(prompts[i:i + batch], add_special_tokens=False, return_tensors="pt", padding=True)
            with self.torch.no_grad():
                g = self.model.generate(**enc, max_new_tokens=max_new, do_sample=False, eos_token_id=self.eos,
                                        pad_token_id=self.tok.pad_token_id)
            out += self.tok.batch_decode(g[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out


def first_departure(output: str, target: str, kinds) -> str:
    """"exact", or the kind of the target's token where `output` first leaves it."""
    if output.strip() == target.strip():
        return "exact"
    n = next((k for k, (x, y) in enumerate(zip(output, target)) if x != y), min(len(output), len(target)))
    hit = [name for (s, e), name in sorted(spans(target, kinds)) if s <= n <= e]
    return hit[0] if hit else "other"


def verdict(text: str, noun: str) -> int | None:
    m = re.search(rf"<Result>{noun} (\d)", text)
    return int(m[1]) if m else None


def rates(stats: dict[str, list[int]]) -> dict[str, float]:
    return {name: round(ok / n, 4) for name, (ok, n) in stats.items() if n}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--model", type=Path, required=True, help="a running-sum demo judge (its folder)")
    ap.add_argument("--pairs", type=counting, default=48,
                    help="held-out pairs (each gives a response and a reflection)")
    args = ap.parse_args(argv)
    try:
        card = running_sum_card(args.model, args.pairs)
        ranges = ranges_of(card)
        pairs = heldout_pairs(card, args.pairs, seed=PROBE_SEED, source="demo-probe")
        probe = Probe(args.model)
    except ReflectRMError as exc:
        ap.exit(2, f"{ap.prog}: error: {exc}\n")
    figures: dict = {"model": str(args.model), "ranges": ranges.name, "pairs": len(pairs)}

    prompts = [render_prompt(response_prompt(p)) for p in pairs]
    targets = [steps.response_example(p) for p in pairs]
    outputs = probe.greedy(prompts)
    figures["response"] = {
        "teacher_forced": rates(probe.teacher_forced(prompts, targets, RESPONSE_TOKENS)),
        "free_running": dict(Counter(first_departure(o, t, RESPONSE_TOKENS) for o, t in zip(outputs, targets))),
        "verdict_right": sum(verdict(o, "Response") == p.label for o, p in zip(outputs, pairs)) / len(pairs),
    }

    rng, balance = random.Random(PROBE_SEED), steps.Balance()
    examples = [steps.reflection_example(rng, p, balance, misread_frac=0.0, ranges=ranges) for p in pairs]
    prompts = [render_prompt(reflection_prompt(p, c1, c2)) for p, (c1, c2, _, _) in zip(pairs, examples)]
    targets = [target for _, _, target, _ in examples]
    outputs = probe.greedy(prompts)
    by_kind: dict[str, list[bool]] = defaultdict(list)
    for o, t, (*_, kind) in zip(outputs, targets, examples):
        by_kind[re.sub(r"\d+", "N", kind)].append(verdict(o, "Critique") == verdict(t, "Critique"))
    decisive = [ok for kind, oks in by_kind.items() if kind != "agree" for ok in oks]
    figures["reflection"] = {
        "teacher_forced": rates(probe.teacher_forced(prompts, targets, REFLECTION_TOKENS)),
        "free_running": dict(Counter(first_departure(o, t, REFLECTION_TOKENS) for o, t in zip(outputs, targets))),
        "verdict_right_by_kind": {k: [sum(v), len(v)] for k, v in sorted(by_kind.items())},
        "verdict_right_where_critiques_differ": sum(decisive) / max(1, len(decisive)),
        "picks_critique_1": sum(verdict(o, "Critique") == 1 for o in outputs) / len(outputs),
    }
    for task in ("response", "reflection"):
        print(f"== {task}")
        for name, rate in figures[task]["teacher_forced"].items():
            print(f"  teacher-forced {name:18s} {rate:7.1%}")
        print("  free-running (first departure):", figures[task]["free_running"])
    print(f"greedy verdict right {figures['response']['verdict_right']:.1%}; reflections right where the critiques "
          f"differ {figures['reflection']['verdict_right_where_critiques_differ']:.1%}")
    return finish(figures)


if __name__ == "__main__":
    raise SystemExit(main())
