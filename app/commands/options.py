"""The options commands share, each defined once and derived from its config class: the judging flags
(`JudgeConfig`), the model and backend (`BackendConfig`, `EngineConfig`), access (`AccessConfig`), the batch size and
the store (`--db`); and the typed configs a command turns its namespace into (`backend_configs`, `config_from_args`).
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from types import MappingProxyType
from typing import Any

from reflectrm import flags
from reflectrm.backends.config import BACKENDS, DEFAULT_THREADS, BackendConfig
from reflectrm.core.config import JudgeConfig
from reflectrm.core.strategies import STRATEGIES
from reflectrm.errors import InputError
from reflectrm.files.labels import LABEL_MAP_HELP, LABEL_SCHEMES
from reflectrm.files.readers import PAIR_FIELDS
from reflectrm.flags import Flag, add_config_flags

JUDGE_FLAGS = MappingProxyType({
    "strategy": Flag(choices=tuple(sorted(STRATEGIES))),
    "critique_includes_verdict": Flag(names=("--include-verdict",)),  # the flag's first name, still accepted
    "reflection_max_new_tokens": Flag(tied_to="max_new_tokens"),  # one --max-new-tokens bounds both stages
})
"""What the judging flags add to `JudgeConfig`'s fields; every other flag, default and help comes from the class."""


# --- the options every command that judges shares, derived from the config classes ----------------------

BACKEND_FLAGS = MappingProxyType({
    "model": Flag(show=lambda _: "the bundled demo judge"),
    "backend": Flag(choices=BACKENDS),
    "threads": Flag(metavar="N|auto", show=lambda _: DEFAULT_THREADS),
})
"""What the model and backend flags add to `BackendConfig`'s fields (choices, how a default of None reads)."""


