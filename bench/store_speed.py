"""How fast the store records and exports judgments.

    python bench/store_speed.py [--records 300] [--export 10000] [--db URL]

* export: seconds to export `--export` judgments (every sample and reflection) to Parquet, the
  first call in the process (it includes importing pyarrow).
* record: milliseconds for one `JudgmentStore.record` call (its own transaction) of one judgment
  with 8 samples and 7 reflections (about 2 kB per sample, 1 kB per reflection), into a store
  already holding the export set. Target: <= 5 ms on SQLite.

Default database: a new SQLite file in a temp dir. The last line printed is one JSON object.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from reflectrm_db.services import JudgmentStore
from reflectrm.backends import ScriptedBackend
from reflectrm.backends.base import Completion, SamplingParams
from reflectrm.core import JudgeConfig, Judgment, PreferencePair, Task
from reflectrm.core.prompts import format_output
from reflectrm.pipeline import judge
from harness import finish, parser as bench_parser

FILLER = "The response handles the edge case, cites the rule and checks the arithmetic step by step. " * 22


def _respond(prompt: str, seed: int, params: SamplingParams) -> Completion:
    choice = 1 + seed % 2
    if "## Critiques for Judgment" in prompt:
        return Completion(format_output(FILLER[:1000], choice, task=Task.ANALYSIS), (), 256)
    logprobs = tuple(-0.01 * ((seed >> k) % 50) for k in range(512))
    return Completion(format_output(f"{seed} {FILLER}", choice, task=Task.RESPONSE), logprobs, 512)


def template_judgment() -> Judgment:
    pair = PreferencePair.from_query("Explain why the sky is blue. " * 20, FILLER * 2, FILLER[::-1] * 2, label=1)
    judgment = judge(pair, ScriptedBackend(_respond), JudgeConfig())
    assert len(judgment.rollouts) == 8 and len(judgment.reflections) == 7, "the bench needs 8 samples + 7 reflections"
    return judgment


def variant(template: Judgment, k: int) -> Judgment:
    """The template on a pair of its own (every record inserts its pair, as a real judgment does)."""
    pair = replace(template.pair, id=f"bench-{k}", response_2=f"{template.pair.response_2} #{k}")
    return replace(template, pair=pair)


def bench_record(store: JudgmentStore, template: Judgment, *, count: int, start: int) -> list[float]:
    times = []
    for k in range(start, start + count):
        j = variant(template, k)
        t0 = time.perf_counter()
        store.record([j], swapped=False)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--records", type=int, default=300, help="timed single-judgment records")
    parser.add_argument("--export", type=int, default=10_000, help="judgments in the Parquet export")
    parser.add_argument("--db", help="database URL (default: a new SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'bench.db'}"
        template = template_judgment()
        with JudgmentStore.open(url) as store:
            t0 = time.perf_counter()
            for start in range(0, args.export, 500):  # the export set, 500 judgments per transaction
                store.record([variant(template, k) for k in range(start, min(start + 500, args.export))], swapped=False)
            fill_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            rows = store.export("judgments", fmt="parquet", out=Path(tmp) / "judgments.parquet")
            export_s = time.perf_counter() - t0
            size_mb = (Path(tmp) / "judgments.parquet").stat().st_size / 1e6
            bench_record(store, template, count=20, start=10**6)  # warm-up: statement caches, pool
            times = bench_record(store, template, count=args.records, start=2 * 10**6)
            dialect = store.engine.dialect.name
    times.sort()
    result = {
        "database": dialect,
        "record_ms_median": round(statistics.median(times), 2),
        "record_ms_mean": round(statistics.fmean(times), 2),
        "record_ms_p95": round(times[int(0.95 * (len(times) - 1))], 2),
        "records_timed": len(times),
        "export_judgments": rows,
        "export_parquet_s": round(export_s, 2),
        "export_parquet_mb": round(size_mb, 1),
        "fill_judgments_per_s": round(args.export / fill_s),
    }
    print(
        f"record one judgment (8 samples + 7 reflections) on {dialect}: "
        f"median {result['record_ms_median']} ms, mean {result['record_ms_mean']} ms, p95 {result['record_ms_p95']} ms"
    )
    print(f"export {rows} judgments to Parquet: {result['export_parquet_s']} s ({result['export_parquet_mb']} MB)")
    finish(result)


if __name__ == "__main__":
    main()
