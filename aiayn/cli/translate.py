"""`aiayn translate`: stdin or --input, one sentence per line -> detokenized translations, same order."""

from __future__ import annotations

import argparse
import sys

from aiayn.cli.common import add_device_arg, add_progress_arg, add_search_args, search_config
from aiayn.runtime import resolve_device
from aiayn.translate import Translator


def run(args: argparse.Namespace) -> int:
    search = search_config(args)
    if args.engine == "aiayn":
        translator = Translator.load(args.checkpoint, search, device=resolve_device(args.device),
                                     batch_size=args.batch_size, max_input_len=args.max_input_len)
    if args.input in (None, "-"):
        lines = [line.rstrip("\r\n") for line in sys.stdin]
    else:
        with open(args.input, encoding="utf-8") as f:
            lines = [line.rstrip("\r\n") for line in f]
    if args.engine == "ct2":  # an exported CTranslate2 folder; the search flags map as aiayn.export.ct2 says
        from aiayn.export.ct2 import CT2Translator

        compute_type = {"fp32": "default", "bf16": "bfloat16", "int8": "int8"}[search.dtype]  # fp32: as exported
        ct2 = CT2Translator(args.checkpoint, device=resolve_device(args.device).type, compute_type=compute_type)
        nbests = ct2.translate_nbest(lines, search, batch_size=args.batch_size, max_input_len=args.max_input_len)
    else:
        nbests = translator.translate_nbest(lines, progress=args.input not in (None, "-") and not args.no_progress)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for n, hyps in enumerate(nbests):
            if search.nbest == 1:
                out.write(hyps[0].text + "\n")
            else:  # Moses n-best format: input line number (from 0) ||| text ||| score
                out.writelines(f"{n} ||| {h.text} ||| {h.score:.4f}\n" for h in hyps)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def register(sub) -> None:
    p = sub.add_parser("translate", help="translate text with a trained model (beam search as the paper)",
                       description="Translate stdin or --input, one sentence per line, to detokenized text "
                                   "(one line per input line, same order). Defaults are the paper's: beam 4, "
                                   "length penalty alpha 0.6, max output length = input length + 50.")
    p.add_argument("--checkpoint", required=True,
                   help="run directory (its averaged, else best, else newest checkpoint) or a checkpoint file; "
                        "with --engine ct2, a folder written by `aiayn export --to ct2`")
    p.add_argument("--engine", choices=["aiayn", "ct2"], default="aiayn",
                   help="ct2: decode with CTranslate2 (needs --lp power: its length penalty is |Y|^alpha; --dtype "
                        "bf16/int8 pick its compute type, fp32 keeps the exported one); default aiayn")
    p.add_argument("--input", help="input file (default: stdin); a progress bar is shown for files")
    p.add_argument("--output", help="output file (default: stdout)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    p.add_argument("--max-input-len", type=int, default=None,
                   help="longer inputs (subword tokens + EOS) are cut, with a warning (default: the model's "
                        "max_positions)")
    add_search_args(p)
    add_device_arg(p, default="cpu")
    add_progress_arg(p)
    p.set_defaults(func=run)
