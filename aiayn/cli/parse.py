"""`aiayn prepare-parse` (a treebank -> prepared data) and `aiayn parse` (sentences -> trees), section 6.3."""

from __future__ import annotations

import argparse
import sys

from aiayn.cli.common import add_device_arg, add_search_args, search_config
from aiayn.runtime import resolve_device


def prepare_command(args: argparse.Namespace) -> int:
    from aiayn.parsing.prepare import prepare_parse

    prepare_parse(args.train, args.out, args.valid, args.test, vocab_size=args.vocab_size)
    return 0


def parse_command(args: argparse.Namespace) -> int:
    from aiayn.parsing.parse import Parser
    from aiayn.translate import Translator

    translator = Translator.load(args.checkpoint, search_config(args), device=resolve_device(args.device),
                                 batch_size=args.batch_size)
    if args.input in (None, "-"):
        lines = [line.rstrip("\r\n") for line in sys.stdin]
    else:
        with open(args.input, encoding="utf-8") as f:
            lines = [line.rstrip("\r\n") for line in f]
    nbests = Parser(translator).parse_nbest(lines)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for n, trees in enumerate(nbests):
            if args.nbest == 1:
                out.write((trees[0][0] if trees else "") + "\n")
            else:
                out.writelines(f"{n} ||| {tree} ||| {score:.4f}\n" for tree, score in trees)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def register(sub) -> None:
    from aiayn.parsing.parse import PAPER_PARSE_SEARCH

    p = sub.add_parser("prepare-parse", help="a Penn Treebank -> prepared data for training a parser (section 6.3)",
                       description="Normalize trees as EVALB's COLLINS.prm, linearize them (Vinyals et al. 2015) and "
                                   "write a prepared-data folder that `aiayn train` uses unchanged.")
    p.add_argument("--train", required=True, help="training trees: one per line, or .mrg style")
    p.add_argument("--valid", help="dev trees (selection)")
    p.add_argument("--test", help="test trees")
    p.add_argument("--out", required=True, help="prepared-data directory to write")
    p.add_argument("--vocab-size", type=int, default=8000, help="subword pieces of the words (plus structure tokens)")
    p.set_defaults(func=prepare_command)

    p = sub.add_parser("parse", help="parse sentences into trees with a trained parser",
                       description="Read sentences (PTB-tokenized words separated by spaces, one per line) and print "
                                   "one bracketed tree per line, always well-formed with one leaf (tagged XX) per "
                                   "word. Defaults are section 6.3's: beam 21, alpha 0.3, output <= input + 300.")
    p.add_argument("--checkpoint", required=True, help="run directory or checkpoint file of a parser")
    p.add_argument("--input", help="sentences (default: stdin)")
    p.add_argument("--output", help="trees (default: stdout)")
    p.add_argument("--batch-size", type=int, default=16, help="sentences per batch (default 16)")
    add_search_args(p, PAPER_PARSE_SEARCH)
    add_device_arg(p, default="cpu")
    p.set_defaults(func=parse_command)
