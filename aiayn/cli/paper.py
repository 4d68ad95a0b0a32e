"""`aiayn paper`: the paper's tables and figures regenerated into one offline report (aiayn.experiments.report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiayn.cli.common import add_device_arg, positive_float
from aiayn.extras import require


def paper_command(args: argparse.Namespace) -> int:
    from aiayn.experiments.report import make_report

    require("aiayn paper", "viz")  # every table's plot and the attention figures
    argv = ["--budget", args.budget, "--out", str(args.out)] + [a for p in args.sources for a in ("--from", p)]
    argv += (["--data", args.data] if args.data else []) + (["--tflops", str(args.tflops)] if args.tflops else [])
    argv += ["--treebank", args.treebank] if args.treebank else []
    made = make_report(args.out, args.budget, args.sources, args.data, args.device, args.tflops, argv,
                       say=lambda s: print(s, file=sys.stderr, flush=True), treebank=args.treebank)
    print(f"wrote {made['html']} (one offline page) and {made['markdown']}")
    return 0


def register(sub) -> None:
    from aiayn.experiments.report.budgets import BUDGETS

    p = sub.add_parser(
        "paper", help="the paper's tables and figures regenerated into one offline HTML page and its markdown twin",
        description="Run or reuse each of the paper's results (Table 1 measured, Table 3's params column and its "
                    "variations, a translation model and the appendix's attention figures from it, Table 4's parser "
                    "from --from, Table 2's cost of the runs) and write OUT/report.html (images inlined, nothing "
                    "fetched) and OUT/report.md: the paper's number beside ours, the command, hardware, date and "
                    "what agrees. Each part is saved in OUT/parts/ when done; running the same command again skips "
                    "finished parts. docs/paper-report.md says what each budget runs. Example: aiayn paper --budget "
                    "cpu --out report --from benchmarks/results/table3-cpu")
    p.add_argument("--budget", required=True, metavar="{" + ",".join(BUDGETS) + "}",
                   help="smoke: every part at toy scale in ~2 minutes (nothing learns); cpu: a night on 2 CPU cores; "
                        "gpu: one GPU hour")
    p.add_argument("--out", required=True, type=Path, help="folder of the report (created; finished parts reused)")
    p.add_argument("--from", dest="sources", action="append", default=[], metavar="PATH",
                   help="reuse results instead of running them (repeatable): a Table 3 study folder, a parser "
                        "results folder with eval.log, a translation run or quickstart folder, a table1.json")
    p.add_argument("--data", help="prepared-data folder (train/valid/test, e.g. data-bin/multi30k) for the "
                                  "translation model and Table 3 (default: the built-in English-Spanish Bible)")
    p.add_argument("--treebank", help="folder with train.trees and dev.trees (e.g. ../shared/data/ptb-sample) to train "
                                      "Table 4's parser on, at the budget's size (default: --from a parser folder)")
    p.add_argument("--tflops", type=positive_float,
                   help="sustained TFLOPS per device for Table 2's cost (default on a CPU: its measured fp32 matmul "
                        "rate; needed on a GPU)")
    add_device_arg(p)
    p.set_defaults(func=paper_command)
