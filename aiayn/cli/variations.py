"""`aiayn variations`: Table 3 of the paper regenerated (aiayn.experiments.table3)."""

from __future__ import annotations

import argparse

from aiayn.cli.common import add_dataclass_args, add_device_arg, given_fields, positive_float, positive_int
from aiayn.config import INITS
from aiayn.errors import UsageError
from aiayn.training.train import TrainConfig

# Chosen per machine or by --steps/--minutes; every other training option is a flag, fixed for all rows.
_NOT_FLAGS = ("max_steps", "max_minutes", "device", "threads", "keep_last")


def variations_command(args: argparse.Namespace) -> int:
    from aiayn.experiments.table3.report import report
    from aiayn.experiments.table3.runner import row_worker, train_variations

    if args.worker:  # one row, as a subprocess of --jobs N
        return row_worker(args.out, args.worker, args.worker_steps, args.device, args.threads, args.keep_checkpoints,
                          args.jobs)
    if args.report:
        summary = report(args.out)
        print(summary["text"], end="")
    else:
        if args.steps is not None and args.minutes is not None:
            raise UsageError("give --steps or --minutes, not both")
        summary = train_variations(
            args.data, args.out, args.rows, scale=args.scale, steps=args.steps, minutes=args.minutes,
            jobs=args.jobs, device=args.device, threads=args.threads,
            keep_checkpoints=args.keep_checkpoints, dev_sentences=args.dev_sentences,
            backbone={k: v for k, v in (("norm_first", args.norm_first), ("init", args.init)) if v is not None},
            train={k: v for k, v in given_fields(args, TrainConfig).items() if k not in _NOT_FLAGS})
    plot = f" and {summary['plot']}" if summary.get("plot") else " (no plot: matplotlib is not installed)"
    print(f"wrote {args.out}/table3.md{plot}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "variations", help="Table 3: train every model variation alike and set the scores beside the paper's",
        description="Train each row of Table 3 (presets base, A1..A4, B1, B2, C1..C7, D1..D4, E, big) with everything "
                    "else equal (the same steps, data, seed and options), score it as the paper did (dev perplexity "
                    "per subword token, dev BLEU with beam 4, no checkpoint averaging), and write OUT/table3.md (ours "
                    "beside the paper's), OUT/table3.png and Spearman's rank correlation. Finished rows are skipped, "
                    "interrupted ones resume; rows trained on several machines merge by copying OUT/<row> folders "
                    "(then --report). Example: aiayn variations --data data-bin/multi30k --out runs/table3 --scale 4 "
                    "--steps 2000 --jobs 8 --max-tokens 8192 --warmup 1000")
    p.add_argument("--data", help="prepared-data directory with a valid split (needed to start OUT)")
    p.add_argument("--out", required=True, help="output directory (one folder per row)")
    p.add_argument("--rows", help="comma-separated rows, e.g. base,A1,C5 (default and 'all': the 20 rows); "
                                  "ROW@seedN trains a row again at seed N (e.g. all,base@seed2,base@seed3): the "
                                  "report then gives the seed noise and rho over the rows whose paper PPLs differ by "
                                  "more than it")
    p.add_argument("--scale", type=positive_int,
                   help="divide d_model, d_ff, d_k, d_v by K; N, h, P_drop, eps_ls as the row says "
                        "(default 1: the paper's sizes)")
    p.add_argument("--steps", type=positive_int, help="training steps of every row (default 100000, the paper's)")
    p.add_argument("--minutes", type=positive_float,
                   help="instead of --steps: time each row's first steps and pick the one step count that fits all "
                        "rows into about M minutes of training (saved in OUT/plan.json)")
    p.add_argument("--dev-sentences", type=positive_int,
                   help="score BLEU on the first N dev sentences only, for a quick check (default: all of them, the "
                        "paper's protocol; perplexity is always on all). An untrained row's translations run to the "
                        "length limit, so in a short run decoding the dev set takes most of the time")
    p.add_argument("--norm-first", action="store_const", const=True,
                   help="every row pre-norm, x + Sublayer(LayerNorm(x)), instead of the paper's post-norm: deep rows "
                        "then train about as fast as shallow ones early on (docs/experiments.md); saved in the plan")
    p.add_argument("--init", choices=INITS,
                   help="initialization of every row's projections (default xavier; docs/model.md); saved in the plan")
    p.add_argument("--jobs", type=positive_int, default=1, help="rows trained at once, as subprocesses (default 1)")
    p.add_argument("--threads", type=positive_int, help="CPU threads per row (default: cores / jobs)")
    p.add_argument("--keep-checkpoints", action="store_true",
                   help="keep each row's checkpoints after it is scored (default: delete them)")
    p.add_argument("--report", action="store_true", help="only write the table, plot and rho from OUT's finished rows")
    p.add_argument("--worker", metavar="ROW", help=argparse.SUPPRESS)  # one row of OUT's plan: what --jobs starts
    p.add_argument("--worker-steps", type=positive_int, help=argparse.SUPPRESS)  # ... trained to this step
    add_device_arg(p)
    add_dataclass_args(p.add_argument_group("training options, the same for every row (TrainConfig; defaults: the "
                                            "paper's, with checkpoints every 5 minutes)"), TrainConfig,
                       skip=_NOT_FLAGS)
    p.set_defaults(func=variations_command)
