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
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from reflectrm_app.commands.options import (access_config, add_access_flags, add_backend_flags, add_judge_flags,
                                            backend_configs, config_from_args)
from reflectrm import flags
from reflectrm.backends.config import BackendConfig
from reflectrm.core.config import JudgeConfig
from reflectrm.display import printable
from reflectrm.errors import ConfigError
from reflectrm.flags import Flag, add_config_flags
from reflectrm_app.commands.options import add_store_flag

if TYPE_CHECKING:  # the service's modules load with `serve` only (they import its HTTP stack)
    from reflectrm.backends.engine import EngineConfig
    from reflectrm.serving.rewards import RewardConfig
    from reflectrm.serving.server import ServeConfig

log = logging.getLogger(__name__)

DEFAULT_TOKEN_ENV = "REFLECTRM_SERVE_TOKEN"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOptions:
    """Where the reward service listens and where its bearer token is read from (the shell's own options)."""

    host: str = "127.0.0.1"  # interface to bind
    port: int = 8000  # port (0 = any free port)
    # env var holding the bearer token POSTs must carry (at least 16 characters; REFLECTRM_SERVE_TOKEN unset: no token)
    token_env: str = DEFAULT_TOKEN_ENV

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port {self.port} is not a port: give 0-65535 (0 = any free port)")


SERVE_FLAGS = MappingProxyType({
    "batch_window_s": Flag(name="--batch-window-ms", convert=lambda text: float(text) / 1000,
                           show=lambda seconds: f"{seconds * 1000:g}", metavar="MS"),
})
"""What `ServeConfig`'s flags add: the batch window is typed in milliseconds."""

SERVE_SKIP = ("max_body_bytes", "token", "round_judgments", "round_requests", "body_timeout_s", "header_timeout_s",
              "access")
"""`ServeConfig` fields `serve` sets another way (the token from --token-env, access from its own flags) or keeps
at the class's default."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add `serve` to the `reflectrm` parser: every option derived from a config class but --one-order and --db."""
    from reflectrm.serving.rewards import RewardConfig
    from reflectrm.serving.server import ServeConfig

    p = sub.add_parser("serve", help="serve ReflectRM as an HTTP reward model for RL (TRL, OpenRLHF, verl)",
                       description="POST /v1/judge, /v1/rewards and OpenRLHF's /get_reward; GET /health, /metrics.")
    add_config_flags(p, ServerOptions)
    add_store_flag(p, optional=True)
    rewards = p.add_argument_group("rewards (RewardConfig)")
    add_config_flags(rewards, RewardConfig, extra={"opponents": Flag(show=lambda _: "all, round robin", metavar="M")},
                     skip=("seed", "batch_size"))  # the seed is --seed (JudgeConfig's)
    rewards.add_argument("--one-order", dest="both_orders", action="store_false",
                         help="same as --no-both-orders: judge each pair in one order only")
    add_config_flags(p.add_argument_group("service limits (ServeConfig)"), ServeConfig, extra=SERVE_FLAGS,
                     skip=SERVE_SKIP)
    add_access_flags(p)
    add_judge_flags(p)
    add_backend_flags(p)
    p.set_defaults(func=cmd_serve)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeCommand:
    """Everything `serve` was told, as typed configs (made at one place, `serve_command`)."""

    server: ServerOptions
    judge: JudgeConfig
    rewards: RewardConfig
    service: ServeConfig  # the token and access included
    backend: BackendConfig
    engine: EngineConfig | None = None  # with --backend vllm or openai
    db: str | None = None


def serve_command(args: argparse.Namespace) -> ServeCommand:
    """The namespace as typed configs, each checked by its class (a bad flag fails before the model loads)."""
    from reflectrm.serving.rewards import RewardConfig
    from reflectrm.serving.server import ServeConfig

    server = flags.config_from_args(ServerOptions, args)
    judge = config_from_args(args)
    rewards = flags.config_from_args(RewardConfig, args, seed=judge.seed)
    token = serve_token(server.token_env)
    access = access_config(args).serving(server.host)  # a bad --allowed-host fails before the model loads
    service = flags.config_from_args(ServeConfig, args, extra=SERVE_FLAGS, token=token, access=access,
                                     round_judgments=max(args.max_judgments, 1024))
    backend, engine = backend_configs(args)
    return ServeCommand(server=server, judge=judge, rewards=rewards, service=service, backend=backend, db=args.db,
                        engine=engine)


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
    command = serve_command(args)
    return run_service(command)


def run_service(command: ServeCommand) -> int:
    """Load the judge, open the store if asked, and serve until stopped."""
    from reflectrm_app.cli import open_store

    from reflectrm.backends import load_backend
    from reflectrm.serving.hosts import exposure_warning
    from reflectrm.serving.server import RewardService, serve

    server = command.server
    if warning := exposure_warning(server.host, service="the reward service", guarded=command.service.token is not None,
                                   missing="a bearer token", fix=f"set {server.token_env}"):
        log.warning("%s", warning)
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(open_store(command.db)) if command.db else None
        backend = load_backend(command.backend, command.engine)
        # with a store, a judgment asked before (by any replica on it) is answered from it (`serving.cache`)
        service = RewardService(backend, judge_config=command.judge, reward_config=command.rewards,
                                config=command.service, cache=store)
        print(printable(f"ReflectRM reward service on http://{server.host}:{server.port} "
                        f"({backend.name}: {backend.model_id})"),
              file=sys.stderr, flush=True)
        serve(service, host=server.host, port=server.port)
    return 0
