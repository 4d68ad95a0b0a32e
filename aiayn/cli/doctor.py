"""`aiayn doctor`: what this machine will use and why (aiayn.doctor), for users and for bug reports."""

from __future__ import annotations

import argparse
import json


def doctor_command(args: argparse.Namespace) -> int:
    from aiayn.doctor import format_report, report

    r = report(bench=not args.no_bench)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(format_report(r), end="")
    return 0


def register(sub) -> None:
    p = sub.add_parser("doctor", help="what this machine will use and why: CPU, bf16, threads, torch, GPUs, extras",
                       description="Print the CPU and its instruction sets (AVX2, AVX-512, AVX512-BF16, AMX, VNNI), "
                                   "whether bf16 is native, what --dtype auto and --threads 0 pick, the torch build, "
                                   "GPUs, the optional extras installed (with the pip line for each missing one) and "
                                   "a measured fp32/bf16 matmul rate (about a second; --no-bench skips it). Paste it "
                                   "into bug reports.")
    p.add_argument("--json", action="store_true", help="one JSON object instead of aligned lines")
    p.add_argument("--no-bench", action="store_true", help="skip the matmul measurement")
    p.set_defaults(func=doctor_command)
