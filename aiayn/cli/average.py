"""`aiayn average`: the element-wise mean of a run's last checkpoints (paper: 5 for base, 20 for big)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiayn.cli.common import positive_int
from aiayn.errors import UsageError
from aiayn.rundir import AVERAGED, RunDir
from aiayn.training.run import average


def average_command(args: argparse.Namespace) -> int:
    if args.inputs and not args.output:
        raise UsageError("--inputs needs --output FILE (where to write the average)")
    if args.inputs:
        paths = [Path(p) for p in args.inputs]
    else:
        paths = RunDir(args.run).checkpoints[-args.last:]
        if len(paths) < args.last:
            print(f"warning: {args.run} has only {len(paths)} checkpoints; averaging those", file=sys.stderr)
    out = average(paths, Path(args.output) if args.output else RunDir(args.run).averaged)
    print(f"averaged {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) -> {out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("average", help="average the last N checkpoints of a run (paper: 5 base, 20 big)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", type=Path, help="run directory; its last --last step checkpoints are averaged")
    src.add_argument("--inputs", nargs="+", help="explicit checkpoint files to average")
    p.add_argument("--last", type=positive_int, default=5, help="how many of the newest checkpoints (default 5)")
    p.add_argument("--output", metavar="FILE", help=f"output file (default RUN/{AVERAGED})")
    p.set_defaults(func=average_command)
