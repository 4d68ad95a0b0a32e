"""The `aiayn` command line: one subcommand per job, in the habits of fairseq/OpenNMT users.

Each module that owns a job exposes `register_cli(subparsers)`, which adds its subcommand(s)
with `parser.set_defaults(func=...)`; this file only collects them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute subcommands, in the order `aiayn --help` lists them.
_MODULES = [
    "aiayn.quickstart",
    "aiayn.data",
    "aiayn.train",
    "aiayn.checkpoint",
    "aiayn.translate",
    "aiayn.evaluate",
    "aiayn.params",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiayn", description="The Transformer of 'Attention Is All You Need', end to end."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:  # module not written yet
                continue
            raise
        module.register_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:

    from aiayn.errors import CheckpointError, DataError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from aiayn.perf import keep_freed_memory

    keep_freed_memory()  # every command reuses its big tensors' memory instead of page-faulting it in again
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # e.g. `aiayn translate ... | head`: stop quietly, as Unix tools do
        sys.stderr.close()
        return 141
    except (CheckpointError, DataError, OSError, UnicodeDecodeError) as e:
        # Problems with the user's files: say what is wrong without a traceback.
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130



if __name__ == "__main__":
    sys.exit(main())
