"""Two build stages' two-stage verdicts on the pairs both benches judged: is the later stage better?

    python research/compare_stages.py bench_out/stage4_600.jsonl bench_out/stage5_600.jsonl

Reads the judgments `research/demo_reflection.py --out FILE.json` writes beside its figures (FILE.jsonl) for
two judges, keeps the pairs both judged (by pair id: each held-out set leaves out what its own build trained
on, so a later stage's set can lack a few of an earlier one's), and prints B - A in points with a paired
bootstrap 95 % interval and the exact McNemar p-value. The last line is one JSON object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the shared bench harness

from reflectrm.eval.compare import paired_difference  # noqa: E402
from harness import finish, parser  # noqa: E402


def verdicts(path: Path) -> dict[str, bool]:
    """Pair id -> whether the judgment was right, from a bench's judgments file (one JSON object a line)."""
    out: dict[str, bool] = {}
    try:
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                try:
                    j = json.loads(line)
                    out[str(j["pair"]["id"])] = j["correct"] is True
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise SystemExit(f"compare_stages: {path} line {n}: not a judgment record: pass the .jsonl "
                                     "that research/demo_reflection.py --out writes") from None
    except OSError as exc:
        raise SystemExit(f"compare_stages: {path}: {exc.strerror}: pass the .jsonl that "
                         "research/demo_reflection.py --out writes") from None
    return out


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("a", type=Path, help="the earlier stage's judgments (.jsonl)")
    ap.add_argument("b", type=Path, help="the later stage's judgments (.jsonl)")
    args = ap.parse_args()
    a, b = verdicts(args.a), verdicts(args.b)
    common = sorted(set(a) & set(b))
    if not common:
        raise SystemExit("compare_stages: the two files share no pair: bench both judges with the same --pairs")
    d = paired_difference([float(a[i]) for i in common], [float(b[i]) for i in common])
    e = d["difference"]
    print(f"{len(common)} pairs judged by both ({len(a)} and {len(b)} in all): A {100 * d['accuracy_a']:.1f} %, "
          f"B {100 * d['accuracy_b']:.1f} %, B - A {100 * e['value']:+.1f} points "
          f"[{100 * e['low']:+.1f}, {100 * e['high']:+.1f}], McNemar p {d['mcnemar_p']:.2g} "
          f"({d['only_b']} pairs only B gets right, {d['only_a']} only A)")
    return finish({"a": str(args.a), "b": str(args.b), "pairs": len(common), **d}, with_load=False)


if __name__ == "__main__":
    raise SystemExit(main())
