"""Pairs worth showing in the Judge tab: where stage 2 overturns a wrong anchor, on the app's own settings.

    python research/find_examples.py [--model DIR] [--pairs 200] [--show 6]

Judges held-out pairs of the judge's domain exactly as the Judge tab does (the app's default judge settings,
the transformers backend on one thread) and prints those whose anchor is wrong and whose verdict is right,
with the reflection that beat the anchor: the candidates for the domain's `EXAMPLES`. The last line is one
JSON object (the candidates' queries and responses).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the shared bench harness

from reflectrm.backends import BackendConfig, load_backend  # noqa: E402
from reflectrm.core.config import JudgeConfig  # noqa: E402
from reflectrm.demo import DEMO_MODEL_DIR, domain_of, read_card  # noqa: E402
from reflectrm.pipeline import judge_many  # noqa: E402
from harness import finish, parser  # noqa: E402


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--model", default=str(DEMO_MODEL_DIR))
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--show", type=int, default=6)
    args = ap.parse_args()
    domain = domain_of(args.model)
    pairs = domain.heldout_pairs(read_card(args.model), args.pairs, seed=4242, source="examples")
    backend = load_backend(BackendConfig(model=args.model, device="cpu", threads=1))
    found = []
    for j in judge_many(pairs, backend, JudgeConfig(), batch_size=16):
        anchor = j.anchor_rollout
        if anchor is None or anchor.prediction == j.pair.label or not j.correct:
            continue
        beat = [r for r in j.reflections if j.anchor in r.order and r.choice is not None
                and r.order[r.choice - 1] != j.anchor]
        found.append({"query": j.pair.query, "response_1": j.pair.response_1, "response_2": j.pair.response_2,
                      "label": j.pair.label, "winners": len(j.winners), "reflection": beat[0].analysis if beat else ""})
    for f in found[: args.show]:
        print(f"{f['query']}\n  1: {f['response_1']}  2: {f['response_2']}  label {f['label']}, {f['winners']} "
              f"winners\n  {f['reflection'][:400]}\n")
    print(f"{len(found)} of {len(pairs)} pairs: stage 2 overturned a wrong anchor")
    return finish({"overturned": len(found), "pairs": len(pairs), "candidates": found[: args.show]})


if __name__ == "__main__":
    raise SystemExit(main())
