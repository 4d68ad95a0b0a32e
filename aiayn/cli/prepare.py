"""`aiayn prepare`: clean parallel text, build the shared vocabulary, cache token ids (aiayn.data.prepare)."""

from __future__ import annotations

import argparse

from aiayn.cli.common import add_language_args, non_negative_int, number, positive_int
from aiayn.config import PAPER_VOCAB
from aiayn.data import prepare
from aiayn.errors import UsageError


def prepare_command(args: argparse.Namespace) -> int:
    if args.byte_fallback and args.vocab:
        raise UsageError("--byte-fallback applies to a vocabulary trained here, not to a reused --vocab")
    held_out = {}
    for split in ("valid", "test"):
        src, tgt = getattr(args, f"{split}_src"), getattr(args, f"{split}_tgt")
        if (src is None) != (tgt is None):
            raise UsageError(f"give both --{split}-src and --{split}-tgt")
        held_out[split] = (src, tgt) if src else None
    prepare(args.src, args.tgt, args.out, vocab_size=args.vocab_size, max_len=args.max_len,
            max_ratio=args.max_ratio, seed=args.seed, tsv=args.tsv, vocab=args.vocab,
            vocab_sample=args.vocab_sample, byte_fallback=args.byte_fallback,
            languages=(args.source_lang, args.target_lang) if args.source_lang or args.target_lang else None,
            **held_out)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "prepare", help="clean parallel text, build the shared vocabulary, cache token ids",
        description="Clean parallel text (Moses clean-corpus-n), train one shared SentencePiece BPE "
                    "vocabulary and cache token ids in a prepared-data directory (see docs/data.md). The language "
                    "pair, recorded there for serve and export: --source-lang and --target-lang, else the two-letter "
                    "suffixes of the --src and --tgt files (train.en, train.de).",
    )
    p.add_argument("--src", help="training source text, one sentence per line")
    p.add_argument("--tgt", help="training target text, line-aligned with --src")
    p.add_argument("--tsv", help="training pairs as one file of source TAB target (instead of --src/--tgt)")
    p.add_argument("--out", required=True, help="prepared-data directory to write")
    p.add_argument("--vocab-size", type=number(int, low=5), default=PAPER_VOCAB,
                   help="BPE pieces (default: %(default)s, the paper's; small corpora need fewer)")
    p.add_argument("--vocab", help="reuse this vocabulary (.model file, prepared-data or run directory)")
    p.add_argument("--byte-fallback", action="store_true",
                   help="spell characters outside the vocabulary as their UTF-8 bytes instead of <unk>, so that a "
                        "rare character or emoji can come out unchanged (default off; docs/data.md)")
    add_language_args(p)
    for split in ("valid", "test"):
        p.add_argument(f"--{split}-src", help=f"{split} source text")
        p.add_argument(f"--{split}-tgt", help=f"{split} target text")
    p.add_argument("--max-len", type=positive_int, default=250,
                   help="drop training pairs with a side longer than this many words (default: %(default)s)")
    p.add_argument("--max-ratio", type=number(float, low=1), default=9.0,
                   help="drop training pairs whose word counts differ by more than this factor "
                        "(default: %(default)s, as Moses)")
    p.add_argument("--seed", type=non_negative_int, default=1, help="seed of the vocabulary's training sample")
    p.add_argument("--vocab-sample", type=number(int, low=2), default=1_000_000,
                   help="sentences (both sides) the vocabulary is trained on (default: %(default)s)")
    p.set_defaults(func=prepare_command)
