"""`aiayn quickstart`: the main job on the built-in English-Spanish Bible (aiayn.quickstart)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn.cli.common import (
    add_device_arg,
    add_progress_arg,
    model_overrides,
    non_negative_float,
    number,
    positive_float,
    positive_int,
)
from aiayn.config import PRESETS


def quickstart_command(args: argparse.Namespace) -> int:
    from aiayn.quickstart import quickstart

    result = quickstart(Path(args.out), args.minutes, args.preset, args.vocab_size, args.dtype, args.average_last,
                        args.beam, progress=not args.no_progress, model=model_overrides(args.set),
                        max_tokens=args.max_tokens, warmup=args.warmup, lr_factor=args.lr_factor, alpha=args.alpha,
                        anneal=args.anneal, max_steps=args.max_steps, device=args.device)
    if result["interrupted_by"] is not None:  # stopped by Ctrl-C / SIGTERM, with a checkpoint: 130 / 143
        return 128 + result["interrupted_by"]
    return 0


def register(sub) -> None:
    p = sub.add_parser("quickstart", help="prepare, train, average, translate and score the built-in corpus",
                       description="The main job on the built-in English-Spanish Bible: about 13 minutes on 2 "
                       "CPU cores.")
    p.add_argument("--out", default="runs/quickstart", help="folder for everything (default runs/quickstart)")
    p.add_argument("--minutes", type=positive_float, default=12.0,
                   help="training time budget (default 12); an interrupted run is resumed to it")
    p.add_argument("--max-steps", type=number(int, low=0), default=0,
                   help="train for this many steps instead of --minutes (the same model on any machine; default 0: "
                   "by time)")
    p.add_argument("--preset", default="small", choices=list(PRESETS),
                   help="model preset (default small; training in fp32, small is narrowed to 2+2 layers of width 192)")
    p.add_argument("--vocab-size", type=number(int, low=5),
                   help="BPE pieces (default: 8000 when training in bf16, 4000 in fp32)")
    p.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"],
                   help="auto (default): bf16 where the CPU/GPU multiplies bf16 natively, else fp32")
    add_device_arg(p)
    p.add_argument("--average-last", type=positive_int, default=1,
                   help="checkpoints averaged (default 1: in a 12-minute run older checkpoints are much worse)")
    p.add_argument("--beam", type=positive_int, default=4, help="beam size (default 4)")
    p.add_argument("--alpha", type=non_negative_float, default=0.6, help="length penalty (default 0.6)")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="override a field of the preset, e.g. dropout=0.1 (repeatable; the quickstart's own default is "
                   "dropout=0.0 init=fairseq)")
    p.add_argument("--max-tokens", type=positive_int,
                   help="tokens per batch (default: 2048 when training in bf16, 1024 in fp32)")
    p.add_argument("--warmup", type=positive_int, default=400, help="warm-up steps (default 400)")
    p.add_argument("--lr-factor", type=positive_float, default=0.45,
                   help="factor on the paper's learning-rate schedule (default 0.45: peak ~1.4e-3)")
    p.add_argument("--anneal", type=non_negative_float, default=0.3,
                   help="decay the learning rate linearly to 0 over this last fraction of the time (default 0.3; "
                   "0 = the paper's schedule only)")
    add_progress_arg(p)
    p.set_defaults(func=quickstart_command)
