"""`reflectrm app`: serve the inspection app (a thin shell over `reflectrm_app.ui` and `reflectrm_app.services`).

    reflectrm app                                   # the demo judge, ./reflectrm.db, http://127.0.0.1:7860
    reflectrm app --port 8080 --db sqlite:///judgments.db --model /models/my-judge

Options override the environment settings (`REFLECTRM_*`, see `reflectrm_app.settings.AppSettings`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import fields
from typing import Any

from reflectrm.backends.config import BackendConfig
from reflectrm_app.commands.options import add_access_flags, add_backend_flags, add_store_flag
from reflectrm_db.settings import ENV_PREFIX
from reflectrm.core.config import JudgeConfig
from reflectrm.display import printable
from reflectrm.flags import add_config_flags, field_help, given_flags

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `app` to the `reflectrm` parser."""
    p = sub.add_parser("app", help="serve the inspection app in the browser",
                       description="Judge, audit positional bias, review and correct, curate, retrain: a Gradio app.")
    _add_settings_flags(p, ("host", "port"))
    add_store_flag(p)
    _add_settings_flags(p, ("runs_dir", "data_root"))
    # the judge section's token budget, as `judge` takes it (stage 2's follows it); unset: $REFLECTRM_MAX_NEW_TOKENS
    add_config_flags(p, JudgeConfig, given_only=True,
                     skip=[f.name for f in fields(JudgeConfig) if f.name != "max_new_tokens"])
    # the judge the app starts with: unset flags keep the settings ($REFLECTRM_MODEL, $REFLECTRM_THREADS, ...)
    add_backend_flags(p, given_only=True)
    add_access_flags(p)  # the same options as `serve`'s; unset flags keep $REFLECTRM_ALLOWED_HOSTS / _ORIGINS
    p.set_defaults(func=cmd_app)


def _add_settings_flags(p: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """`--name` for fields of the app section (`ServeSettings`), their help and default read from the class: an
    unset flag keeps the environment's setting ($REFLECTRM_NAME)."""
    from reflectrm_app.settings import ServeSettings

    helps = field_help(ServeSettings)
    for name in names:
        field = ServeSettings.model_fields[name]
        otherwise = "" if field.default is None else f", else {field.default}"
        kind = int if field.annotation is int else str
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind,
                       help=f"{helps[name]}; default: ${ENV_PREFIX}{name.upper()}{otherwise}")


def cmd_app(args: argparse.Namespace) -> int:
    for name, value in (("GRADIO_ANALYTICS_ENABLED", "False"), ("HF_HUB_OFFLINE", "1"),
                        ("HF_HUB_DISABLE_TELEMETRY", "1")):
        os.environ.setdefault(name, value)  # before gradio is imported: no outbound connection at start
    settings = app_settings(args)
    from reflectrm_app.services import Services
    from reflectrm_app.ui.blocks import build_app, launch_options
    from reflectrm.serving.hosts import exposure_warning

    if warning := exposure_warning(settings.app.host, service="the app", guarded=bool(settings.app.credentials()),
                                   missing="a login", fix='set REFLECTRM_AUTH="user:password"'):
        log.warning("%s", warning)
    services = Services.start(settings)
    demo = build_app(services)
    demo.queue(default_concurrency_limit=4)
    runtime = services.runtime
    print(printable(f"ReflectRM app on http://{settings.app.host}:{settings.app.port} "
                    f"(database {runtime.store.engine.url!r}; files users name are read from {runtime.data_root})"),
          file=sys.stderr, flush=True)
    try:
        demo.launch(server_name=settings.app.host, server_port=settings.app.port, quiet=True, **launch_options(settings))
    finally:
        services.close()
    return 0


def app_settings(args: argparse.Namespace) -> Any:
    """The app's `Settings`: the environment, with the flags given on top; checked before anything loads (a model
    folder without its tokenizer, or --device cuda on a CPU build, is one line)."""
    from reflectrm_app.settings import check_environment, load_settings

    from reflectrm.backends.engine import EngineConfig

    check_environment()  # a misspelt or renamed REFLECTRM_ variable would otherwise be ignored, its default used
    settings = load_settings(host=args.host, port=args.port, database_url=args.db, max_new_tokens=args.max_new_tokens,
                             runs_dir=args.runs_dir, data_root=args.data_root,
                             allowed_hosts=_joined(args.allowed_hosts), allowed_origins=_joined(args.allowed_origins),
                             **given_flags(BackendConfig, args), **given_flags(EngineConfig, args))
    settings.generation.check_ready()
    return settings


def _joined(values: list[str] | None) -> str | None:
    """Repeated flag values as the comma-separated setting they override (None: not given, the setting stays)."""
    return ",".join(values) if values else None
