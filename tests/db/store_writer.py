"""A writer process for the reliability tests: `python -m tests.db.store_writer URL NAME COUNT CORRECTIONS`.

Prints "ready", waits for a line on stdin (so all writers start together), then records COUNT
judgments (one transaction each) and corrects the first CORRECTIONS of them. COUNT = 0 records
forever without waiting, printing each committed judgment id (the SIGKILL test kills it).
"""

from __future__ import annotations

import itertools
import sys

from reflectrm_db.services import JudgmentStore
from reflectrm.backends import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import PreferencePair
from reflectrm.pipeline import judge_many
from tests.db.helpers import make_pairs, scripted_output

BACKEND = ScriptedBackend(scripted_output, max_context_chars=50_000_000)


def write(store: JudgmentStore, name: str, count: int, corrections: int) -> list[int]:
    """Record `count` judgments of fresh pairs one by one, then correct the first `corrections`."""
    judgments = judge_many(make_pairs(count, prefix=name), BACKEND, JudgeConfig())
    ids = [store.record([j], swapped=False)[0] for j in judgments]
    for jid in ids[:corrections]:
        store.correct(jid, verdict=1, author=name, seed=len(name))
    return ids


def big_pair(k: int) -> PreferencePair:
    """A pair with 200 kB responses: each transaction takes long enough to be killed in the middle."""
    return PreferencePair.from_query(f"stream {k}?", "a" * 200_000 + str(k), "b" * 200_000, id=f"stream-{k}")


def stream(store: JudgmentStore) -> None:
    for k in itertools.count():
        [judgment] = judge_many([big_pair(k)], BACKEND, JudgeConfig())
        [jid] = store.record([judgment], swapped=False)
        print(jid, flush=True)


def main() -> None:
    url, name, count, corrections = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with JudgmentStore.open(url) as store:
        if count == 0:
            stream(store)
        else:
            print("ready", flush=True)
            sys.stdin.readline()
            write(store, name, count, corrections)
    print("done", flush=True)


if __name__ == "__main__":
    main()
