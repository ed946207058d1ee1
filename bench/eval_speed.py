"""Evaluation speed on the demo judge: pairs per minute with and without `skip_unanimous`, and the share
of stage-2 generations skipping saved.

    OMP_NUM_THREADS=1 python bench/eval_speed.py [--pairs 24] [--batch-size 8] [--max-new-tokens 96]

Both settings run the same held-out demo pairs through `reflectrm.eval.runner.evaluate` (the path
`reflectrm eval` takes, without the store) with the reflectrm strategy, batch by batch alternating
which setting goes first, in one process, so the ratio is measured under one machine load (printed
from `uptime`). The share of stage-2 generations saved does not depend on the load; the time ratio
does. The last line is one JSON object.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from reflectrm.backends import BackendConfig, load_backend
from reflectrm.backends.base import SamplingParams
from reflectrm.core.config import JudgeConfig
from reflectrm.eval.benchmarks import load_benchmark, select
from reflectrm.eval.runner import EvalPlan, evaluate
from harness import finish, load_line, ratio, parser as bench_parser


@dataclass
class CountingBackend:
    """Counts stage-2 generations (reflections: no log-probs asked) passing to the real backend."""

    real: object
    reflections: int = 0
    samples: int = 0
    calls: list = field(default_factory=list)

    def __getattr__(self, name: str):  # model_id, model_revision, name, check_prompt
        return getattr(self.real, name)

    def generate(self, requests, params: SamplingParams):
        rows = sum(len(r.seeds) for r in requests)
        if params.logprobs:
            self.samples += rows
        else:
            self.reflections += rows
        return self.real.generate(requests, params)


def measure(backend, pairs, *, skip: bool, batch_size: int, max_new_tokens: int) -> dict:
    counting = CountingBackend(backend)
    config = JudgeConfig(max_new_tokens=max_new_tokens, reflection_max_new_tokens=max_new_tokens, skip_unanimous=skip)
    plan = EvalPlan(strategies=("reflectrm",), batch_size=batch_size)
    started = time.perf_counter()
    items = [item for batch in evaluate(pairs, counting, config, plan=plan, done=set()) for item, _ in batch]
    return {"seconds": time.perf_counter() - started, "pairs": len(pairs), "stage1_samples": counting.samples,
            "stage2_generations": counting.reflections, "correct": sum(1 for i in items if i.correct)}


def interleaved(backend, pairs, *, batch_size: int, max_new_tokens: int) -> dict[bool, dict]:
    """Both settings batch by batch, alternating which goes first, so load drift on a shared machine hits both."""
    totals = {False: {}, True: {}}
    for k, start in enumerate(range(0, len(pairs), batch_size)):
        chunk = pairs[start : start + batch_size]
        for skip in ((False, True) if k % 2 == 0 else (True, False)):
            row = measure(backend, chunk, skip=skip, batch_size=batch_size, max_new_tokens=max_new_tokens)
            for key, value in row.items():
                totals[skip][key] = totals[skip].get(key, 0) + value
    for skip, t in totals.items():
        t.update(skip_unanimous=skip, seconds=round(t["seconds"], 1), accuracy=round(t.pop("correct") / t["pairs"], 3),
                 pairs_per_minute=round(60 * t["pairs"] / t["seconds"], 1))
    return totals


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--pairs", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()
    backend = load_backend(BackendConfig(device="cpu"))
    pairs = select(load_benchmark("demo"), limit=args.pairs, seed=1).pairs
    measure(backend, pairs[: args.batch_size], skip=False, batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens)  # warm-up: first calls at a shape are slower
    both = interleaved(backend, pairs, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    full, skipped = both[False], both[True]
    saved = 1 - skipped["stage2_generations"] / max(1, full["stage2_generations"])
    load = load_line()
    for row in (full, skipped):
        print(f"skip_unanimous={row['skip_unanimous']!s:5}  {row['pairs_per_minute']:6.1f} pairs/min  "
              f"stage-2 generations {row['stage2_generations']:4d}  accuracy {row['accuracy']:.3f}")
    print(f"stage-2 generations saved by skip_unanimous: {100 * saved:.1f} %; speedup "
          f"{ratio(skipped['pairs_per_minute'], full['pairs_per_minute'])}x; {load}")
    finish({"pairs": len(pairs), "full": full, "skip_unanimous": skipped, "stage2_saved": round(saved, 3),
            "speedup": ratio(skipped["pairs_per_minute"], full["pairs_per_minute"])})


if __name__ == "__main__":
    main()