def add_batch_flag(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--batch-size: pairs generated together, as `judge`, `eval` and `build-data` batch them."""
    p.add_argument("--batch-size", type=int, default=8, help="pairs generated together (default 8)")


def add_judge_flags(p: argparse.ArgumentParser, *, skip: Collection[str] = ()) -> None:
    """One flag per `JudgeConfig` field but those in `skip` (a command that sets them another way)."""
    add_config_flags(p.add_argument_group("judging (JudgeConfig; defaults from the paper)"), JudgeConfig,
                     extra={k: v for k, v in JUDGE_FLAGS.items() if k not in skip}, skip=skip)


def add_backend_flags(p: argparse.ArgumentParser, *, given_only: bool = False, skip: Collection[str] = ()) -> None:
    """--model, --backend, --device, --threads (`BackendConfig`) but those in `skip`, and the engine options
    (`EngineConfig`) unless "backend" is skipped (a command that runs the transformers backend only).

    `given_only`: the flags default to None, for a command whose defaults come from its settings (`app`)."""
    add_config_flags(p.add_argument_group("model and backend (BackendConfig)"), BackendConfig,
                     extra=BACKEND_FLAGS, given_only=given_only, skip=skip)
    if "backend" not in skip:  # the engine options are those of --backend vllm|openai
        add_engine_flags(p)


ACCESS_FLAGS = MappingProxyType({
    "allowed_hosts": Flag(name="--allowed-host", repeat=True, metavar="HOST"),
    "allowed_origins": Flag(name="--allowed-origin", repeat=True, metavar="ORIGIN"),
})
"""The trusted-host and origin options of `serve` and `app`, from `AccessConfig`'s fields (one definition)."""


def add_access_flags(p: argparse.ArgumentParser) -> None:
    """--allowed-host and --allowed-origin (`reflectrm.serving.hosts.AccessConfig`), repeatable; unset: not given."""
    from reflectrm.serving.hosts import AccessConfig

    add_config_flags(p.add_argument_group("who may call it (AccessConfig; localhost and IP addresses always)"),
                     AccessConfig, extra=ACCESS_FLAGS, given_only=True)


def access_config(args: argparse.Namespace) -> Any:
    """The `AccessConfig` the access flags give (checked: a malformed host or origin is one `ConfigError` line)."""
    from reflectrm.serving.hosts import AccessConfig

    return AccessConfig(**flags.given_flags(AccessConfig, args))


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """The `--backend vllm|openai` options, derived from `EngineConfig` (its defaults and comments) by
    `reflectrm.flags`; none has a default of its own, so only what was typed reaches the engine."""
    from reflectrm.backends.engine import EngineConfig
    from reflectrm.backends.fleet import ROUTINGS

    group = p.add_argument_group("engines (--backend vllm or openai)")
    add_config_flags(group, EngineConfig, extra={"base_urls": Flag(name="--base-url", repeat=True, metavar="URL"),
                                                 "routing": Flag(choices=ROUTINGS)}, given_only=True)


def backend_config(args: argparse.Namespace) -> BackendConfig:
    """The `BackendConfig` the model and backend flags give, checked (threads with an engine are refused)."""
    return flags.config_from_args(BackendConfig, args)


def engine_config(args: argparse.Namespace) -> Any:
    """The `EngineConfig` the engine flags give, checked; None unless --backend vllm or openai."""
    from reflectrm.backends.engine import ENGINE_BACKENDS, EngineConfig

    if getattr(args, "backend", None) not in ENGINE_BACKENDS:
        return None
    return EngineConfig(**flags.given_flags(EngineConfig, args))


def backend_configs(args: argparse.Namespace) -> tuple[BackendConfig, Any]:
    """`load_backend`'s configs from the model, backend and engine flags, checked before anything loads (the model
    folder and the device too: `BackendConfig.check_ready`)."""
    config, engine = backend_config(args), engine_config(args)
    config.check_ready()
    return config, engine


def load_judge(config: BackendConfig, engine: Any = None) -> Any:
    """The backend the configs name, loaded (minutes on a real judge: check inputs first)."""
    from reflectrm.backends import load_backend

    return load_backend(config, engine)


def config_from_args(args: argparse.Namespace) -> JudgeConfig:
    """The `JudgeConfig` the judging flags give (every field has one; see `JUDGE_FLAGS`)."""
    return flags.config_from_args(JudgeConfig, args, extra=JUDGE_FLAGS)


# --- how a labelled file is read (`import`, and `eval --benchmark file`), one definition ---------------------------


def add_file_reading_flags(p: argparse.ArgumentParser, *, title: str) -> None:
    """--map, --labels and --skip-invalid: how the labelled-file reader (`reflectrm.files.readers`) reads a file's
    columns, labels and bad rows. `title` names, in `--help`, what the options apply to."""
    group = p.add_argument_group(title)
    group.add_argument("--map", dest="mapping", default="",
                       help=f"FIELD=COLUMN,... for fields {', '.join(PAIR_FIELDS)} (e.g. query=question,response_1=a; "
                            "spaces allowed)")
    group.add_argument("--labels", default="auto", metavar="SCHEME",
                       help="how label values are meant: " + "; ".join(f"{k}: {v}" for k, v in LABEL_SCHEMES.items())
                            + f"; {LABEL_MAP_HELP}")
    group.add_argument("--skip-invalid", action="store_true",
                       help="skip invalid rows (each reported with its row number and reason) instead of refusing "
                            "the file")


# --- the store option, one definition for every command that takes a store ------------------------------------

STORE_HELP = "the store: a database URL or a SQLite file path"
"""What `--db` is, in every command that takes it (`add_store_flag`)."""

STORE_DEFAULT = "$REFLECTRM_DATABASE_URL, else ./reflectrm.db"
"""Where a command that works on the store finds it without `--db` (`reflectrm_db.settings.StoreSettings`)."""


class StoreOption(argparse._StoreAction):
    """The `--db` option: the one kind of action every command's `--db` is (a test walks the parsers for it)."""


def add_store_flag(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """`--db URL`, one definition for every command that takes a store.

    `optional`: a command that judges (`judge`, `serve`) stores only when `--db` is given; without it nothing is
    stored and no file is made (a reward service answers millions of requests; `judge` is often a one-off), so the
    default it states is "none". Every other command works on the store itself and opens the settings' one."""
    default = "none: nothing is stored" if optional else STORE_DEFAULT
    p.add_argument("--db", action=StoreOption, metavar="URL", help=f"{STORE_HELP} (default: {default})")


def open_store(url: str) -> Any:
    try:
        from reflectrm_db.services import JudgmentStore
    except ImportError as exc:
        raise InputError("--db needs the store: install it with `pip install 'reflectrm[store]'`") from exc
    return JudgmentStore.open(url, in_memory_ok=False)  # a command's records must outlive it
