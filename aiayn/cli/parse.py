"""`aiayn prepare-parse` (a treebank -> prepared data) and `aiayn parse` (sentences -> trees), section 6.3."""

from __future__ import annotations

import argparse
import sys

from aiayn.cli.common import (
    add_device_arg,
    add_precision_arg,
    add_progress_arg,
    add_search_args,
    positive_int,
    search_config,
)
from aiayn.files import atomic_text_output, check_output_path, read_lines


def prepare_command(args: argparse.Namespace) -> int:
    from aiayn.parsing.prepare import prepare_parse

    prepare_parse(args.train, args.out, args.valid, args.test, vocab_size=args.vocab_size, leaves=args.leaves)
    return 0


def parse_command(args: argparse.Namespace) -> int:
    from aiayn.decoding.engine import EngineOptions, open_engine
    from aiayn.parsing.parse import Parser

    if args.output not in (None, "-"):
        check_output_path(args.output)  # before the work, not after it
    parser = Parser(open_engine(args.checkpoint, EngineOptions(engine="aiayn", search=search_config(args),
                                                               precision=args.precision, device=args.device,
                                                               batch_size=args.batch_size)))
    lines = read_lines(args.input)  # a bad byte names the file (or stdin) and the line
    nbests = parser.parse_nbest(lines, progress=args.input not in (None, "-") and not args.no_progress,
                                constrained=not args.no_constraint)
    if args.no_constraint:
        bad = sum(1 for trees in nbests if trees and trees[0][0].startswith("!"))
        print(f"without the constraint: {len(lines) - bad - sum(1 for t in nbests if not t)} of "
              f"{len(lines)} best outputs are well-formed trees with one leaf per word; {bad} are not (printed "
              "as their tokens after '!')", file=sys.stderr)
    with atomic_text_output(args.output) as out:  # a file appears complete or not at all
        for n, trees in enumerate(nbests):
            if args.nbest == 1:
                out.write((trees[0][0] if trees else "") + "\n")
            else:  # Moses n-best format: input line number (from 0) ||| tree ||| score
                out.writelines(f"{n} ||| {tree} ||| {score:.4f}\n" for tree, score in trees)
    return 0


def register(sub) -> None:
    from aiayn.parsing.parse import PAPER_PARSE_SEARCH
    from aiayn.parsing.trees import LEAVES

    p = sub.add_parser("prepare-parse", help="a Penn Treebank -> prepared data for training a parser (section 6.3)",
                       description="Normalize trees as EVALB's COLLINS.prm, linearize them (Vinyals et al. 2015) and "
                                   "write a prepared-data folder that `aiayn train` uses unchanged.")
    p.add_argument("--train", required=True, help="training trees: one per line, or .mrg style")
    p.add_argument("--valid", help="dev trees (selection)")
    p.add_argument("--test", help="test trees")
    p.add_argument("--out", required=True, help="prepared-data directory to write")
    p.add_argument("--vocab-size", type=positive_int, default=8000,
                   help="subword pieces of the words (plus structure tokens)")
    p.add_argument("--leaves", choices=LEAVES, default="xx",
                   help="target leaves: 'xx' = one placeholder per word (Vinyals et al. 2015, the paper's setup; "
                        "default), 'words' = the words themselves, copied from the source (docs/parsing.md)")
    p.set_defaults(func=prepare_command)

    p = sub.add_parser("parse", help="parse sentences into trees with a trained parser",
                       description="Read sentences (PTB-tokenized words separated by spaces, one per line) and print "
                                   "one bracketed tree per line, always well-formed with one leaf (tagged XX) per "
                                   "word. Defaults are section 6.3's: beam 21, alpha 0.3, output <= input + 300.")
    p.add_argument("--checkpoint", required=True, nargs="+",
                   help="run directory or checkpoint file of a parser; several: decoded as an ensemble (one "
                        "vocabulary; aiayn translate --help)")
    p.add_argument("--input", help="sentences (default: stdin)")
    p.add_argument("--output", help="output file of trees (default: stdout); written whole or not at all")
    p.add_argument("--batch-size", type=positive_int, default=16, help="sentences per batch (default 16)")
    add_search_args(p, PAPER_PARSE_SEARCH)
    add_precision_arg(p)
    p.add_argument("--no-constraint", action="store_true",
                   help="search without the tree constraint, to measure what it does: outputs that are not trees "
                        "are printed as their tokens after '!' and counted on stderr")
    add_device_arg(p)
    add_progress_arg(p)
    p.set_defaults(func=parse_command)
