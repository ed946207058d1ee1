"""The reward service under an RL run's load: concurrent clients against `reflectrm serve`, and the offline bound.

    python bench/serve_load.py [--clients 1,4,16,64] [--groups 16] [--n 8] [--max-new-tokens 1024]
                               [--shape demo|qwen3-0.6b] [--backend transformers|vllm|openai --base-url URL]
                               [--design batched|serial|both] [--serial-clients 16] [--db sqlite:///load.db]
                               [--soak SECONDS]

The service runs in this process (uvicorn in a thread, on 127.0.0.1) over one backend. For each
client count, that many clients (threads, one connection each) send requests of one group of
`--group` completions (8) to /v1/rewards, round robin in both orders (28 pairs, 56 judgments a
group), until `--groups` groups (at least one per client) are answered; a 429 waits its Retry-After
and is sent again (and counted). Printed per row: groups/s, latency p50 / p95 / p99, 429s, errors, batches and requests per
batch, and the share of the wall time the backend spent generating. In the same run, the same
groups (the same seeds, so the same generations; vLLM's prefix cache emptied before each pass) are
judged offline in one `group_rewards` call by the same backend (one stage-1 and one
stage-2 batch): the `ratio` column is served groups/s over that offline groups/s. `--design serial`
serves one request at a time (the design before batching across requests) for the baseline ratio
(`--serial-clients` picks its client counts).

`--shape qwen3-0.6b` judges with a random-weight model of Qwen3-0.6B's shape and the demo tokenizer
(bench/judge_speed.py builds it offline under --cache, once). `--soak SECONDS` then runs
`--soak-clients` clients for that long and prints resident memory after warm-up and at the end,
p95 per tenth of the run (drift), and with `--db` checks that the store holds every answered
request's judgments exactly once (none lost, none duplicated). The last line printed is one JSON
object with every figure. Run `uptime` beside it: the machine may be shared.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
from harness import finish, parser, ratio  # noqa: E402

from reflectrm import flags  # noqa: E402
from reflectrm.backends import EngineConfig, load_backend  # noqa: E402
from reflectrm.backends.config import BackendConfig  # noqa: E402
from reflectrm_app.commands.options import BACKEND_FLAGS  # noqa: E402
from reflectrm.core import JudgeConfig  # noqa: E402
from reflectrm.demo.tasks import make_pairs  # noqa: E402
from reflectrm.serving.rewards import RewardConfig, group_rewards, judgments_needed  # noqa: E402
from reflectrm.serving.server import RewardService, ServeConfig, uvicorn_config  # noqa: E402


def workload(count: int, size: int, seed: int) -> list[tuple[str, list[str]]]:
    """`count` (prompt, group of `size` completions) from the demo's arithmetic tasks, distinct and seeded."""
    pairs = make_pairs(count * size, seed=seed)
    out = []
    for g in range(count):
        prompt = pairs[g * size].conversation[-1].content
        texts = [p.response_1 if k % 2 else p.response_2 for k, p in enumerate(pairs[g * size:(g + 1) * size])]
        out.append((prompt, [f"{t} ({g}.{k})" for k, t in enumerate(texts)]))  # distinct: no free ties
    return out


def start(service: RewardService) -> tuple[str, object]:
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(service, host="127.0.0.1", port=port, log_level="error",
                                           timeout_keep_alive=60))  # the HTTP protocol `serve` runs
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("the service did not start within 60 s")
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}", server


