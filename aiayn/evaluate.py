"""Scoring: sacreBLEU and chrF on detokenized text, the paper's tokenized (compound-split) BLEU, perplexity.

Two BLEU numbers, and why they differ (docs/decoding.md):
    * `corpus_bleu` is sacreBLEU on detokenized output with its own 13a tokenization: comparable across
      papers, reported with its signature.
    * `tokenized_bleu` is the paper's number (Table 2, 27.3 for base EN-DE): both sides Moses-tokenized,
      German compounds split at hyphens ("rich-text" -> "rich ##AT##-##AT## text", tensor2tensor's
      get_ende_bleu.sh), then multi-bleu.perl's BLEU on those tokens. Splitting compounds adds easy
      matches ("##AT##-##AT##"), so it scores higher than sacreBLEU on the same output.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import torch
from sacrebleu.metrics import BLEU, CHRF

from aiayn.config import PAD_ID


@dataclass(frozen=True)
class Score:
    """A corpus score, sacreBLEU's one-line summary of it, and the signature that makes it reproducible."""

    score: float
    line: str
    signature: str


def _check(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references; they must be line-aligned")


def _score(metric, hyps: Sequence[str], refs: Sequence[str]) -> Score:
    _check(hyps, refs)
    result = metric.corpus_score(list(hyps), [list(refs)])
    return Score(result.score, str(result), str(metric.get_signature()))


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    """sacreBLEU with its defaults (13a tokenization, exp smoothing) on detokenized text."""
    return _score(BLEU(), hyps, refs)


def chrf(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    """chrF2 (sacreBLEU's defaults) on detokenized text."""
    return _score(CHRF(), hyps, refs)


@lru_cache(maxsize=8)
def _moses(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def moses_tokenize(line: str, lang: str) -> str:
    """tokenizer.perl -l LANG (no aggressive hyphen splitting), without XML escaping (it cannot change BLEU:
    escaping maps tokens one to one)."""
    return _moses(lang).tokenize(line, escape=False, return_str=True)


_COMPOUND = re.compile(r"(\S)-(\S)")


def split_compounds(line: str) -> str:
    """perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g' (tensor2tensor's get_ende_bleu.sh). Like perl,
    matches do not overlap: "a-b-c" -> "a ##AT##-##AT## b-c"."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def tokenized_bleu(hyps: Sequence[str], refs: Sequence[str], lang: str,
                   compound_split: bool | None = None) -> Score:
    """The paper's BLEU: Moses-tokenize both sides, split compounds (default: for German), then BLEU on
    whitespace tokens without smoothing (= multi-bleu.perl)."""
    _check(hyps, refs)
    if compound_split is None:
        compound_split = lang == "de"

    def prep(line: str) -> str:
        tok = moses_tokenize(line, lang)
        return split_compounds(tok) if compound_split else tok

    return _score(BLEU(tokenize="none", smooth_method="none", force=True), [prep(h) for h in hyps],
                  [prep(r) for r in refs])


# ---------------------------------------------------------------------------------------------------------
# Perplexity.


class Perplexity(NamedTuple):
    ppl: float  # exp(nll / tokens)
    nll: float  # summed negative log-likelihood, nats
    tokens: int  # target tokens scored, EOS included


@torch.inference_mode()
def perplexity(model, pairs: Sequence, max_tokens: int = 4096,
               device: str | torch.device = "cpu") -> Perplexity:
    """Per-token perplexity of `model` on (src_ids, tgt_ids) pairs (ids without specials, e.g. a
    PreparedSplit): exp(summed NLL / target tokens), every target token and its EOS counted, as Table 3."""
    from aiayn.data import TokenBatchSampler, collate
    from aiayn.train import batch_loss

    src_len = [len(s) + 1 for s, _ in pairs] if not hasattr(pairs, "src_lengths") else pairs.src_lengths
    tgt_len = [len(t) + 1 for _, t in pairs] if not hasattr(pairs, "tgt_lengths") else pairs.tgt_lengths
    longest = max(max(src_len, default=1), max(tgt_len, default=1))
    sampler = TokenBatchSampler(src_len, tgt_len, max(max_tokens, longest), shuffle=False)
    nll, n = 0.0, 0
    for idx in sampler:
        batch = collate([pairs[i] for i in idx]).to(device)
        _, batch_nll, batch_n = batch_loss(model, batch.src, batch.tgt_in, batch.tgt_out, 0.0, PAD_ID)
        nll, n = nll + batch_nll.item(), n + batch_n
    if n == 0:
        raise ValueError("no target tokens to score")
    return Perplexity(math.exp(nll / n), nll, n)


# ---------------------------------------------------------------------------------------------------------
# CLI: aiayn evaluate


def _read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]


def _guess_lang(ref: str) -> str:
    """Language from the reference's suffix (newstest2014.de -> de), else English."""
    suffix = Path(ref).suffix.lstrip(".")
    return suffix if len(suffix) == 2 and suffix.isalpha() else "en"


def _evaluate_command(args: argparse.Namespace) -> int:
    if not (args.hyp or args.checkpoint):
        print("error: give --hyp FILE --ref FILE (BLEU, chrF) and/or --checkpoint C --data DIR (perplexity)",
              file=sys.stderr)
        return 2
    if args.hyp:
        if not args.ref:
            print("error: --hyp needs --ref", file=sys.stderr)
            return 2
        hyps, refs = _read_lines(args.hyp), _read_lines(args.ref)
        if len(hyps) != len(refs):
            print(f"error: {args.hyp} has {len(hyps)} lines but {args.ref} has {len(refs)}", file=sys.stderr)
            return 1
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
            print("error: --checkpoint needs --data DIR (a prepared-data directory)", file=sys.stderr)
            return 2
        from aiayn.checkpoint import load_for_inference
        from aiayn.data import load_split

        model, _, _ = load_for_inference(args.checkpoint, device=args.device)
        res = perplexity(model, load_split(args.data, args.split), args.max_tokens, args.device)
        print(f"perplexity      {res.ppl:6.3f}  per token on {args.data} {args.split} "
              f"({res.tokens:,} target tokens incl. EOS, mean NLL {res.nll / res.tokens:.4f} nats)")
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("evaluate", help="BLEU (sacreBLEU and the paper's tokenized kind), chrF, perplexity",
                       description="Score translations against references (sacreBLEU with signature, chrF, "
                                   "tokenized BLEU as in the paper) and/or a checkpoint's per-token "
                                   "perplexity.")
    p.add_argument("--hyp", help="detokenized system output, one sentence per line")
    p.add_argument("--ref", help="detokenized reference, line-aligned with --hyp")
    p.add_argument("--lang", help="target language for Moses tokenization (default: the --ref suffix, else "
                                  "en); de also splits compounds as the paper")
    p.add_argument("--no-compound-split", action="store_true", help="no ##AT## compound splitting for German")
    p.add_argument("--checkpoint", help="run directory or checkpoint file, for --data perplexity")
    p.add_argument("--data", help="prepared-data directory (aiayn prepare)")
    p.add_argument("--split", default="test", help="split of --data to score (default test)")
    p.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per batch (default 4096)")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_evaluate_command)
