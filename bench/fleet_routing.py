"""Fleet routing of the openai backend: throughput with one slow server, least-loaded against round robin.

    python bench/fleet_routing.py [--requests 200] [--delay-s 0.02] [--slow 10] [--max-concurrency 4]

Two of the tests' OpenAI-compatible servers (tests/engines/fake_server.py) on 127.0.0.1: one answers each
request after `--delay-s`, the other `--slow` times later. The same `--requests` completions (one seed each)
go through `OpenAIBackend.generate` once per routing, each on fresh servers: `round-robin` (every server an
equal share, the design before least-loaded routing) and `least-loaded`. Printed per routing: seconds,
requests/s and the slow server's share; the last line (one JSON object) adds the throughput ratio
least-loaded / round robin and the load. An ideal split gives each server a share in proportion to its speed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import finish, load_line, parser, ratio, timer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' fake server

from reflectrm.backends.base import GenerationRequest, SamplingParams  # noqa: E402
from reflectrm.backends.engine import EngineConfig  # noqa: E402
from reflectrm.backends.openai_backend import OpenAIBackend  # noqa: E402
from reflectrm.core.types import ChatMessage  # noqa: E402
from tests.engines.fake_server import FakeServer  # noqa: E402

PROMPT = (ChatMessage("user", "Which response is better?"),)


def run(routing: str, args) -> dict:
    fast, slow = FakeServer(delay_s=args.delay_s), FakeServer(delay_s=args.delay_s * args.slow)
    try:
        backend = OpenAIBackend([fast.url, slow.url], config=EngineConfig(routing=routing,
                                                                          max_concurrency=args.max_concurrency))
        with timer() as t:
            [row] = backend.generate([GenerationRequest(PROMPT, tuple(range(args.requests)))],
                                     SamplingParams(max_new_tokens=16, logprobs=True))
        assert [c.text.split()[0] for c in row] == [f"seed{k}" for k in range(args.requests)]
        share = len(slow.answered) / args.requests
    finally:
        fast.close()
        slow.close()
    figures = {"seconds": round(t.seconds, 3), "requests_per_s": round(args.requests / t.seconds, 1),
               "slow_share": round(share, 3)}
    print(f"{routing:>13}: {figures['seconds']:.2f} s, {figures['requests_per_s']} requests/s, "
          f"slow server's share {share:.1%}", flush=True)
    return figures


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--delay-s", type=float, default=0.02, help="the fast server's seconds per request")
    p.add_argument("--slow", type=float, default=10.0, help="how many times slower the slow server is")
    p.add_argument("--max-concurrency", type=int, default=4, help="requests in flight per server")
    args = p.parse_args()
    print(load_line(), flush=True)
    rr, ll = run("round-robin", args), run("least-loaded", args)
    ideal = 1 / (1 + args.slow)  # the slow server's share in proportion to its speed
    return finish({"requests": args.requests, "slow_x": args.slow, "round_robin": rr, "least_loaded": ll,
                   "ideal_slow_share": round(ideal, 3),
                   "throughput_ratio": ratio(ll["requests_per_s"], rr["requests_per_s"])})


if __name__ == "__main__":
    raise SystemExit(main())