class Load:
    """Clients sending groups until `total` are answered (or `until` passes), with what they saw."""

    def __init__(self, url: str, groups: list[tuple[str, list[str]]]) -> None:
        self.url, self.groups = url, groups
        self.latencies: list[tuple[float, float]] = []  # (finished at, seconds)
        self.too_busy = self.errors = self.answered = 0
        self.next = 0
        self.lock = threading.Lock()

    def take(self, total: int | None, until: float | None, *, first: bool = False) -> tuple[str, list[str]] | None:
        """The next group to send; a timed run's client sends its first even if it started late (a busy machine)."""
        with self.lock:
            late = until is not None and time.monotonic() > until and not first
            if (total is not None and self.next >= total) or late:
                return None
            self.next += 1
            return self.groups[(self.next - 1) % len(self.groups)]

    def client(self, total: int | None, until: float | None) -> None:
        with httpx.Client(timeout=3600) as http:
            first = True
            while (work := self.take(total, until, first=first)) is not None:
                first = False
                prompt, group = work
                started = time.perf_counter()
                while True:
                    try:
                        r = http.post(f"{self.url}/v1/rewards", json={"prompts": [prompt], "completions": [group]})
                    except httpx.HTTPError:
                        r = None
                    if r is not None and r.status_code == 429:
                        with self.lock:
                            self.too_busy += 1
                        time.sleep(float(r.headers.get("Retry-After", "1")))
                        continue
                    break
                with self.lock:
                    if r is not None and r.status_code == 200:
                        self.answered += 1
                        self.latencies.append((time.monotonic(), time.perf_counter() - started))
                    else:
                        self.errors += 1

    def run(self, clients: int, *, total: int | None = None, seconds: float | None = None) -> float:
        until = time.monotonic() + seconds if seconds else None
        threads = [threading.Thread(target=self.client, args=(total, until)) for _ in range(clients)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - started


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile of `values`; None (JSON null) when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def shown(value: float | None) -> float:
    """A figure for the table (nan prints as such; the JSON line keeps null)."""
    return float("nan") if value is None else value


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def offline(backend, groups, judge_config, reward_config) -> float:  # noqa: ANN001
    """Seconds to judge `groups` in one batch, offline (no HTTP, no queue)."""
    started = time.perf_counter()
    group_rewards([p for p, _ in groups], [g for _, g in groups], backend, judge_config=judge_config,
                  config=RewardConfig(both_orders=reward_config.both_orders, seed=reward_config.seed,
                                      batch_size=1 << 20))
    return time.perf_counter() - started


def fresh_cache(backend) -> None:  # noqa: ANN001
    """Empty the vLLM engine's prefix cache, so that judging the same groups twice costs the same both times."""
    llm = getattr(backend, "llm", None)
    if llm is not None and hasattr(llm, "reset_prefix_cache"):
        llm.reset_prefix_cache()


def row(design: str, clients: int, backend, judge_config, reward_config, args, record):  # noqa: ANN001
    count = max(args.groups, clients)  # every client sends at least once: 64 clients are 64 concurrent requests
    groups = workload(count, args.group, seed=1000 * clients + (design == "serial"))
    config = ServeConfig(max_queue=max(64, clients), max_judgments=4096, batch_window_s=args.window_ms / 1000,
                         round_requests=1 if design == "serial" else None, round_judgments=1 << 20)
    service = RewardService(backend, judge_config=judge_config, reward_config=reward_config, config=config,
                            record=record)
    url, server = start(service)
    fresh_cache(backend)
    try:
        load = Load(url, groups)
        wall = load.run(clients, total=len(groups))
    finally:
        server.should_exit = True
    # the same groups (same seeds: same generations, same lengths), from a cold prefix cache as the service had
    fresh_cache(backend)
    offline_s = offline(backend, groups, judge_config, reward_config)
    lat = [s for _, s in load.latencies]
    served, bound = load.answered / wall, count / offline_s
    c = service.counters
    return {"design": design, "clients": clients, "groups": load.answered, "groups_per_s": served,
            "p50_s": pct(lat, 0.5), "p95_s": pct(lat, 0.95), "p99_s": pct(lat, 0.99), "429s": load.too_busy,
            "errors": load.errors, "offline_groups_per_s": bound, "ratio": ratio(served, bound),
            "batches": c["batches"], "requests_per_batch": c["batched_requests"] / max(1, c["batches"]),
            "generating_share": c["generation_seconds"] / wall}


def soak(backend, judge_config, reward_config, args, record, store):  # noqa: ANN001
    groups = workload(max(args.groups, 64), args.group, seed=99)
    config = ServeConfig(max_queue=64, batch_window_s=args.window_ms / 1000, round_judgments=1 << 20)
    service = RewardService(backend, judge_config=judge_config, reward_config=reward_config, config=config,
                            record=record)
    url, server = start(service)
    before = store.counts()["judgments"] if store else 0
    warm = Load(url, groups)
    warm.run(args.soak_clients, seconds=min(60.0, args.soak / 10))
    rss_warm, started = rss_mib(), time.monotonic()
    load = Load(url, groups)
    load.run(args.soak_clients, seconds=args.soak)
    rss_end = rss_mib()
    server.should_exit = True
    tenth = args.soak / 10
    p95s = [pct([s for t, s in load.latencies if started + k * tenth <= t < started + (k + 1) * tenth], 0.95)
            for k in range(10)]
    per_group = judgments_needed(args.group, config=reward_config)
    out = {"soak_s": args.soak, "clients": args.soak_clients, "answered": load.answered, "429s": load.too_busy,
           "errors": load.errors, "rss_warm_mib": rss_warm, "rss_end_mib": rss_end,
           "rss_growth": rss_end / rss_warm - 1, "p95_by_tenth_s": p95s}
    if store:
        answered = warm.answered + load.answered
        stored = store.counts()["judgments"] - before
        out.update({"stored_judgments": stored, "expected_judgments": answered * per_group,
                    "store_exact": stored == answered * per_group})
    return out


def load_judge_speed():
    path = Path(__file__).resolve().with_name("judge_speed.py")
    spec = importlib.util.spec_from_file_location("bench_judge_speed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_backend(args):  # noqa: ANN001, ANN201
    judge = flags.config_from_args(BackendConfig, args)  # --backend, --device, --threads as `judge` reads them
    if judge.backend == "openai":
        if not args.base_url:
            raise SystemExit("--backend openai needs --base-url (one or more, comma-separated)")
        return load_backend(BackendConfig(backend="openai"), EngineConfig(base_urls=tuple(args.base_url.split(","))))
    judge = replace(judge, model=load_judge_speed().shaped_model(args.cache, args.shape))
    if judge.backend == "vllm":
        return load_backend(replace(judge, backend="vllm", threads=None),
                            EngineConfig(dtype=args.dtype, kv_cache_gib=args.kv_cache_gib))
    return load_backend(judge)  # threads: judge's rule


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__)
    ap.add_argument("--clients", default="1,4,16,64", help="comma-separated client counts")
    ap.add_argument("--groups", type=int, default=16,
                    help="groups answered per row, at least one per client (default 16)")
    ap.add_argument("--serial-clients", help="client counts for the serial design (default: those of --clients)")
    ap.add_argument("--group", type=int, default=8, help="completions per group (default 8)")
    ap.add_argument("--n", type=int, default=8, help="stage-1 samples N (default 8)")
    ap.add_argument("--max-new-tokens", type=int, default=1024, help="per analysis and reflection (default 1024)")
    ap.add_argument("--design", default="both", choices=("batched", "serial", "both"))
    ap.add_argument("--window-ms", type=float, default=10.0, help="the service's idle batch window (default 10)")
    ap.add_argument("--shape", default="demo", choices=("demo", "qwen3-0.6b"))
    # the judge's backend, device and threads as `reflectrm judge` takes them (BackendConfig); --shape is its model
    flags.add_config_flags(ap.add_argument_group("model and backend (BackendConfig)"), BackendConfig,
                           extra=BACKEND_FLAGS, skip=("model",))
    ap.add_argument("--base-url", help="openai backend: comma-separated server URLs")
    ap.add_argument("--dtype", default="float32", help="vllm backend dtype (default float32)")
    ap.add_argument("--kv-cache-gib", type=float, default=2.0)
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "reflectrm-bench")
    ap.add_argument("--db", help="store every served judgment here (a soak checks none lost or duplicated)")
    ap.add_argument("--soak", type=float, default=0.0, help="after the table, a soak of this many seconds")
    ap.add_argument("--soak-clients", type=int, default=16)
    ap.add_argument("--skip-table", action="store_true", help="only the soak")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    random.seed(0)

    backend = make_backend(args)
    judge_config = JudgeConfig(n=args.n, max_new_tokens=args.max_new_tokens,
                               reflection_max_new_tokens=args.max_new_tokens)
    reward_config = RewardConfig()
    store = record = None
    if args.db:
        from reflectrm_db.services import JudgmentStore

        store = JudgmentStore.open(args.db)
        record = lambda judgments, swapped: store.record(judgments, swapped=swapped)  # noqa: E731
    offline(backend, workload(2, args.group, seed=5), judge_config, reward_config)  # warm-up
    rows = []
    designs = ("serial", "batched") if args.design == "both" else (args.design,)
    if not args.skip_table:
        print(f"{backend.name} {args.shape}: groups of {args.group}, both orders, n={args.n}, "
              f"max_new_tokens={args.max_new_tokens}, {args.groups} groups per row", flush=True)
        print(f"{'design':8} {'clients':>7} {'groups/s':>9} {'p50 s':>7} {'p95 s':>7} {'p99 s':>7} {'429s':>5} "
              f"{'errors':>6} {'offline/s':>9} {'ratio':>6} {'req/batch':>9} {'gen share':>9}", flush=True)
        counts = {"batched": args.clients, "serial": args.serial_clients or args.clients}
        for design in designs:
            for clients in (int(c) for c in counts[design].split(",")):
                r = row(design, clients, backend, judge_config, reward_config, args, record)
                rows.append(r)
                print(f"{design:8} {clients:7d} {r['groups_per_s']:9.3f} {shown(r['p50_s']):7.2f} "
                      f"{shown(r['p95_s']):7.2f} {shown(r['p99_s']):7.2f} {r['429s']:5d} {r['errors']:6d} "
                      f"{r['offline_groups_per_s']:9.3f} {shown(r['ratio']):6.2f} {r['requests_per_batch']:9.1f} "
                      f"{r['generating_share']:9.2f}", flush=True)
    result = {"backend": backend.name, "shape": args.shape, "n": args.n, "max_new_tokens": args.max_new_tokens,
              "group": args.group, "rows": rows}
    if args.soak:
        result["soak"] = soak(backend, judge_config, reward_config, args, record, store)
        print(f"soak: {json.dumps(result['soak'])}", flush=True)
    if store is not None:
        store.close()
    finish(result)  # the last line: every figure, and the load at the end
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
