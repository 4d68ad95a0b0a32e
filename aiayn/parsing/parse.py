"""Parsing sentences with a trained model (`aiayn parse`): words in (PTB tokenization, space-separated), bracketed
trees out, always well-formed with one leaf per word (TreeConstraint inside the beam search). Leaves carry the
placeholder tag XX: the model predicts structure, not POS tags. Search defaults are section 6.3's: beam 21,
alpha 0.3, maximum output length = input length + 300."""

from __future__ import annotations

from collections.abc import Sequence

from aiayn.errors import CheckpointError, DataError
from aiayn.parsing.constraint import TreeConstraint
from aiayn.parsing.trees import POS, delinearize
from aiayn.search import SearchConfig
from aiayn.translate import Translator

PAPER_PARSE_SEARCH = SearchConfig(beam=21, alpha=0.3, max_len_a=1.0, max_len_b=300)


def structure_ids(vocab) -> dict[int, str]:
    """The vocabulary's structure pieces: id -> "(X" / ")X" / "XX"."""
    out = {}
    for i in range(len(vocab)):
        p = vocab.piece(i)
        if p == POS or (len(p) > 1 and p[0] in "()" and not p.startswith("(▁")):
            out[i] = p
    return out


class Parser:
    """A Translator whose outputs are trees."""

    def __init__(self, translator: Translator):
        self.translator = translator
        self.structure = structure_ids(translator.vocab)
        if POS not in self.structure.values():
            raise CheckpointError("this model's vocabulary has no structure tokens: it is not a parser; train one on "
                                  "data from `aiayn prepare-parse`")

    def parse_nbest(self, lines: Sequence[str], progress: bool = False, constrained: bool = True
                    ) -> list[list[tuple[str, float]]]:
        """Up to search.nbest (tree, score) per line, best first; an empty line gives an empty list.
        constrained=False searches without the tree constraint (to measure what it does): an output that is not a
        well-formed tree with one leaf per word is returned as its raw tokens, marked by a leading "!"."""
        words = [line.split() for line in lines]
        t = self.translator
        constraint = TreeConstraint(self.structure, len(t.vocab), [len(w) for w in words]) if constrained else None
        sources = t.encode([" ".join(w) for w in words])
        out = []
        for w, hyps in zip(words, t.search_ids(sources, progress, constraint)):
            trees = []
            for h in hyps:
                if w and h.tokens:
                    tokens = [self.structure.get(i, t.vocab.piece(i)) for i in h.tokens]
                    try:
                        trees.append((str(delinearize(tokens, w)), h.score))
                    except DataError:
                        if constrained:
                            raise
                        trees.append(("! " + " ".join(tokens), h.score))
            out.append(trees)
        return out

    def parse(self, lines: Sequence[str]) -> list[str]:
        return [hs[0][0] if hs else "" for hs in self.parse_nbest(lines)]
