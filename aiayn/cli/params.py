"""`aiayn params`: parameter counts of every preset beside Table 3's params column (aiayn.experiments.params)."""

from __future__ import annotations

import argparse

from aiayn.cli.common import positive_int
from aiayn.config import PAPER_VOCAB


def params_command(args: argparse.Namespace) -> int:
    from aiayn.experiments.params import format_table, parameter_table

    print(format_table(parameter_table(args.vocab_size)))
    print(f"\nTable 3 rows counted with a shared vocabulary of {args.vocab_size:,} (the paper's ~37K BPE); "
          "the paper does not state the exact vocabulary behind its column, so expect a few % difference.")
    return 0


def register(sub) -> None:
    p = sub.add_parser("params", help="print parameter counts of every preset beside Table 3")
    p.add_argument("--vocab-size", type=positive_int, default=PAPER_VOCAB,
                   help=f"shared vocabulary the embeddings are counted with (default {PAPER_VOCAB:,}, the paper's)")
    p.set_defaults(func=params_command)
