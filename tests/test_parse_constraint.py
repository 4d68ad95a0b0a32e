"""The well-formed-tree constraint inside the real beam search: a scripted model whose best output is not a tree
gives a tree with one leaf per word under the constraint, and only well-formed trees come out for any input."""

import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding.search import SearchConfig, beam_search, greedy_search
from aiayn.parsing.constraint import TreeConstraint
from aiayn.parsing.trees import delinearize

S, CS, NP, CNP, XX = 4, 5, 6, 7, 8
STRUCTURE = {S: "(S", CS: ")S", NP: "(NP", CNP: ")NP", XX: "XX"}
V = 10


class _Cache:
    def __init__(self):
        self.last = None

    def reorder(self, rows, sentences=None):
        self.last = self.last.index_select(0, rows)


class BigramModel:
    """Next-token probabilities from the last token only (a hand-written table)."""

    TABLE = {BOS_ID: {XX: 0.6, S: 0.4}, XX: {EOS_ID: 0.7, XX: 0.2, CS: 0.1}, S: {XX: 0.5, NP: 0.3, CS: 0.2},
             NP: {XX: 0.9, CNP: 0.1}, CS: {EOS_ID: 0.9, XX: 0.1}, CNP: {CS: 0.8, XX: 0.2}}

    def encode(self, src):
        return src.float()[..., None]

    def new_cache(self):
        return _Cache()

    def decode(self, tgt_step, memory, src_pad, cache):
        cache.last = tgt_step[:, -1]
        out = torch.full((tgt_step.size(0), 1, V), 1e-9)
        for i, t in enumerate(cache.last.tolist()):
            for k, p in self.TABLE.get(t, {EOS_ID: 1.0}).items():
                out[i, 0, k] = p
        return out.log()


def words_of(tokens):
    return sum(t == "XX" for t in tokens)


def test_unconstrained_best_is_ill_formed_constrained_is_a_tree():
    src = torch.tensor([[9, EOS_ID]])
    search = SearchConfig(beam=1, max_len_a=0.0, max_len_b=20)
    (free,), = greedy_search(BigramModel(), src, search)
    assert free.tokens == [XX]  # "XX" and stop: no tree at all
    constraint = TreeConstraint(STRUCTURE, V, words=[1])
    (tree,), = greedy_search(BigramModel(), src, search, constraint=constraint)
    assert [STRUCTURE[t] for t in tree.tokens] == ["(S", "XX", ")S"]
    (best,), = beam_search(BigramModel(), src, SearchConfig(beam=4, max_len_a=0.0, max_len_b=20),
                           constraint=TreeConstraint(STRUCTURE, V, words=[1]))
    assert str(delinearize([STRUCTURE[t] for t in best.tokens], ["w"])) in ("(S (XX w))", "(S (NP (XX w)))")


def test_every_output_is_a_tree_with_one_leaf_per_word():
    lengths = [1, 2, 3, 5]
    src = torch.full((len(lengths), 2), PAD_ID)
    src[:, 0], src[:, 1] = 9, EOS_ID
    constraint = TreeConstraint(STRUCTURE, V, words=lengths)
    hyps = beam_search(BigramModel(), src, SearchConfig(beam=3, nbest=3, max_len_a=0.0, max_len_b=40),
                       constraint=constraint)
    for n, hs in zip(lengths, hyps):
        assert hs
        for h in hs:
            tokens = [STRUCTURE[t] for t in h.tokens]
            assert words_of(tokens) == n
            delinearize(tokens, [f"w{i}" for i in range(n)])  # raises unless well-formed


class RandomModel(BigramModel):
    """Next-token log-probabilities from the last token only, a fixed random table over the whole vocabulary."""

    def __init__(self, vocab_size, seed=0):
        g = torch.Generator().manual_seed(seed)
        table = torch.randn(vocab_size, vocab_size, generator=g).mul(3)
        table[:, [S, NP]] -= 3  # fewer opening brackets than chance: the outputs end within the length limit
        self.table = table.log_softmax(-1)

    def decode(self, tgt_step, memory, src_pad, cache):
        cache.last = tgt_step[:, -1]
        return self.table[cache.last][:, None, :]


def test_words_format_copies_each_words_pieces_as_its_leaf():
    """The words format: a leaf is the next word's pieces, in order and whole, and nothing else ever comes out."""
    vocab_size = 16  # ids 10..15 are word pieces
    pieces = [[[10, 11], [12]], [[13]], [[14, 15, 10], [11], [12, 13]]]
    src = torch.full((3, 2), PAD_ID)
    src[:, 0], src[:, 1] = 9, EOS_ID
    model = RandomModel(vocab_size)
    free = beam_search(model, src, SearchConfig(beam=3, max_len_a=0.0, max_len_b=40))
    constraint = TreeConstraint(STRUCTURE, vocab_size, words=[len(p) for p in pieces], pieces=pieces)
    hyps = beam_search(model, src, SearchConfig(beam=3, nbest=3, max_len_a=0.0, max_len_b=60), constraint=constraint)
    assert any([t for t in hs[0].tokens if t >= 10] != sum(p, []) for hs, p in zip(free, pieces))  # free: not copies
    for p, hs in zip(pieces, hyps):
        assert hs
        for h in hs:
            assert XX not in h.tokens
            assert [t for t in h.tokens if t >= 10] == sum(p, [])  # every word, whole and in order
            tokens, starts = [], {sum(len(w) for w in p[:k]) for k in range(len(p))}
            n = 0
            for t in h.tokens:  # a word's pieces -> one XX: then it must be a tree with one leaf per word
                if t >= 10:
                    if n in starts:
                        tokens.append("XX")
                    n += 1
                else:
                    tokens.append(STRUCTURE[t])
            delinearize(tokens, [f"w{i}" for i in range(len(p))])


def test_words_format_refuses_a_piece_list_per_line_that_disagrees_with_the_word_counts():
    import pytest

    with pytest.raises(ValueError):
        TreeConstraint(STRUCTURE, 16, words=[2], pieces=[[[10]]])


class OpenLover(BigramModel):
    """Prefers "(NP" after anything: unconstrained it would nest forever."""

    TABLE = {t: {NP: 0.9, XX: 0.05, CNP: 0.03, CS: 0.02} for t in (BOS_ID, S, CS, NP, CNP, XX)}


def test_no_more_than_max_opens_brackets_in_a_row():
    src = torch.full((1, 2), PAD_ID)
    src[:, 0], src[:, 1] = 9, EOS_ID
    for max_opens in (2, 3):
        (hs,) = beam_search(OpenLover(), src, SearchConfig(beam=3, nbest=3, max_len_a=0.0, max_len_b=60),
                            constraint=TreeConstraint(STRUCTURE, V, words=[3], max_opens=max_opens))
        for h in hs:
            tokens = [STRUCTURE[t] for t in h.tokens]
            runs, run = [], 0
            for t in tokens:
                run = run + 1 if t.startswith("(") else 0
                runs.append(run)
            assert max(runs) == max_opens  # the model takes every open it may, and no more
            delinearize(tokens, ["a", "b", "c"])
