"""Word alignments from encoder-decoder attention, printed as fast_align and fairseq print them: `i-j` pairs, source
word i aligned to target word j, both counted from 0, words = the whitespace-separated words of each sentence.

How (the attention-as-alignment recipe of fairseq's `--print-alignment`, at the word level):
    1. one teacher-forced forward over (source, translation) records the encoder-decoder attention of ONE layer
       (aiayn.viz.attention.record); the heads are averaged: A (T, S), row t = the decoder position that
       predicts target piece t, a distribution over the source pieces;
    2. the source EOS column and the row that predicts the target EOS are dropped (EOS is not a word; models
       park attention on it, which would otherwise win the argmax for many words);
    3. subwords merged to words (`word_ids`: a piece starting with "▁" starts a word): a target word's row is the
       mean of its pieces' rows, the weight of a source word the SUM over its pieces (the attention mass on a
       word is the mass on its pieces: a sum, so a word's weight does not shrink because it was split);
    4. each target word is aligned to the source word of largest weight (one link per target word, as fairseq's
       hard alignment).

Which layer, and why: by default the TOP decoder layer (`alignment_layer`), because it aligned best on our trained
Multi30k model (3 layers): against the high-precision links of IBM Model 1 (both directions, intersected) and on
target words whose identical twin is in the source, the top layer beat the one below it, and the first layer was
far behind (numbers and method: docs/attention.md). fairseq's `--print-alignment` defaults to the top layer too.
Garg et al. (2019), "Jointly Learning to Align and Translate with Transformer Models", found the penultimate layer
best in a 6-layer decoder: for deep models try `--alignment-layer N-2` (layers numbered from 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from aiayn.config import BOS_ID, EOS_ID
from aiayn.errors import UsageError
from aiayn.lines import Translation
from aiayn.translate import padded, translation_of
from aiayn.viz.attention import record

WORD_START = "\u2581"  # SentencePiece's word-boundary mark, "▁"


def word_ids(pieces: Sequence[str]) -> list[int]:
    """The word (from 0) each subword piece belongs to: a piece starting with "▁" starts a new word."""
    out, word = [], -1
    for n, piece in enumerate(pieces):
        if n == 0 or piece.startswith(WORD_START):
            word += 1
        out.append(word)
    return out


def word_alignment(attn: Tensor, src_words: Sequence[int], tgt_words: Sequence[int]) -> list[tuple[int, int]]:
    """Hard word alignment from subword attention: attn (T, S) rows = target pieces, columns = source pieces (EOS
    already dropped), src_words / tgt_words = word_ids of the pieces. Returns (source word, target word) pairs,
    one per target word, in target order."""
    t, s = attn.shape
    if (t, s) != (len(tgt_words), len(src_words)):
        raise ValueError(f"attention {tuple(attn.shape)} does not match {len(tgt_words)} target and "
                         f"{len(src_words)} source pieces")
    if t == 0 or s == 0:
        return []
    attn = attn.double()
    src_index = torch.tensor(src_words)
    tgt_index = torch.tensor(tgt_words)
    n_src, n_tgt = int(src_index.max()) + 1, int(tgt_index.max()) + 1
    # source pieces -> words: sum of the columns of a word
    by_src = torch.zeros(t, n_src, dtype=attn.dtype).index_add_(1, src_index, attn)  # (T, source words)
    # target pieces -> words: mean of the rows of a word
    by_both = torch.zeros(n_tgt, n_src, dtype=attn.dtype).index_add_(0, tgt_index, by_src)  # (target, source words)
    by_both /= torch.bincount(tgt_index, minlength=n_tgt).unsqueeze(1)
    return [(int(i), j) for j, i in enumerate(by_both.argmax(dim=1).tolist())]


def alignment_layer(n_layers: int) -> int:
    """The decoder layer whose cross-attention aligns, unless one is chosen: the top one (see the module docstring)."""
    return n_layers - 1


def format_alignment(pairs: Sequence[tuple[int, int]]) -> str:
    """'0-0 1-2 2-1': the fast_align / fairseq text form."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


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
