"""How fast the History and Review pages open on a large store (the queries are SQL, filtered and limited).

    python bench/history_speed.py [--judgments 100000] [--db URL] [--repeats 5]

Fills a new SQLite store (or `--db`) with `--judgments` judgments of the demo arithmetic pairs
(8 short samples and 7 reflections each, from a scripted judge; every 10th pair audited in both
orders), then times what each page's handler does, through `Services` and `reflectrm_app.ui.views`:

* history: the History tab opening (the newest 200 summaries, as a table); and a search.
* review next / review open: the Review queue's next item (flags ordered in SQL) and one item by id.
* sources: the data-set list of the pickers.

Target: every page under 1 s on 100,000 judgments. Also times the way History read the store before
(the review-queue query over every judgment, filtered and sorted in Python), in the same run.
Prints `uptime` first (the machine is shared); the last line printed is one JSON object.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from reflectrm_app.ui import views
from reflectrm_app.resources import ModelHolder
from reflectrm_app.services import Services
from reflectrm_app.services.runtime import Runtime
from reflectrm_app.settings import AppSettings
from reflectrm_db.services import JudgmentStore
from reflectrm.backends import ScriptedBackend
from reflectrm.backends.base import Completion, SamplingParams
from reflectrm.core.config import JudgeConfig
from reflectrm.core.prompts import format_output
from reflectrm.core import Task
from reflectrm.demo.tasks import make_pairs
from reflectrm.pipeline import judge_many
from harness import finish, load_line, ratio, parser as bench_parser

BATCH = 1000  # judgments per `record` call while filling


def _respond(prompt: str, seed: int, params: SamplingParams) -> Completion:
    choice = 1 + seed % 2
    if "## Critiques for Judgment" in prompt:
        return Completion(format_output(f"critique check {seed % 97}", choice, task=Task.ANALYSIS), (), 6)
    logprobs = tuple(-0.01 * ((seed >> k) % 50 + 1) for k in range(16))
    return Completion(format_output(f"17 + 8 = 25. check {seed % 89}", choice, task=Task.RESPONSE), logprobs, 16)


def fill(store: JudgmentStore, count: int) -> float:
    """Record `count` judgments (some as audited twins); returns seconds taken."""
    started = time.perf_counter()
    pairs = make_pairs(2000, seed=7)
    store.add_pairs(pairs)
    config = JudgeConfig(max_new_tokens=16)
    template = list(judge_many(pairs[:200], ScriptedBackend(_respond), config))  # judged once, recorded many times
    twins = list(judge_many([p for pair in pairs[:20] for p in (pair, pair.swapped())], ScriptedBackend(_respond),
                            config))
    done = 0
    while done < count:
        batch = min(BATCH, count - done)
        plain = batch - batch // 10
        store.record([template[(done + k) % len(template)] for k in range(plain)], swapped=False)
        audited = (batch - plain) // 2 * 2
        if audited:
            store.record([twins[k % len(twins)] for k in range(audited)], swapped=True)
        done += plain + audited
        if plain + audited == 0:
            break
    return time.perf_counter() - started


def timed(work: Callable[[], object], repeats: int) -> float:
    """Median seconds of `work()` over `repeats` calls (after one warm-up call)."""
    work()
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def old_history(services: Services) -> object:
    """History as it was read before: every summary through the review-queue query, sorted in Python."""
    total = services.runtime.store.counts()["judgments"]
    rows = services.runtime.store.review_queue(limit=max(total, 1), include_corrected=True)
    rows.sort(key=lambda s: s.id, reverse=True)
    return views.summaries_frame(rows[:200])


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--judgments", type=int, default=100_000)
    parser.add_argument("--db", help="database URL (default: a new SQLite file in a temp dir)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(load_line(), flush=True)
    url = args.db or f"sqlite:///{Path(tempfile.mkdtemp()) / 'history.db'}"
    store = JudgmentStore.open(url)
    fill_s = fill(store, args.judgments)
    total = store.counts()["judgments"]
    print(f"filled {total} judgments in {fill_s:.0f} s", flush=True)
    services = Services.over(Runtime(store=store, settings=AppSettings(warm_up=False),
                                     model=ModelHolder(lambda: ScriptedBackend(_respond))))
    some_id = total // 2
    figures = {
        "judgments": total,
        "history_open_s": timed(lambda: views.summaries_frame(services.history.history()), args.repeats),
        "history_search_s": timed(lambda: views.summaries_frame(services.history.history(search="17 +")), args.repeats),
        "review_next_s": timed(lambda: services.review.next_for_review(reviewer="bench"), args.repeats),
        "review_open_s": timed(lambda: services.review.review_item(some_id, reviewer="bench"), args.repeats),
        "sources_s": timed(services.judging.sources, args.repeats),
        "history_before_s": timed(lambda: old_history(services), 1),
    }
    for name, value in figures.items():
        print(f"{name:>18}: {value:.3f}" if isinstance(value, float) else f"{name:>18}: {value}")
    print(f"{'history speed-up':>18}: {ratio(figures['history_before_s'], figures['history_open_s'], digits=0)}x")
    services.close()
    finish(figures)


if __name__ == "__main__":
    main()
