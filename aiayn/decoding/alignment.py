"""Word alignments from encoder-decoder attention, the maths: subword attention to word links, printed as fast_align
and fairseq print them: `i-j` pairs, source word i aligned to target word j, both counted from 0, words = the
whitespace-separated words of each sentence.

The recipe (fairseq's `--print-alignment`, at the word level), given the encoder-decoder attention of ONE decoder
layer with the heads averaged, A (T, S), row t = the decoder position that predicts target piece t:
    1. the source EOS column and the row that predicts the target EOS are dropped (EOS is not a word; models
       park attention on it, which would otherwise win the argmax for many words);
    2. subwords merged to words (`word_ids`: a piece starting with "▁" starts a word): a target word's row is the
       mean of its pieces' rows, the weight of a source word the SUM over its pieces (the attention mass on a
       word is the mass on its pieces: a sum, so a word's weight does not shrink because it was split);
    3. each target word is aligned to the source word of largest weight (one link per target word, as fairseq's
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
from torch import Tensor

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
