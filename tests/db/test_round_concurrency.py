"""Review rounds under concurrency: 2 real processes x 8 threads take one round's items until none is left, on
SQLite and PostgreSQL. Each thread is its own reviewer (a person works one item at a time; the store hands an
unanswered item back to its reviewer, so two threads sharing a name would share it by design). Every item must be
handed out exactly k times, never twice to one reviewer, and every handed item answered once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from reflectrm_db.rounds import RoundConfig
from reflectrm_db.services import JudgmentStore
from tests.db.helpers import make_pairs
from tests.db.round_taker import verdict_of

ROOT = Path(__file__).resolve().parents[2]
PROCESSES, THREADS, ITEMS, OVERLAP = 2, 8, 24, 3


def _spawn(*args: str) -> subprocess.Popen[str]:
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH", ""), str(ROOT)]))
    return subprocess.Popen([sys.executable, "-m", "tests.db.round_taker", *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": path}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_processes_of_eight_reviewers_hand_each_item_out_exactly_k_times(store: JudgmentStore, db_url, judge_pairs):
    ids = store.record(judge_pairs(make_pairs(ITEMS, prefix="cc")), swapped=False)
    names = [f"p{p}r{t}" for p in range(PROCESSES) for t in range(THREADS)]
    for name in names:
        store.set_reviewer(name, role="reviewer")
    store.open_round(RoundConfig(name="team", overlap=OVERLAP), opened_by="test")
    procs = [_spawn(db_url, "team", f"p{p}r", str(THREADS)) for p in range(PROCESSES)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:  # all start together
        proc.stdin.write("go\n")
        proc.stdin.flush()
    taken: dict[str, list[int]] = {}
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        taken.update(json.loads(out.strip().splitlines()[-1]))
    handed = Counter(j for got in taken.values() for j in got)
    assert handed == dict.fromkeys(ids, OVERLAP)  # every item exactly k times, none beyond
    assert all(len(got) == len(set(got)) for got in taken.values())  # never twice to one reviewer
    stored = store.round_answers("team")
    assert sorted((a.reviewer, a.judgment_id) for a in stored) == sorted(
        (name, j) for name, got in taken.items() for j in got)  # what the processes saw is what the store holds
    progress = store.round_progress("team")
    assert (progress.needed, progress.assigned, progress.answered, progress.complete) == (
        ITEMS * OVERLAP,) * 3 + (ITEMS,)
    takers: dict[int, set[int]] = {}
    for name, got in taken.items():
        for j in got:
            takers.setdefault(j, set()).add(verdict_of(j, name))
    split = sum(len(verdicts) > 1 for verdicts in takers.values())  # who took what decides it, not a guess
    assert (progress.agreed, progress.disputed) == (ITEMS - split, split)
