"""`aiayn distill`: a student trained on its teacher's translations (aiayn.training.distill; docs/distill.md)."""

from __future__ import annotations

import argparse
import os
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
from aiayn.config import DEFAULT_STUDENT, PRESETS
from aiayn.errors import UsageError

DTYPES = ("auto", "bf16", "fp32")


def distill_command(args: argparse.Namespace) -> int:
    from aiayn.training.distill import Recipe, distill

    if args.minutes is not None and (args.max_steps or args.epochs):
        raise UsageError("give the student one budget: --minutes M, --max-steps N or --epochs E")
    by_time = {} if args.minutes is None else {"minutes": args.minutes}  # else the Recipe's default
    recipe = Recipe(teachers=tuple(args.teacher), data=args.data, student=args.student,
                    student_overrides=model_overrides(args.set), beam=args.beam, alpha=args.alpha,
                    shard_size=args.shard_size, batch_size=args.batch_size, max_steps=args.max_steps,
                    epochs=args.epochs, max_tokens=args.max_tokens, warmup=args.warmup, lr_factor=args.lr_factor,
                    anneal=args.anneal, dtype=args.dtype, device=args.device, threads=args.threads,
                    int8_lines=args.int8_lines, **by_time)
    result = distill(recipe, Path(args.out), progress=not args.no_progress)
    if result["interrupted_by"] is not None:  # the student's training stopped by Ctrl-C / SIGTERM: 130 / 143
        print("stopped: the student's training was interrupted (checkpoint saved); run the same command again to "
              "continue it", flush=True)
        return 128 + result["interrupted_by"]
    if int(os.environ.get("RANK", "0")) == 0:
        stages = result["stages"]
        int8 = stages.get("int8", {})
        if "fp32" in int8:
            print(f"student dev BLEU (greedy, first {int8['sentences']} sentences): fp32 {int8['fp32']['bleu']:.1f}, "
                  f"int8 {int8['int8']['bleu']:.1f}")
        print(f"done: the student is {args.out} (aiayn translate --checkpoint {args.out}); the recipe is in "
              f"{Path(args.out) / 'distill' / 'recipe.json'}")
    return 0


def register(sub) -> None:
    students = [name for name in PRESETS if name.startswith("student-")]
    p = sub.add_parser("distill", help="train a fast student on a teacher's translations (knowledge distillation)",
                       description="Sequence-level knowledge distillation (Kim & Rush 2016), one resumable command: "
                       "the teacher translates the training sources with beam search (in shards; under torchrun, "
                       "each process its share), the student trains on the teacher's translations into --out, and a "
                       "shortlist is built from them; the student's int8 translations are checked beside fp32. Kill "
                       "it at any stage and run the same command again: it continues. Then: aiayn translate "
                       "--checkpoint OUT. docs/distill.md.")
    p.add_argument("--teacher", action="append", required=True, metavar="RUN",
                   help="the teacher: a run directory or checkpoint (an imported OPUS-MT run too); repeat it for an "
                        "ensemble. Its vocabulary must be the data's (aiayn prepare --vocab RUN/vocab.model)")
    p.add_argument("--data", required=True, help="prepared-data directory whose training sources the teacher "
                                                 "translates (its dev and test splits are kept)")
    p.add_argument("--out", required=True, help="the student's run directory (new, or this command's earlier one)")
    p.add_argument("--student", default=DEFAULT_STUDENT, metavar="PRESET",
                   help="teacher-E-D: the teacher itself cut to E encoder and D decoder layers (a number, or all of "
                        "the teacher's), starting from its weights (shrink and fine-tune; --set may then change only "
                        "dropout and label_smoothing); or a student trained from random weights: "
                        f"{', '.join(students)} (a deep encoder, a shallow decoder) or any other preset "
                        f"(default {DEFAULT_STUDENT}: all the teacher's encoder layers and two of its decoder layers)")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="override a field of the student's preset, e.g. dropout=0.0 (repeatable)")
    p.add_argument("--minutes", type=positive_float, default=None,
                   help="the student's training time budget (default 12); an interrupted run is resumed to it")
    p.add_argument("--max-steps", type=number(int, low=0), default=0,
                   help="train the student for this many steps instead of --minutes (default 0: by time)")
    p.add_argument("--epochs", type=number(float, low=0), default=0.0,
                   help="train the student for this many passes over the distilled data instead of --minutes (made "
                        "steps once the data exist; default 0: by time): the budget to give on a GPU, which runs "
                        "many epochs a minute (docs/distill.md)")
    p.add_argument("--beam", type=positive_int, default=4, help="the teacher's beam size (default 4)")
    p.add_argument("--alpha", type=non_negative_float, default=0.6,
                   help="the teacher's length penalty alpha (default 0.6)")
    p.add_argument("--shard-size", type=positive_int, default=2000,
                   help="training pairs per shard of the teacher's translations, the unit a rerun resumes from "
                        "(default 2000)")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="sentences per batch of the teacher's search (default 64)")
    p.add_argument("--max-tokens", type=positive_int, default=2048,
                   help="the student's tokens per batch and side (default 2048)")
    p.add_argument("--warmup", type=positive_int, default=400, help="the student's warm-up steps (default 400)")
    p.add_argument("--lr-factor", type=positive_float, default=0.45,
                   help="scales the student's learning-rate schedule (default 0.45, the quickstart's)")
    p.add_argument("--anneal", type=number(float, low=0, below=1), default=0.3,
                   help="the student's rate falls linearly to 0 over this last fraction of its budget (default 0.3)")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="the student's training dtype (auto: bf16 where the CPU/GPU multiplies bf16 natively)")
    p.add_argument("--threads", type=number(int, low=0), default=0,
                   help="CPU threads (default 0: the cores not busy with other processes)")
    p.add_argument("--int8-lines", type=number(int, low=0), default=500,
                   help="dev sentences the student translates in fp32 and int8 at the end (default 500; 0: none)")
    add_device_arg(p)
    add_progress_arg(p)
    p.set_defaults(func=distill_command)
