"""The store under concurrent writers, SIGKILLed imports and unique-key races, on SQLite and PostgreSQL.

    python bench/store_reliability.py [--kills 14] [--import-rows 20000] [--racers 70] [--no-postgresql]

For each database (a SQLite file; a throwaway PostgreSQL cluster started from `initdb`, when installed):

* concurrency: 8 threads (one shared store, as in the app) and 2 processes record 15 judgments each
  and correct 5 of them, all at once. Figures: rows expected and stored, "locked" errors that reached
  a caller.
* crash: `--kills` times, a process imports `--import-rows` pairs (one transaction) and is SIGKILLed,
  the kills spread evenly over 0-150 % of an uninterrupted import's time (so some land after the
  commit). Figure: the pair counts left behind (each must be 0 or all of them).
* races: `--racers` threads correct one judgment at the same moment, then as many snapshot one name.
  Figures: winners, one-line refusals, raw `IntegrityError`s (must be 0).

The last line printed is one JSON object.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.exc import IntegrityError  # noqa: E402

from reflectrm_db.services import JudgmentStore  # noqa: E402
from reflectrm.core.types import PreferencePair  # noqa: E402
from reflectrm.errors import ReflectRMError  # noqa: E402
from tests.db.store_writer import write  # noqa: E402

from harness import finish, load, parser as bench_parser  # noqa: E402

THREADS, PROCESSES, PER_WRITER, CORRECTED = 8, 2, 15, 5
_IMPORTER = """
import sys
from reflectrm_db.services import JudgmentStore
with JudgmentStore.open(sys.argv[1]) as store:
    print("open", flush=True)
    store.import_pairs(sys.argv[2])
