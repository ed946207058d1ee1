"""The `reflectrm` command: assembles the library's, the store's and the app's sub-commands.

Each part registers its own sub-commands; parts whose optional dependencies are missing are left
out and say which extra to install when asked for.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any, NoReturn

from reflectrm import cli as judge_cli
from reflectrm.display import printable
from reflectrm.errors import InputError

EXIT_USAGE = judge_cli.EXIT_USAGE
OPTIONAL_PARTS = MappingProxyType({  # module -> the extra that installs it
    "reflectrm_db.cli": "store", "reflectrm_app.app_cli": "ui", "reflectrm.training.cli": "train",
    "reflectrm_app.eval_cli": "store", "reflectrm_app.serve_cli": "serve",  # headless: neither needs the UI
})


def open_store(url: str) -> Any:
    try:
        from reflectrm_db.services import JudgmentStore
    except ImportError as exc:
        raise InputError("--db needs the store: install it with `pip install 'reflectrm[store]'`") from exc
    return JudgmentStore.open(url, in_memory_ok=False)  # a command's records must outlive it


def _optional_registers() -> list[Callable[[argparse._SubParsersAction], None]]:
    registers = []
    for module in OPTIONAL_PARTS:
        try:
            registers.append(__import__(module, fromlist=["register"]).register)
        except ModuleNotFoundError as exc:
            # The part itself is absent (not built yet, or its extra is missing): leave it out.
            logging.getLogger(__name__).debug("leaving out %s: %s", module, exc)
    return registers


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (`error: ...`) and exit 2, like every other refusal."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {printable(' '.join(message.split()))} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="reflectrm", description="ReflectRM: a self-reflecting generative reward model.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    judge_cli.register(sub, open_store=open_store)
    for register in _optional_registers():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    judge_cli.safe_streams()  # from the start: a usage error can quote what was typed
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(judge_cli.PrintableFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    if not args.verbose:
        _quiet_libraries()
    return judge_cli.run_command(args)  # known failures one line, exit 2; output escaped and never an error


def _quiet_libraries() -> None:
    import warnings

    warnings.filterwarnings("ignore")
    if "transformers" not in sys.modules:  # it reads its level when first imported: a command that loads no model
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # does not pay a second to import it here
        return
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()


if __name__ == "__main__":
    raise SystemExit(main())
