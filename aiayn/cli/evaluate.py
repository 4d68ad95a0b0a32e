"""`aiayn evaluate`: BLEU (sacreBLEU and the paper's tokenized kind), chrF, and a checkpoint's perplexity."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from aiayn.checkpoint import load_for_inference
from aiayn.cli.common import add_device_arg, positive_int
from aiayn.data import load_split
from aiayn.errors import DataError, UsageError
from aiayn.files import read_lines, sha256_file
from aiayn.metrics import chrf, corpus_bleu, perplexity, tokenized_bleu
from aiayn.runtime import resolve_device


def _guess_lang(ref: str) -> str:
    """Language from the reference's suffix (newstest2014.de -> de), else English."""
    suffix = Path(ref).suffix.lstrip(".")
    return suffix if len(suffix) == 2 and suffix.isalpha() else "en"


def _evaluate_parse(args: argparse.Namespace) -> int:
    from aiayn.metrics.evalb import COLLINS, evalb, with_gold_tags

    if not (args.hyp and args.ref):
        raise UsageError("--task parse needs --hyp TREES --ref GOLD_TREES (one bracketed tree per line)")
    hyps, refs = read_lines(args.hyp), read_lines(args.ref)
    if len(hyps) != len(refs):
        raise DataError(f"{args.hyp} has {len(hyps)} lines but {args.ref} has {len(refs)}; they must be line-aligned")
    # PTB's outer empty bracket "( (S ...) )" is TOP, which COLLINS.prm deletes
    hyps, refs = ([re.sub(r"^\s*\(\s*\(", "(TOP (", line) for line in lines] for lines in (hyps, refs))
    try:
        result = evalb(refs, [with_gold_tags(h, r) for h, r in zip(hyps, refs)], COLLINS)
    except ValueError as e:
        raise DataError(f"{args.hyp} / {args.ref}: {e}") from None
    print(f"parse F1        {result.all.f1:6.2f}  (labelled brackets, EVALB COLLINS.prm; POS tags taken from --ref)")
    print(result.summary(), end="")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.task == "parse":
        return _evaluate_parse(args)
    if not (args.hyp or args.checkpoint):
        raise UsageError("give --hyp FILE --ref FILE (BLEU, chrF) and/or --checkpoint C --data DIR (perplexity)")
    if args.hyp:
        if not args.ref:
            raise UsageError("--hyp needs --ref")
        hyps, refs = read_lines(args.hyp), read_lines(args.ref)
        if len(hyps) != len(refs):
            raise DataError(f"{args.hyp} has {len(hyps)} lines but {args.ref} has {len(refs)}; they must be "
                            "line-aligned")
        lang = args.lang or _guess_lang(args.ref)
        split = not args.no_compound_split and lang == "de"
        bleu, ch = corpus_bleu(hyps, refs), chrf(hyps, refs)
        tok = tokenized_bleu(hyps, refs, lang, compound_split=split)
        print(f"sacreBLEU       {bleu.score:6.2f}  {bleu.line}")
        print(f"  signature     {bleu.signature}")
        print(f"chrF            {ch.score:6.2f}  signature {ch.signature}")
        kind = "Moses-tokenized" + (", compound-split" if split else "")
        print(f"tokenized BLEU  {tok.score:6.2f}  ({kind}, lang {lang}; the paper's kind of number)")
        print(f"                {tok.line}")
    if args.checkpoint:
        if not args.data:
            raise UsageError("--checkpoint needs --data DIR (a prepared-data directory)")
        pairs = load_split(args.data, args.split)
        model, vocab, _ = load_for_inference(args.checkpoint, device=resolve_device(args.device))
        if sha256_file(vocab.model_path) != sha256_file(Path(args.data) / "vocab.model"):
            raise DataError(f"{args.data} was prepared with another vocabulary than the model's ({vocab.model_path}): "
                            "its token ids mean other pieces, so the perplexity would be meaningless; prepare the "
                            "text with `aiayn prepare ... --vocab RUN`")
        res = perplexity(model, pairs, args.max_tokens)
        print(f"perplexity      {res.ppl:6.3f}  per token on {args.data} {args.split} "
              f"({res.tokens:,} target tokens incl. EOS, mean NLL {res.nll / res.tokens:.4f} nats)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="BLEU (sacreBLEU and the paper's tokenized kind), chrF, perplexity",
                       description="Score translations against references (sacreBLEU with signature, chrF, "
                                   "tokenized BLEU as in the paper) and/or a checkpoint's per-token "
                                   "perplexity.")
    p.add_argument("--task", choices=["translation", "parse"], default="translation",
                   help="parse: --hyp/--ref are bracketed trees; prints EVALB's (COLLINS.prm) F1 and summary")
    p.add_argument("--hyp", help="detokenized system output, one sentence per line")
    p.add_argument("--ref", help="detokenized reference, line-aligned with --hyp")
    p.add_argument("--lang", help="target language for Moses tokenization (default: the --ref suffix, else "
                                  "en); de also splits compounds as the paper")
    p.add_argument("--no-compound-split", action="store_true", help="no ##AT## compound splitting for German")
    p.add_argument("--checkpoint", help="run directory or checkpoint file, for --data perplexity")
    p.add_argument("--data", help="prepared-data directory (aiayn prepare)")
    p.add_argument("--split", default="test", help="split of --data to score (default test)")
    p.add_argument("--max-tokens", type=positive_int, default=4096,
                   help="padded tokens per batch, raised to the longest pair (default 4096)")
    add_device_arg(p, default="cpu")
    p.set_defaults(func=run)
