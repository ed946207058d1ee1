"""`reflectrm serve`: the reward service (`reflectrm.serving.server`), with judgments stored when --db is given.

    reflectrm serve --port 8000                                   # the demo judge on transformers
    reflectrm serve --backend vllm --model /models/judge --db sqlite:///rewards.db
    REFLECTRM_SERVE_TOKEN=$TOKEN reflectrm serve --host 0.0.0.0 --backend openai --base-url http://gpu1:8000/v1
    (TOKEN: at least 16 characters, e.g. from `python -c "import secrets; print(secrets.token_urlsafe())"`)

It lives in the app shell (not the library) because --db opens the store.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys

from reflectrm import cli as judge_cli
from reflectrm.cli import (access_config, add_access_flags, add_backend_flags, add_judge_flags, backend_options,
                           config_from_args)
from reflectrm.display import printable
from reflectrm.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_TOKEN_ENV = "REFLECTRM_SERVE_TOKEN"


def register(sub: argparse._SubParsersAction) -> None:
    """Add `serve` to the `reflectrm` parser."""
    p = sub.add_parser("serve", help="serve ReflectRM as an HTTP reward model for RL (TRL, OpenRLHF, verl)",
                       description="POST /v1/judge, /v1/rewards and OpenRLHF's /get_reward; GET /health, /metrics.")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--db", help="store every served judgment in this database URL (shown in the app's History)")
    p.add_argument("--token-env", default=DEFAULT_TOKEN_ENV,
                   help=f"env var holding the bearer token POSTs must carry (at least 16 characters; "
                        f"{DEFAULT_TOKEN_ENV} unset: no token)")
    p.add_argument("--opponents", type=int, help="each completion against this many random others (default: all)")
    p.add_argument("--one-order", action="store_true", help="judge each pair in one order only (halves the cost; "
                                                             "position bias no longer cancels)")
    p.add_argument("--max-queue", type=int, default=64,
                   help="requests waiting for the next batch before 429 (default 64)")
    p.add_argument("--batch-window-ms", type=float, default=10.0,
                   help="an idle judge waits this long after a request for others to batch with (default 10)")
    p.add_argument("--drain-timeout-s", type=float, default=60.0,
                   help="on SIGTERM, how long admitted requests have to finish before 503 (default 60)")
    p.add_argument("--max-judgments", type=int, default=4096, help="judgments one request may cost (default 4096)")
    add_access_flags(p)
    add_judge_flags(p)
    add_backend_flags(p)
    p.set_defaults(func=cmd_serve)


def serve_token(env: str) -> str | None:
    """The bearer token from the environment variable `env` (None: unset, the service is open); checked at start-up.

    Refused in one line: a blank or malformed token, `--token-env` naming an unset variable, and a `REFLECTRM_`
    variable no setting reads (`REFLECTRM_TOKEN` for `REFLECTRM_SERVE_TOKEN` would leave the service open)."""
    from reflectrm_app.settings import check_environment

    from reflectrm.serving.server import check_token

    check_environment(also=(env,))
    if env not in os.environ:
        if env != DEFAULT_TOKEN_ENV:
            raise ConfigError(f"--token-env {env[:60]!r} names a variable that is not set: set it to the bearer "
                              f"token, or leave --token-env out")
        return None
    return check_token(os.environ[env], name=env)


def cmd_serve(args: argparse.Namespace) -> int:
    from reflectrm_app.cli import open_store

    from reflectrm.serving.hosts import exposure_warning
    from reflectrm.serving.rewards import RewardConfig
    from reflectrm.serving.server import RewardService, ServeConfig, serve

    judge_config = config_from_args(args)
    reward_config = RewardConfig(opponents=args.opponents, both_orders=not args.one_order, seed=args.seed)
    token = serve_token(args.token_env)
    access = access_config(args).serving(args.host)  # a bad --allowed-host fails before the model loads
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not a port: give 0-65535 (0 = any free port)")
    if args.max_queue < 0 or args.max_judgments < 1:
        raise ConfigError("--max-queue must be >= 0 and --max-judgments >= 1")
    if not (0 <= args.batch_window_ms <= 10_000 and 0 <= args.drain_timeout_s <= 86_400):
        raise ConfigError("--batch-window-ms must be 0-10000 and --drain-timeout-s 0-86400")
    backend_options(args)  # a bad flag fails before the model loads
    if warning := exposure_warning(args.host, service="the reward service", guarded=token is not None,
                                   missing="a bearer token", fix=f"set {args.token_env}"):
        log.warning("%s", warning)
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(open_store(args.db)) if args.db else None
        backend = judge_cli.load_judge(args)
        record = (lambda judgments, swapped: store.record(judgments, swapped=swapped)) if store else None
        service = RewardService(backend, judge_config=judge_config, reward_config=reward_config,
                                config=ServeConfig(max_queue=args.max_queue, max_judgments=args.max_judgments,
                                                   token=token, batch_window_s=args.batch_window_ms / 1000,
                                                   round_judgments=max(args.max_judgments, 1024),
                                                   drain_timeout_s=args.drain_timeout_s, access=access),
                                record=record)
        print(printable(f"ReflectRM reward service on http://{args.host}:{args.port} "
                        f"({backend.name}: {backend.model_id})"),
              file=sys.stderr, flush=True)
        serve(service, host=args.host, port=args.port)
    return 0
