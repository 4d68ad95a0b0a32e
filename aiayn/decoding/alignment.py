"""Word alignments from encoder-decoder attention, the maths: subword attention to word links, printed as fast_align
and fairseq print them: `i-j` pairs, source word i aligned to target word j, both counted from 0, words = the
whitespace-separated words of each sentence. Plain Python (no torch): aiayn's engine and
CTranslate2's (`return_attention`) both give their attention to `word_links`.

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

WORD_START = "\u2581"  # SentencePiece's word-boundary mark, "▁"


def word_ids(pieces: Sequence[str]) -> list[int]:
    """The word (from 0) each subword piece belongs to: a piece starting with "▁" starts a new word."""
    out, word = [], -1
    for n, piece in enumerate(pieces):
        if n == 0 or piece.startswith(WORD_START):
            word += 1
        out.append(word)
    return out


def word_alignment(attn, src_words: Sequence[int], tgt_words: Sequence[int]) -> list[tuple[int, int]]:
    """Hard word alignment from subword attention: attn (T, S), nested lists or a tensor, rows = target pieces,
    columns = source pieces (EOS already dropped), src_words / tgt_words = word_ids of the pieces. Returns
    (source word, target word) pairs, one per target word, in target order. In double precision, each sum in piece
    order (the same numbers whichever engine gave the attention)."""
    rows = attn.tolist() if hasattr(attn, "tolist") else [list(row) for row in attn]
    t, s = len(rows), len(rows[0]) if rows else len(src_words)
    if (t, s) != (len(tgt_words), len(src_words)):
        raise ValueError(f"attention {(t, s)} does not match {len(tgt_words)} target and {len(src_words)} source "
                         "pieces")
    if t == 0 or s == 0:
        return []
    n_src, n_tgt = max(src_words) + 1, max(tgt_words) + 1
    by_both = [[0.0] * n_src for _ in range(n_tgt)]  # (target words, source words)
    for row, j in zip(rows, tgt_words):
        by_src = [0.0] * n_src
        for weight, i in zip(row, src_words):  # source pieces -> words: the sum of a word's columns
            by_src[i] += float(weight)
        by_both[j] = [a + b for a, b in zip(by_both[j], by_src)]
    pieces = [tgt_words.count(j) for j in range(n_tgt)]  # target pieces -> words: the mean of a word's rows
    means = [[w / n for w in row] for row, n in zip(by_both, pieces)]
    return [(max(range(n_src), key=row.__getitem__), j) for j, row in enumerate(means)]


def word_links(attn, src_pieces: Sequence[str], tgt_pieces: Sequence[str]) -> list[tuple[int, int]]:
    """The links of one translation: attn (T, S) the heads' mean of one decoder layer, row t the decoder position
    that predicts target piece t, over the source pieces; EOS's row and column, where given, are dropped."""
    rows = attn.tolist() if hasattr(attn, "tolist") else attn
    rows = [row[: len(src_pieces)] for row in rows[: len(tgt_pieces)]]
    return word_alignment(rows, word_ids(src_pieces), word_ids(tgt_pieces))


def alignment_layer(n_layers: int) -> int:
    """The decoder layer whose cross-attention aligns, unless one is chosen: the top one (see the module docstring)."""
    return n_layers - 1


def format_alignment(pairs: Sequence[tuple[int, int]]) -> str:
    """'0-0 1-2 2-1': the fast_align / fairseq text form."""
    return " ".join(f"{i}-{j}" for i, j in pairs)
