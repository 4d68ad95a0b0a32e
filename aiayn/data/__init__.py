"""Everything between raw parallel text and the batches the trainer consumes.

    raw text --prepare--> prepared-data directory (shared vocabulary + token-id cache) --load_split-->
    PreparedSplit --TokenBatchSampler--> lists of example indices --collate--> Batch of padded tensors (--pack-->
PackedBatch: the same sentences without padding).

Modules: `vocab` (the shared SentencePiece BPE vocabulary), `prepare` (cleaning, vocabulary, id cache),
`folder` (the prepared-data directory's format: written, opened and checked), `batching` (token-based batches),
`corpora` (the shipped Bible, WMT14).
"""

from __future__ import annotations

import importlib

from aiayn.data.corpora import builtin_corpus, load_wmt14
from aiayn.data.folder import META_FILE, PreparedSplit, has_split, load_split, open_prepared
from aiayn.data.prepare import prepare
from aiayn.data.vocab import Vocab

# batching imports torch: its names are imported when first asked for, so that `from aiayn.data import Vocab` does
# not (a torch-free command, translate --engine ct2, starts fast)
_BATCHING = ("Batch", "PackedBatch", "TokenBatchSampler", "collate", "pack")
__all__ = [
    "META_FILE", "Batch", "PackedBatch", "PreparedSplit", "TokenBatchSampler", "Vocab", "builtin_corpus", "collate",
    "has_split", "load_split", "load_wmt14", "open_prepared", "pack", "prepare",
]


def __getattr__(name: str):
    if name == "batching":
        return importlib.import_module("aiayn.data.batching")
    if name not in _BATCHING:
        raise AttributeError(f"module 'aiayn.data' has no attribute {name!r}")
    value = getattr(importlib.import_module("aiayn.data.batching"), name)
    globals()[name] = value
    return value