print("done", flush=True)
"""


def concurrency(url: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.db.store_writer", url, f"proc{k}", str(PER_WRITER),
                               str(CORRECTED)], cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in range(PROCESSES)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    errors: list[str] = []
    with JudgmentStore.open(url) as store:
        def run(k: int) -> None:
            try:
                write(store, f"thread{k}", PER_WRITER, CORRECTED)
            except Exception as exc:  # noqa: BLE001 - counted, not hidden
                errors.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=run, args=(k,)) for k in range(THREADS)]
        for t in threads:
            t.start()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for t in threads:
            t.join()
        outs = [p.communicate(timeout=600) for p in procs]
        counts = store.counts()
    writers = THREADS + PROCESSES
    locked = sum("locked" in e for e in errors) + sum("locked" in err for _, err in outs)
    return {"judgments_expected": writers * PER_WRITER, "judgments_stored": counts["judgments"],
            "corrections_expected": writers * CORRECTED, "corrections_stored": counts["corrections"],
            "errors": len(errors) + sum(p.returncode != 0 for p in procs), "locked_errors": locked}


def crash(*, kills: int, rows: int, reset: Callable[[], str]) -> dict[str, Any]:
    pairs_file = Path(tempfile.mkdtemp(prefix="reflectrm-crash-")) / "pairs.jsonl"
    with pairs_file.open("w", encoding="utf-8") as fh:
        for k in range(rows):
            fh.write(json.dumps({"id": f"c{k}", "query": f"crash question {k}?", "response_1": f"a{k}",
                                 "response_2": f"b{k}"}) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def start() -> tuple[subprocess.Popen[str], str]:
        url = reset()
        p = subprocess.Popen([sys.executable, "-c", _IMPORTER, url, str(pairs_file)], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline().strip() == "open"
        return p, url

    p, _ = start()  # one whole import, timed: the kills are spread over 0-150 % of it
    began = time.perf_counter()
    p.wait()
    whole_s = time.perf_counter() - began
    left, finished_first = [], 0
    for k in range(kills):
        p, url = start()
        time.sleep(whole_s * 1.5 * (k + 0.5) / kills)  # reading, validating, inserting, committing, or after
        finished_first += p.poll() is not None  # the import ended before the kill came
        p.send_signal(signal.SIGKILL)
        p.wait()
        with JudgmentStore.open(url) as store:
            left.append(store.counts()["pairs"])
    shutil.rmtree(pairs_file.parent)
    return {"kills": kills, "rows": rows, "import_s": round(whole_s, 2), "finished_before_kill": finished_first,
            "pairs_left": left,
            "all_or_nothing": all(n in (0, rows) for n in left)}


def races(url: str, *, racers: int) -> dict[str, Any]:
    from tests.db.helpers import scripted_output

    from reflectrm.backends import ScriptedBackend
    from reflectrm.core.config import JudgeConfig
    from reflectrm.pipeline import judge_many

    pair = PreferencePair.from_query("race?", "a", "b", id="race")
    [judgment] = judge_many([pair], ScriptedBackend(scripted_output), JudgeConfig())
    out: dict[str, Any] = {"racers": racers}
    with JudgmentStore.open(url) as store:
        [jid] = store.record([judgment], swapped=False)
        out["corrections"] = _race(racers, lambda k: store.correct(jid, verdict=1, author=f"u{k}", seed=k))
        out["snapshots"] = _race(racers, lambda k: store.snapshot("same-name"))
    return out


def _race(racers: int, work: Callable[[int], Any]) -> dict[str, int]:
    start, tally, lock = threading.Barrier(racers), {"won": 0, "refused": 0, "integrity_error": 0, "other": 0}, \
        threading.Lock()

    def run(k: int) -> None:
        start.wait()
        try:
            work(k)
            outcome = "won"
        except ReflectRMError:
            outcome = "refused"
        except IntegrityError:
            outcome = "integrity_error"
        except Exception:  # noqa: BLE001 - counted
            outcome = "other"
        with lock:
            tally[outcome] += 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally


# --- databases ----------------------------------------------------------------------------------------


@contextmanager
def postgresql_server() -> Iterator[str | None]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (as tests/db/conftest.py starts it); None if not installed."""
    found = {n: shutil.which(n) or (sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{n}")) or [None])[-1]
             for n in ("initdb", "pg_ctl")}
    if None in found.values():
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="reflectrm-pg-"))
    user = "postgres" if os.geteuid() == 0 else None
    if user:
        shutil.chown(root, user)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def run(*args: str) -> None:
        subprocess.run(args, check=True, user=user, capture_output=True, cwd=root)

    run(found["initdb"], "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    run(found["pg_ctl"], "-D", str(root / "data"), "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 "
        "-c max_connections=200", "-l", str(root / "log"), "-w", "start")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        run(found["pg_ctl"], "-D", str(root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def fresh_databases(kind: str, server: str | None, folder: Path) -> Callable[[], str]:
    counter = iter(range(1 << 30))

    def new() -> str:
        k = next(counter)
        if kind == "sqlite":
            return f"sqlite:///{folder / f'store{k}.db'}"
        admin = create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f"CREATE DATABASE bench{k}"))
        admin.dispose()
        return f"{server}/bench{k}"

    return new


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--kills", type=int, default=14)
    parser.add_argument("--import-rows", type=int, default=20_000)
    parser.add_argument("--racers", type=int, default=70)
    parser.add_argument("--no-postgresql", action="store_true")
    parser.add_argument("--only", choices=("concurrency", "crash", "races"), help="run one part")
    args = parser.parse_args()
    results: dict[str, Any] = {"load_before": load()}
    folder = Path(tempfile.mkdtemp(prefix="reflectrm-bench-"))
    with postgresql_server() if not args.no_postgresql else _none() as server:
        for kind in ("sqlite", "postgresql"):
            if kind == "postgresql" and server is None:
                print("postgresql: skipped (initdb not found, or --no-postgresql)")
                continue
            new = fresh_databases(kind, server, folder)
            started = time.perf_counter()
            parts = {"concurrency": lambda: concurrency(new()),
                     "crash": lambda: crash(kills=args.kills, rows=args.import_rows, reset=new),
                     "races": lambda: races(new(), racers=args.racers)}
            figures: dict[str, Any] = {name: run() for name, run in parts.items() if args.only in (None, name)}
            figures["seconds"] = round(time.perf_counter() - started, 1)
            results[kind] = figures
            print(f"{kind}: {json.dumps(figures)}", flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    finish(results)


@contextmanager
def _none() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    main()
