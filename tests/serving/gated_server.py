"""A reward service in its own process for the SIGTERM tests.

    python -m tests.serving.gated_server DIR PORT DRAIN_S [DB]

Its scripted judge touches DIR/started on its first generation, then waits until DIR/go exists or
the drain's time-out has passed (at most 60 s), so a test decides when a request in flight may
finish. Each stored judgment is one line of DIR/stored.jsonl, written in one call per request (as
the store's one transaction); with a store URL DB, judgments go to that store instead, as
`reflectrm serve --db DB` records them.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from reflectrm.backends import ScriptedBackend
from reflectrm.core import JudgeConfig
from reflectrm.serving.rewards import RewardConfig
from reflectrm.serving.server import RewardService, ServeConfig, serve
from tests.conftest import critique_output, response_output


def main(folder: str, port: str, drain_s: str, db: str | None = None) -> int:
    root = Path(folder)

    def responder(text, seed, params):
        (root / "started").touch()
        deadline = time.monotonic() + 60
        while not (root / "go").exists() and not service.batcher.stopping and time.monotonic() < deadline:
            time.sleep(0.01)
        return critique_output(1) if "## Critiques" in text else response_output(1 + seed % 2)

    def record(judgments, swapped):
        with (root / "stored.jsonl").open("a") as f:
            f.write("".join(json.dumps(j.pair.id) + "\n" for j in judgments))
        return list(range(len(judgments)))

    with ExitStack() as stack:
        if db is not None:
            from reflectrm_app.cli import open_store

            store = stack.enter_context(open_store(db))
            record = lambda judgments, swapped: store.record(judgments, swapped=swapped)  # noqa: E731 - as serve's
        service = RewardService(ScriptedBackend(responder), judge_config=JudgeConfig(n=2, max_new_tokens=8),
                                reward_config=RewardConfig(),
                                config=ServeConfig(drain_timeout_s=float(drain_s), batch_window_s=0.0), record=record)
        serve(service, host="127.0.0.1", port=int(port))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
