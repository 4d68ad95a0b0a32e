"""Scores: translation (`bleu`: sacreBLEU, chrF, the paper's tokenized BLEU) and model (`perplexity`: per-token
perplexity, Table 3's PPL). Parsing F1 (EVALB's) lives in `evalb`."""

from aiayn.metrics.bleu import Score, chrf, corpus_bleu, tokenized_bleu
from aiayn.metrics.perplexity import Perplexity, perplexity

__all__ = ["Perplexity", "Score", "chrf", "corpus_bleu", "perplexity", "tokenized_bleu"]
