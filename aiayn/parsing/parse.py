"""Parsing sentences with a trained model (`aiayn parse`): words in (PTB tokenization, space-separated), bracketed
trees out, always well-formed with one leaf per word (TreeConstraint inside the beam search). Leaves carry the
placeholder tag XX: the model predicts structure, not POS tags. Both target formats (LEAVES) are read: a model
trained on "words" data copies each word's pieces as its leaf; its vocabulary holds WORDS_MARK. Search defaults are
section 6.3's: beam 21, alpha 0.3, maximum output length = input length + 300."""

from __future__ import annotations

from collections.abc import Sequence

from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.errors import CheckpointError, DataError
from aiayn.parsing.constraint import TreeConstraint
from aiayn.parsing.prepare import WORDS_MARK
from aiayn.parsing.trees import POS, delinearize

PAPER_PARSE_SEARCH = SearchConfig(beam=21, alpha=0.3, max_len_a=1.0, max_len_b=300)


def structure_ids(vocab) -> dict[int, str]:
    """The vocabulary's structure pieces: id -> "(X" / ")X" / "XX"."""
    out = {}
    for i in range(len(vocab)):
        p = vocab.piece(i)
        if p == POS or (len(p) > 1 and p[0] in "()" and not p.startswith("(▁")):
            out[i] = p
    return out


def starts_word(piece: str, first: bool) -> bool:
    """In the words format a word starts at the first piece of a run of word pieces (after a structure token, or
    at the start of a line) or at a piece that begins with "▁" (SentencePiece's word boundary)."""
    return first or piece.startswith("▁")


def output_tokens(ids: Sequence[int], structure: dict[int, str], piece, leaves: str) -> list[str]:
    """Output ids as structure tokens for delinearize: in the words format a word's pieces become one XX (where a
    word starts: starts_word)."""
    out, prev_structure = [], True
    for i in ids:
        if i in structure:
            out.append(structure[i])
            prev_structure = True
        elif leaves == "xx":
            out.append(piece(i))
        else:
            if starts_word(piece(i), prev_structure):
                out.append(POS)
            prev_structure = False
    return out


class Parser:
    """A Translator whose outputs are trees."""

    def __init__(self, translator: Translator):
        self.translator = translator
        self.structure = structure_ids(translator.vocab)
        if POS not in self.structure.values():
            raise CheckpointError("this model's vocabulary has no structure tokens: it is not a parser; train one on "
                                  "data from `aiayn prepare-parse`")
        vocab = translator.vocab
        self.leaves = "words" if any(vocab.piece(i) == WORDS_MARK for i in range(len(vocab))) else "xx"

    def word_pieces(self, sources: Sequence[list[int] | None], words: Sequence[Sequence[str]]
                    ) -> list[list[list[int]]]:
        """The pieces of each word of each line (the words format's leaves): a line's ids split where a piece starts
        a word (it begins with "▁", or it is the first)."""
        vocab, out = self.translator.vocab, []
        for n, (ids, w) in enumerate(zip(sources, words), 1):
            groups: list[list[int]] = []
            for i in (ids or [])[:-1]:  # without EOS
                if i in self.structure:
                    raise DataError(f"input line {n}: a word encodes to a structure token ({vocab.piece(i)!r}); "
                                    "give PTB-tokenized text (brackets as -LRB- -RRB-)")
                if starts_word(vocab.piece(i), not groups):
                    groups.append([])
                groups[-1].append(i)
            if len(groups) != len(w):
                raise DataError(f"input line {n}: its {len(w)} words gave {len(groups)} groups of pieces; is it "
                                "longer than --max-input-len?")
            out.append(groups)
        return out

    def tokens(self, ids: Sequence[int]) -> list[str]:
        return output_tokens(ids, self.structure, self.translator.vocab.piece, self.leaves)

    def parse_nbest(self, lines: Sequence[str], progress: bool = False, constrained: bool = True
                    ) -> list[list[tuple[str, float]]]:
        """Up to search.nbest (tree, score) per line, best first; an empty line gives an empty list.
        constrained=False searches without the tree constraint (to measure what it does): an output that is not a
        well-formed tree with one leaf per word is returned as its raw tokens, marked by a leading "!"."""
        words = [line.split() for line in lines]
        t = self.translator
        sources = t.encode([" ".join(w) for w in words])
        pieces = self.word_pieces(sources, words) if self.leaves == "words" and constrained else None
        constraint = TreeConstraint(self.structure, len(t.vocab), [len(w) for w in words],
                                    pieces=pieces) if constrained else None
        out = []
        for w, hyps in zip(words, t.search_ids(sources, progress, constraint)):
            trees = []
            for h in hyps:
                if w and h.tokens:
                    try:
                        trees.append((str(delinearize(self.tokens(h.tokens), w)), h.score))
                    except DataError:
                        if constrained:
                            raise
                        raw = [self.structure.get(i, t.vocab.piece(i)) for i in h.tokens]
                        trees.append(("! " + " ".join(raw), h.score))
            out.append(trees)
        return out

    def parse(self, lines: Sequence[str]) -> list[str]:
        return [hs[0][0] if hs else "" for hs in self.parse_nbest(lines)]
