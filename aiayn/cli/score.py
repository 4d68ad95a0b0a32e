"""`aiayn score`: the log-probability a model gives each given translation (forced decoding, aiayn.scoring)."""

from __future__ import annotations

import argparse

from aiayn.cli.common import add_checkpoint_arg, add_device_arg, add_precision_arg, number, positive_int
from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.errors import DataError
from aiayn.files import atomic_text_output, check_output_path, read_lines


def score_command(args: argparse.Namespace) -> int:
    from aiayn.scoring import score_pairs

    if args.output not in (None, "-"):
        check_output_path(args.output)
    sources, targets = read_lines(args.src), read_lines(args.tgt)
    if len(sources) != len(targets):
        raise DataError(f"--src {args.src} has {len(sources)} lines but --tgt {args.tgt} has {len(targets)}; they "
                        "must be line-aligned (line i of one is the translation of line i of the other)")
    engine = open_engine(args.checkpoint, EngineOptions(precision=args.precision, device=args.device,
                                                        search_impl="eager", forced=True))
    scores = score_pairs(engine.model, engine.vocab, sources, targets, args.batch_size, args.max_input_len)
    with atomic_text_output(args.output) as out:
        out.writelines(f"{s.total:.4f}\t{s.mean:.4f}\n" for s in scores)
    return 0


def register(sub) -> None:
    p = sub.add_parser("score", help="score given translations with a model (forced decoding)",
                       description="Print, per line pair of --src and --tgt, TOTAL TAB MEAN: TOTAL the sum of the "
                                   "log-probs of the target's tokens, EOS included, given the source (teacher "
                                   "forcing: minus the training NLL of that pair, without label smoothing), MEAN "
                                   "TOTAL / (words + 1 for EOS). docs/decoding.md.")
    add_checkpoint_arg(p)
    p.add_argument("--src", required=True, help="source text, one sentence per line ('-': stdin)")
    p.add_argument("--tgt", required=True, help="target text to score, line-aligned with --src")
    p.add_argument("--output", help="output file (default: stdout); written whole or not at all")
    p.add_argument("--batch-size", type=positive_int, default=64, help="pairs per batch (default 64)")
    p.add_argument("--max-input-len", type=number(int, low=2), default=None,
                   help="longer sources (subword tokens + EOS) are cut, with a warning, as translate cuts them "
                        "(default: the model's max_positions)")
    add_precision_arg(p)
    add_device_arg(p)
    p.set_defaults(func=score_command)
