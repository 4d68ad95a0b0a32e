"""`aiayn table1` and `aiayn table2`: the paper's Table 1 measured, and Table 2's training cost for a run of yours
(aiayn.experiments.table1, .table2). Table 3 is `aiayn variations`, its parameter column `aiayn params`.

The commands are named after the tables they regenerate, so a reader holding the paper finds them; Table 3 keeps
the paper's own name for it ("variations on the Transformer architecture")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiayn import files
from aiayn.cli.common import number, positive_float, positive_int
from aiayn.extras import require


def table1_command(args: argparse.Namespace) -> int:
    from aiayn.experiments.table1 import format_table, measure_table1, plot
    from aiayn.runtime import configure_process

    for path in (args.json, args.plot):
        if path is not None:
            files.check_output_path(path)  # before minutes of measuring
    if args.plot:
        require("aiayn table1 --plot", "viz")
    configure_process(threads=args.threads)
    res = measure_table1(args.quick, args.d, args.r, args.max_n, args.fit_from, say=lambda s: print(s, file=sys.stderr))
    print(format_table(res), end="")
    print(f"({res['seconds']:.0f} s)")
    if args.json:
        files.write_json(args.json, res)
    if args.plot:
        plot(res, args.plot)
        print(f"wrote {args.plot}")
    return 0


def table2_command(args: argparse.Namespace) -> int:
    from aiayn.experiments.paper import TABLE2_COST
    from aiayn.experiments.table2 import training_cost

    c = training_cost(args.run, args.gpus, args.tflops, args.steps, args.tokens_per_step)
    print(f"{c['tokens_per_s']:,.0f} target tokens/s -> {args.steps:,} steps x {args.tokens_per_step:,} tokens take "
          f"{c['hours']:.1f} h; cost the paper's way: {c['hours']:.1f} h x {args.gpus} x {args.tflops:g} TFLOPS = "
          f"{c['paper_way_flops']:.2g} FLOPs (Table 2: base {TABLE2_COST['base']:.2g}, big {TABLE2_COST['big']:.2g}); "
          f"model FLOPs computed {c['model_flops']:.2g} ({c['utilisation']:.0%} of that)")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "table1", help="Table 1 measured: time, FLOPs, sequential operations and path length of attention, LSTM, "
                       "convolution and restricted attention against n",
        description="One layer of each type (self-attention, an LSTM, a convolution of kernel 3, self-attention "
                    "restricted to |i - j| <= r/2; and eq. 1 alone) maps n vectors of width d to n vectors (batch 1, "
                    "fp32, forward). Prints the exponents of time and FLOPs in n, the autograd graph depth "
                    "(sequential operations) and the maximum path length beside the paper's Table 1, and where "
                    "self-attention becomes more expensive than the LSTM. docs/experiments.md has a run.")
    p.add_argument("--quick", action="store_true", help="n = 16..256, smaller graph and path measurements (~15 s)")
    p.add_argument("--d", type=number(int, low=8), default=512,
                   help="width, a multiple of 8 (default 512, the paper's)")
    p.add_argument("--r", type=number(int, low=2), default=64,
                   help="neighbourhood of restricted self-attention (default 64)")
    p.add_argument("--max-n", type=number(int, low=32), default=4096, help="longest sequence (default 4096)")
    p.add_argument("--fit-from", type=positive_int, default=512,
                   help="fit the exponents over n >= this (default 512)")
    p.add_argument("--threads", type=positive_int, default=1, help="CPU threads (default 1)")
    p.add_argument("--json", type=Path, help="write the measurements here (JSON)")
    p.add_argument("--plot", type=Path, help="write the time/FLOPs plot here (PNG; needs matplotlib)")
    p.set_defaults(func=table1_command)

    p = sub.add_parser(
        "table2", help="Table 2's training cost, the paper's way (time x GPUs x TFLOPS), from a run's tokens/s",
        description="The paper's training cost is training time x number of GPUs x sustained single-precision FLOPS "
                    "per GPU (base: 12 h x 8 P100 x 9.5 TFLOPS = 3.3e18). From a run's measured target tokens/s "
                    "(its log.jsonl), the time the paper's schedule would take at that speed, that cost, and the "
                    "FLOPs the model actually computes. Example: aiayn table2 runs/ende-base --gpus 8 --tflops 989")
    p.add_argument("run", type=Path, help="a run directory of aiayn train (its log.jsonl and config.json)")
    p.add_argument("--gpus", type=positive_int, required=True, help="devices the run used")
    p.add_argument("--tflops", type=positive_float, required=True,
                   help="sustained single-precision TFLOPS per device (the paper: P100 9.5)")
    p.add_argument("--steps", type=positive_int, default=100_000, help="updates of the schedule (default 100,000)")
    p.add_argument("--tokens-per-step", type=positive_int, default=25_000,
                   help="target tokens per update (default 25,000, the paper's)")
    p.set_defaults(func=table2_command)


