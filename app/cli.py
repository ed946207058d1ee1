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
from typing import NoReturn

from reflectrm_app.commands import judge, running
from reflectrm_app.commands.options import open_store
from reflectrm.display import printable

EXIT_USAGE = running.EXIT_USAGE
OPTIONAL_PARTS = MappingProxyType({  # module -> the extra that installs it
    "reflectrm_app.commands.store": "store", "reflectrm_app.commands.workbench": "ui",
    "reflectrm_app.commands.train": "train", "reflectrm_app.commands.evaluate": "store",
    "reflectrm_app.commands.serve": "serve", "reflectrm_app.commands.rounds": "store",  # headless: neither evaluate nor serve needs the UI
})


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
    judge.register(sub, open_store=open_store)
    for register in _optional_registers():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    running.safe_streams()  # from the start: a usage error can quote what was typed
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(running.PrintableFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    if not args.verbose:
        _quiet_libraries()
    return running.run_command(args)  # known failures one line, exit 2; output escaped and never an error


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
