"""The `aiayn` command line: one subcommand per job, in the habits of fairseq/OpenNMT users.

Each module listed in COMMANDS adds its subcommand(s) with `register(subparsers)`; its handler `<name>_command(args)`
returns an exit code and raises aiayn.errors.UserError for a user's mistake. `main` is the one place errors become exit
codes: a UserError, a file that cannot be read or written, or bad bytes -> one line "error: ..." on stderr and exit 1
(2 for a usage error, a flag outside its range included: common.Parser makes argparse's errors one line too);
Ctrl-C -> 130; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys

from aiayn import torch_import
from aiayn.cli.common import Parser, low_memory
from aiayn.errors import UserError

# Modules that contribute subcommands, in the order `aiayn --help` lists them.
COMMANDS = [
    "aiayn.cli.quickstart",
    "aiayn.cli.prepare",
    "aiayn.cli.train",
    "aiayn.cli.average",
    "aiayn.cli.distill",
    "aiayn.cli.shortlist",
    "aiayn.cli.translate",
    "aiayn.cli.score",
    "aiayn.cli.attention",
    "aiayn.cli.serve",
    "aiayn.cli.export",
    "aiayn.cli.import_",
    "aiayn.cli.parse",
    "aiayn.cli.evaluate",
    "aiayn.cli.params",
    "aiayn.cli.variations",
    "aiayn.cli.tables",
    "aiayn.cli.paper",
    "aiayn.cli.doctor",
]


# The module of each subcommand whose name is not its module's (the rest: aiayn.cli.<name>); `main` imports only the
# module of the command it runs, so that a command starts without what the others import (torch, for one).
MODULE_OF = {"import": "aiayn.cli.import_", "plot": "aiayn.cli.train", "prepare-parse": "aiayn.cli.parse",
             "table1": "aiayn.cli.tables", "table2": "aiayn.cli.tables"}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command`'s module alone (what `main` needs to run it)."""
    parser = Parser(prog="aiayn", description="The Transformer of 'Attention Is All You Need', end to end.")
    parser.add_argument("--low-memory", action="store_true",
                        help="give freed memory back to the OS (lower peak RSS, slower CPU steps; by default aiayn "
                             "keeps it for reuse: docs/speed-design.md); also AIAYN_LOW_MEMORY=1")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    module = MODULE_OF.get(command, f"aiayn.cli.{command}")
    for name in [module] if module in COMMANDS else COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def _command(argv: list[str]) -> str | None:
    """The subcommand named in argv (the first word after the global flags), if any."""
    words = [a for a in argv if a != "--low-memory"]
    return words[0] if words and not words[0].startswith("-") else None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(_command(sys.argv[1:] if argv is None else argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0), or a mistake in the flags, already one "error:" line (Parser.error: 2)
        return e.code if isinstance(e.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    keep = not low_memory(args)
    if getattr(args, "needs_torch", lambda _: True)(args):
        collecting = gc.isenabled()
        gc.disable()  # torch's import makes ~10^5 objects that live as long as the process: no collections meanwhile
        try:
            with torch_import.registrations_deferred(getattr(args, "defers_registrations", False)):
                from aiayn.runtime import configure_process

            # Before any kernel: oneDNN's caches bounded (a long bf16 run's memory stays flat), and unless
            # --low-memory every command reuses its big tensors' memory instead of page-faulting it in again.
            configure_process(kernel_cache=True, keep_freed_memory=keep)
        finally:
            if argv is None:  # the process's own start (not a caller's main([...])): later collections skip them
                gc.freeze()  # (with the above, 0.1-0.2 CPU seconds of a one-line translate: docs/speed.md)
            if collecting:
                gc.enable()
    elif keep:  # translate --engine ct2 runs without torch: the allocator's setting alone (CTranslate2's calls
        from aiayn.allocator import keep_freed_memory  # reuse their memory instead of faulting it in again)

        keep_freed_memory()
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # e.g. `aiayn translate ... | head`: stop quietly, as Unix tools do
        sys.stderr.close()
        return 141
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except (OSError, UnicodeDecodeError) as e:  # a file that cannot be read or written
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
