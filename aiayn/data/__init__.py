"""Everything between raw parallel text and the batches the trainer consumes.

    raw text --prepare--> prepared-data directory (shared vocabulary + token-id cache) --load_split-->
    PreparedSplit --TokenBatchSampler--> lists of example indices --collate--> Batch of padded tensors.

Modules: `vocab` (the shared SentencePiece BPE vocabulary), `prepare` (cleaning, vocabulary, id cache),
`batching` (loading a prepared split, token-based batches), `corpora` (the shipped Bible, WMT14).
"""

from aiayn.data.batching import Batch, PreparedSplit, TokenBatchSampler, collate, has_split, load_split
from aiayn.data.corpora import builtin_corpus, load_wmt14
from aiayn.data.prepare import META_FILE, prepare
from aiayn.data.vocab import Vocab

__all__ = [
    "META_FILE", "Batch", "PreparedSplit", "TokenBatchSampler", "Vocab", "builtin_corpus", "collate", "has_split",
    "load_split", "load_wmt14", "prepare",
]
