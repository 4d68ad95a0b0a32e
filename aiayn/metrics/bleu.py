"""Corpus metrics of translations: sacreBLEU and chrF on detokenized text, and the paper's tokenized (compound-split)
BLEU.

Two BLEU numbers, and why they differ (docs/decoding.md):
    * `corpus_bleu` is sacreBLEU on detokenized output with its own 13a tokenization: comparable across
      papers, reported with its signature.
    * `tokenized_bleu` is the paper's number (Table 2, 27.3 for base EN-DE): both sides Moses-tokenized,
      German compounds split at hyphens ("rich-text" -> "rich ##AT##-##AT## text", tensor2tensor's
      get_ende_bleu.sh), then multi-bleu.perl's BLEU on those tokens. Splitting compounds adds easy
      matches ("##AT##-##AT##"), so it scores higher than sacreBLEU on the same output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from sacrebleu.metrics import BLEU, CHRF


@dataclass(frozen=True)
class CorpusMetric:
    """A corpus score, sacreBLEU's one-line summary of it, and the signature that makes it reproducible."""

    score: float
    line: str
    signature: str


def _check(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references; they must be line-aligned")


def _corpus_metric(metric, hyps: Sequence[str], refs: Sequence[str]) -> CorpusMetric:
    _check(hyps, refs)
    result = metric.corpus_score(list(hyps), [list(refs)])
    return CorpusMetric(result.score, str(result), str(metric.get_signature()))


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str]) -> CorpusMetric:
    """sacreBLEU with its defaults (13a tokenization, exp smoothing) on detokenized text."""
    return _corpus_metric(BLEU(), hyps, refs)


def chrf(hyps: Sequence[str], refs: Sequence[str]) -> CorpusMetric:
    """chrF2 (sacreBLEU's defaults) on detokenized text."""
    return _corpus_metric(CHRF(), hyps, refs)


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


def paper_tokens(lines: Sequence[str], lang: str, compound_split: bool | None = None) -> list[str]:
    """The paper's BLEU input: Moses-tokenized lines, compounds split (default: for German)."""
    if compound_split is None:
        compound_split = lang == "de"
    tokenized = [moses_tokenize(line, lang) for line in lines]
    return [split_compounds(line) for line in tokenized] if compound_split else tokenized


def paper_bleu_metric(**kwargs) -> BLEU:
    """multi-bleu.perl's BLEU as a sacreBLEU metric: whitespace tokens (from `paper_tokens`), no smoothing."""
    return BLEU(tokenize="none", smooth_method="none", force=True, **kwargs)


def tokenized_bleu(hyps: Sequence[str], refs: Sequence[str], lang: str,
                   compound_split: bool | None = None) -> CorpusMetric:
    """The paper's BLEU: Moses-tokenize both sides, split compounds (default: for German), then BLEU on
    whitespace tokens without smoothing (= multi-bleu.perl)."""
    _check(hyps, refs)
    return _corpus_metric(paper_bleu_metric(), paper_tokens(hyps, lang, compound_split),
                  paper_tokens(refs, lang, compound_split))
