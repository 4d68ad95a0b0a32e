"""Metrics: translation (`bleu`: sacreBLEU, chrF, the paper's tokenized BLEU; `significance`: systems compared by
sacreBLEU's paired tests) and model (`perplexity`: per-token perplexity, Table 3's PPL). Parsing F1 (EVALB's) lives
in `evalb`."""

from aiayn.metrics.bleu import CorpusMetric, chrf, corpus_bleu, tokenized_bleu
from aiayn.metrics.perplexity import Perplexity, perplexity
from aiayn.metrics.significance import Comparison, paired_significance

__all__ = ["Comparison", "CorpusMetric", "Perplexity", "chrf", "corpus_bleu", "paired_significance", "perplexity",
           "tokenized_bleu"]
