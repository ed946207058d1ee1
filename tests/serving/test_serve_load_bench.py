"""bench/serve_load.py on a scripted judge: its table, its offline ratio and its soak's store check run end to end."""

from __future__ import annotations

import pytest

from reflectrm.backends import ScriptedBackend
from tests.conftest import critique_output, load_bench, response_output

pytestmark = pytest.mark.slow


def test_the_bench_table_and_soak_account_for_every_request(tmp_path, monkeypatch):
    bench = load_bench("serve_load")

    def responder(text, seed, params):
        return critique_output(1) if "## Critiques" in text else response_output(1 + seed % 2)

    monkeypatch.setattr(bench, "make_backend", lambda args: ScriptedBackend(responder))
    result = bench.main(["--clients", "1,5", "--serial-clients", "3", "--groups", "3", "--group", "3", "--n", "2",
                         "--max-new-tokens", "8", "--soak", "1.5", "--soak-clients", "4",
                         "--db", f"sqlite:///{tmp_path / 'load.db'}"])
    rows = {(r["design"], r["clients"]): r for r in result["rows"]}
    assert set(rows) == {("serial", 3), ("batched", 1), ("batched", 5)}
    assert all(r["errors"] == 0 and r["offline_groups_per_s"] > 0 for r in rows.values())
    # the trap: with fewer groups than clients, a 64-client row ran only 16 requests at once
    assert {k: r["groups"] for k, r in rows.items()} == {("serial", 3): 3, ("batched", 1): 3, ("batched", 5): 5}
    assert rows[("serial", 3)]["requests_per_batch"] == 1.0  # the old design: one request per batch
    soak = result["soak"]
    assert soak["answered"] >= 4 and soak["errors"] == 0  # each client sends once, however late its thread starts
    assert soak["store_exact"] and soak["stored_judgments"] == soak["expected_judgments"]
