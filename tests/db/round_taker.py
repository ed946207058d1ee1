"""A reviewer process for the round concurrency tests: `python -m tests.db.round_taker URL ROUND PREFIX THREADS`.

Prints "ready", waits for a line on stdin (so every process starts together), then runs THREADS threads, each a
distinct reviewer PREFIX0, PREFIX1, ... that takes the round's next item and answers it until the round has
nothing left for them; prints one JSON line: reviewer -> the judgment ids they were handed, in order.
"""

from __future__ import annotations

import json
import sys
import threading

from reflectrm_db.services import JudgmentStore


def verdict_of(judgment_id: int, reviewer: str) -> int:
    """Odd- and even-numbered reviewers disagree on every third item: such an item waits for an adjudicator when
    both kinds took it (which depends on the threads' timing), the rest are labelled at once."""
    return 1 if judgment_id % 3 or int(reviewer[-1]) % 2 else 2


def work(store: JudgmentStore, round_name: str, reviewer: str, taken: list[int]) -> None:
    while (judgment_id := store.take_round_item(round_name, reviewer=reviewer)) is not None:
        taken.append(judgment_id)
        verdict = verdict_of(judgment_id, reviewer)
        store.answer_round_item(round_name, judgment_id, reviewer=reviewer, verdict=verdict)


def main(url: str, round_name: str, prefix: str, threads: int) -> None:
    with JudgmentStore.open(url) as store:
        print("ready", flush=True)
        sys.stdin.readline()
        taken: dict[str, list[int]] = {f"{prefix}{t}": [] for t in range(threads)}
        workers = [threading.Thread(target=work, args=(store, round_name, name, ids)) for name, ids in taken.items()]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        print(json.dumps(taken), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
