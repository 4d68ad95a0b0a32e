"""Word alignments of a model's translations: one teacher-forced forward over (source, translation) records the
encoder-decoder attention of one layer (aiayn.viz.attention.record), heads averaged, and aiayn.decoding.alignment
turns it into word links (the recipe, the layer chosen and why: that module's docstring).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from aiayn.config import BOS_ID, EOS_ID
from aiayn.decoding.alignment import alignment_layer, word_alignment, word_ids
from aiayn.decoding.lines import Translation
from aiayn.decoding.translator import padded, translation_of
from aiayn.errors import UsageError
from aiayn.viz.attention import record


def align(model: nn.Module, vocab, sources: Sequence[list[int] | None], targets: Sequence[list[int]],
          layer: int | None = None, batch_size: int = 32) -> list[list[tuple[int, int]]]:
    """Word alignments of many sentence pairs. sources: ids with EOS (as Translator.encode gives them; None, a
    blank line, gets no pairs); targets: ids without BOS/EOS (as Hypothesis.tokens). layer: encoder-decoder
    attention layer, from 0 (default: the top one, see the module docstring)."""
    n_layers = model.cfg.n_dec_layers
    layer = alignment_layer(n_layers) if layer is None else layer
    if not 0 <= layer < n_layers:
        raise UsageError(f"--alignment-layer {layer}: the decoder's layers are numbered 0..{n_layers - 1}")
    device = next(model.parameters()).device
    out: list[list[tuple[int, int]]] = [[] for _ in sources]
    todo = sorted((n for n, s in enumerate(sources) if s is not None and targets[n]), key=lambda n: len(sources[n]))
    for start in range(0, len(todo), batch_size):
        rows = todo[start: start + batch_size]
        srcs, tgts = [sources[n] for n in rows], [targets[n] for n in rows]
        src = padded([list(s) for s in srcs], device)
        tgt_in = padded([[BOS_ID, *t] for t in tgts], device)
        _, weights = record(model, src, tgt_in)
        cross = weights["cross"][layer].mean(dim=1).cpu()  # (B, T, S): heads averaged
        for b, (n, s, t) in enumerate(zip(rows, srcs, tgts)):
            src_pieces = [vocab.piece(i) for i in s if i != EOS_ID]  # Translator.encode puts EOS last only
            tgt_pieces = [vocab.piece(i) for i in t]
            attn = cross[b, : len(t), : len(src_pieces)]  # rows predicting the words; no EOS row or column
            out[n] = word_alignment(attn, word_ids(src_pieces), word_ids(tgt_pieces))
    return out


def translate_with_alignment(translator, lines: Sequence[str], layer: int | None = None, progress: bool = False
                             ) -> tuple[list[list[Translation]], list[list[list[tuple[int, int]]]]]:
    """Translator.translate_nbest plus the word alignment of every hypothesis: (nbests, alignments), where
    alignments[line][k] are the (source word, target word) pairs of nbests[line][k]."""
    sources = translator.encode(lines)
    hyps = translator.search_ids(sources, progress)
    nbests = [[translation_of(translator.vocab, h) for h in hs] for hs in hyps]
    rows = [(n, k) for n, hs in enumerate(hyps) for k in range(len(hs))]  # every hypothesis, one list
    pairs = align(translator.model, translator.vocab, [sources[n] for n, _ in rows],
                  [hyps[n][k].tokens for n, k in rows], layer)
    alignments: list[list[list[tuple[int, int]]]] = [[[] for _ in hs] for hs in hyps]
    for (n, k), p in zip(rows, pairs):
        alignments[n][k] = p
    return nbests, alignments
