"""Two reward-service replicas on one store against one, under 16 clients: requests/s and their ratio, in one run.

    python bench/serve_replicas.py [--clients 16] [--requests 64] [--n 2] [--max-new-tokens 32]
                                   [--db sqlite:///replicas.db | postgresql://...] [--out DIR]

Each row starts its replicas as real `reflectrm serve --db` processes (the shipped demo judge on
transformers, `--threads` each) on a fresh store: one replica, then two on the same store. `--clients`
threads share one `RewardClient` over the replicas' URLs (least loaded first, a failed request retried on
another) and send `--requests` distinct groups of two completions to /v1/rewards (two judgments each, both
orders). Printed per row: requests/s, seconds, how many judgments the store holds (each once: it must equal
2 x requests) and the machine's load (`uptime`); then `ratio` = two replicas' requests/s over one's. With
`--db postgresql://...` each row needs an empty database of its own: pass two, comma-separated.

Two replicas on one machine share its cores: the ratio measures what a second process adds there (on a
2-core machine, little); on two machines, or one GPU each, it is the scaling an RL run sees.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
from harness import finish, load_line, parser, ratio  # noqa: E402

from reflectrm.serving.client import RewardClient  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(db: str, args) -> tuple[subprocess.Popen, str]:  # noqa: ANN001
    port = free_port()
    cmd = [sys.executable, "-m", "reflectrm_app.cli", "serve", "--port", str(port), "--db", db, "--n", str(args.n),
           "--max-new-tokens", str(args.max_new_tokens), "--device", "cpu", "--threads", str(args.threads),
           "--max-queue", str(max(64, args.clients))]
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)}, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the replica on port {port} exited with {proc.returncode}: run its command by hand")
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("a replica did not start within 300 s")
        time.sleep(0.2)


def groups(count: int, seed: int) -> list[tuple[list[str], list[list[str]]]]:
    """`count` distinct groups of two completions (no request repeats another: nothing comes from the store)."""
    return [([f"What is {seed + k} + {k}?"], [[f"{seed + 2 * k}", f"{seed + 2 * k + 1}"]]) for k in range(count)]


def row(replicas: int, db: str, args) -> dict:  # noqa: ANN001
    from reflectrm_db.services import JudgmentStore

    with JudgmentStore.open(db):  # the schema, before the replicas race to create it
        pass
    procs = [start(db, args) for _ in range(replicas)]
    try:
        client = RewardClient([url for _, url in procs])
        work = groups(args.requests, seed=1000 * replicas)
        started = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            answers = list(pool.map(lambda g: client.post("/v1/rewards", {"prompts": g[0], "completions": g[1]}),
                                    work))
        seconds = time.perf_counter() - started
        load = load_line()
    finally:
        for proc, _ in procs:
            proc.terminate()
            proc.wait(60)
    with JudgmentStore.open(db) as store:
        stored = store.counts()["judgments"]
    return {"replicas": replicas, "requests": len(answers), "seconds": seconds, "requests_per_s": len(answers) / seconds,
            "stored_judgments": stored, "stored_once": stored == 2 * len(answers), "load": load}


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__)
    ap.add_argument("--clients", type=int, default=16, help="concurrent client threads (default 16)")
    ap.add_argument("--requests", type=int, default=64, help="groups sent per row (default 64)")
    ap.add_argument("--n", type=int, default=2, help="stage-1 samples N (default 2)")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="per analysis and reflection (default 32)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per replica (default 1)")
    ap.add_argument("--db", help="sqlite:///PATH (one file per row, suffixed) or two PostgreSQL URLs, comma-separated "
                                 "(default: SQLite files under --out)")
    ap.add_argument("--out", type=Path, help="folder for the SQLite stores (default: a temporary one)")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="serve-replicas-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.db and args.db.startswith("postgresql"):
        dbs = args.db.split(",")
        if len(dbs) != 2:
            raise SystemExit("--db postgresql://...: give two empty databases, comma-separated (one per row)")
    else:
        base = args.db[len("sqlite:///"):] if args.db else str(out / "replicas.db")
        dbs = [f"sqlite:///{base}.{k}" for k in (1, 2)]
    print(f"{args.clients} clients, {args.requests} groups of 2 (both orders), n={args.n}, "
          f"max_new_tokens={args.max_new_tokens}, {args.threads} thread(s) per replica", flush=True)
    print(f"{'replicas':>8} {'req/s':>8} {'seconds':>8} {'stored':>7} {'once':>5}  load", flush=True)
    rows = []
    for replicas, db in zip((1, 2), dbs):
        r = row(replicas, db, args)
        rows.append(r)
        print(f"{replicas:8d} {r['requests_per_s']:8.3f} {r['seconds']:8.1f} {r['stored_judgments']:7d} "
              f"{str(r['stored_once']):>5}  {r['load']}", flush=True)
    result = {"rows": rows, "ratio": ratio(rows[1]["requests_per_s"], rows[0]["requests_per_s"])}
    print(f"ratio (two replicas / one): {result['ratio']}", flush=True)
    finish(result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
