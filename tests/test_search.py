"""Greedy and beam search: a scripted model whose answers are worked out by hand, then the real model."""

import math
import re

import pytest
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from aiayn.decoding.search import SearchConfig, length_penalty, sample_search
from aiayn.decoding.search import beam_search as _beam_search
from aiayn.decoding.search import greedy_search as _greedy_search
from aiayn.model import Transformer


def beam_search(model, src, **kw):
    return _beam_search(model, src, SearchConfig(**kw))


def greedy_search(model, src, prefixes=None, lines=None, **kw):
    return _greedy_search(model, src, SearchConfig(beam=1, **kw), prefixes=prefixes, lines=lines)

E = EOS_ID
A, B, C = 4, 5, 6  # words
V = 8


class ScriptedCache:
    """The prefix of every row; `reorder` follows the same contract as the model's DecoderCache."""

    def __init__(self):
        self.prefix = None  # (N, t) tokens fed so far, BOS first

    @property
    def length(self) -> int:
        return 0 if self.prefix is None else self.prefix.size(1)

    def reorder(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        self.prefix = self.prefix.index_select(0, rows)


class ScriptedModel:
    """encode/decode/new_cache like Transformer; decode returns log-probabilities from hand-written tables:
    tables[first source token][words so far] = {token: probability} (tokens left out have probability 0;
    a prefix left out of its table gives `default`)."""

    def __init__(self, tables, default=None):
        self.tables = tables
        self.default = default or {E: 1.0}
        self.calls = 0

    def encode(self, src):
        return src[:, :1].float()[..., None]  # (B, 1, 1): which table each sentence uses

    def new_cache(self):
        return ScriptedCache()

    def decode(self, tgt_step, memory, src_pad, cache):
        # memory and src_pad are per sentence, the decoder rows are g per sentence, sentence-major
        group = tgt_step.size(0) // memory.size(0)
        assert tgt_step.shape == (memory.size(0) * group, 1) and src_pad.size(0) == memory.size(0)
        cache.prefix = tgt_step if cache.prefix is None else torch.cat([cache.prefix, tgt_step], 1)
        self.calls += 1
        out = torch.zeros(tgt_step.size(0), 1, V)
        tables = memory[:, 0, 0].long().repeat_interleave(group).tolist()
        for i, (table, prefix) in enumerate(zip(tables, cache.prefix.tolist())):
            assert prefix[0] == BOS_ID
            probs = self.tables[table].get(tuple(prefix[1:]), self.default)
            out[i, 0] = torch.tensor([probs.get(v, 0.0) for v in range(V)]).log()
        return out


# Table 1. Greedy takes a (0.5) then EOS (0.4 > 0.35): "a", p = 0.2. Beam 2 also keeps b and finds
# "b", p = 0.4 * 0.6 = 0.24. Longer "a b" (p = 0.5 * 0.35 * 1 = 0.175) wins only under a strong length
# penalty. "b a" ends with p = 0.16 * 0.6 = 0.096 or goes on with c (0.064).
T1 = {
    (): {A: 0.5, B: 0.4, E: 0.1},
    (A,): {E: 0.4, B: 0.35, C: 0.25},
    (B,): {E: 0.6, A: 0.4},
    (A, B): {E: 1.0},
    (B, A): {E: 0.6, C: 0.4},
}
# Table 2: EOS is most likely at once, the empty output wins unless min_len bans it.
T2 = {
    (): {E: 0.5, A: 0.3, B: 0.2},
    (A,): {E: 0.9, C: 0.1},
    (B,): {E: 0.5, C: 0.5},
}
# Table 3: EOS never (so the length limit decides).
T3 = {(): {A: 0.6, B: 0.4}}
TABLES = {1: T1, 2: T2, 3: T3}
ln = math.log


def src_of(*tables, length=2):
    """One source sentence per table id: [table, EOS] padded to `length` (so x = 2 tokens)."""
    s = torch.full((len(tables), length), PAD_ID)
    s[:, 0] = torch.tensor(tables)
    s[:, 1] = E
    return s


def run(tables, **kw):
    model = ScriptedModel(TABLES, default={A: 0.6, B: 0.4 - 1e-6, E: 1e-6} if 3 in tables else None)
    return beam_search(model, src_of(*tables), **{"max_len_a": 0.0, "max_len_b": 3, "min_len": 0, **kw})


def test_length_penalty():
    assert length_penalty(1.0, 0.6) == pytest.approx(1.0)
    assert length_penalty(7.0, 1.0) == pytest.approx(2.0)
    assert length_penalty(4.0, 0.5, kind="power") == pytest.approx(2.0)
    assert length_penalty(torch.tensor([1.0, 7.0]), 2.0).tolist() == pytest.approx([1.0, 4.0])
    with pytest.raises(ValueError):
        length_penalty(3.0, 0.6, kind="nope")


def test_greedy_by_hand():
    (hyp,), = greedy_search(ScriptedModel(TABLES), src_of(1), max_len_a=0.0, max_len_b=3, alpha=0.0)
    assert hyp.tokens == [A] and hyp.score == pytest.approx(ln(0.5 * 0.4))
    assert hyp.positional_scores == pytest.approx([ln(0.5), ln(0.4)])


def test_beam_without_length_penalty_by_hand():
    # Step 0: candidates a -0.69, b -0.92, EOS -2.30 (not in the top 2, dropped): a and b live.
    # Step 1: b+EOS -1.43, a+EOS -1.61, a b -1.74, b a -1.83: "b" and "a" finish, "a b", "b a" live.
    # The 2nd best finished (-1.61) beats the best live (-1.74): stop.
    (h1, h2), = run([1], beam=2, nbest=2, alpha=0.0)
    assert (h1.tokens, h2.tokens) == ([B], [A])
    assert h1.score == pytest.approx(ln(0.4 * 0.6)) and h2.score == pytest.approx(ln(0.5 * 0.4))
    assert h1.positional_scores == pytest.approx([ln(0.4), ln(0.6)])


def test_beam_with_length_penalty_by_hand():
    # gnmt alpha 2: lp(2) = (7/6)^2, lp(3) = (8/6)^2, limit 3 words so lp_max = lp(4) = 2.25.
    # Step 1: "b" = ln .24 / lp(2) = -1.048 is best finished, but live "a b" may still reach
    # ln .175 / 2.25 = -0.775: go on. Step 2: "a b" = ln .175 / lp(3) = -0.980 wins; best live "b a c"
    # can reach at most ln .064 / 2.25 = -1.22 < -1.048 (2nd finished): stop.
    (h1, h2), = run([1], beam=2, nbest=2, alpha=2.0)
    assert (h1.tokens, h2.tokens) == ([A, B], [B])
    assert h1.score == pytest.approx(ln(0.5 * 0.35) / (8 / 6) ** 2)
    assert h2.score == pytest.approx(ln(0.24) / (7 / 6) ** 2)
    # gnmt alpha 1 is too weak to change the winner: "b" -1.223 vs "a b" -1.307.
    (h,), = run([1], beam=2, alpha=1.0)
    assert h.tokens == [B] and h.score == pytest.approx(ln(0.24) / (7 / 6))
    # |Y|^1: "a b" = ln .175 / 3 = -0.581 beats "b" = ln .24 / 2 = -0.714.
    (h,), = run([1], beam=2, alpha=1.0, lp="power")
    assert h.tokens == [A, B] and h.score == pytest.approx(ln(0.175) / 3)


def test_beam_patience_by_hand():
    # The case above, stopped by count (fairseq's and CTranslate2's rule): at step 1 "b" and "a" finish (the top 2
    # candidates end in EOS), so beam 2 x patience 1 = 2 finished hypotheses end the search with "b", before "a b"
    # (the exhaustive rule's winner) is found; patience 0.5 needs one, the same here; patience 2 (4) goes on.
    for patience in (1.0, 0.5):
        model = ScriptedModel(TABLES)
        (h,), = beam_search(model, src_of(1), beam=2, alpha=2.0, beam_patience=patience, max_len_a=0.0,
                            max_len_b=3, min_len=0)
        assert h.tokens == [B] and h.score == pytest.approx(ln(0.24) / (7 / 6) ** 2) and model.calls == 2
    (h,), = run([1], beam=2, alpha=2.0, beam_patience=2.0)
    assert h.tokens == [A, B]
    for bad, says in [(dict(beam_patience=-1.0), "beam_patience must be >= 0"),
                      (dict(beam_patience=float("nan")), "beam_patience must be >= 0"),
                      (dict(beam=4, nbest=3, beam_patience=0.5), "fewer than nbest 3: make it >= 0.75")]:
        with pytest.raises(ValueError, match=re.escape(says)):
            SearchConfig(**bad)
    assert SearchConfig(beam=4, beam_patience=0.3).finished_enough == 2  # ceil(1.2)


def test_early_eos_and_min_len_by_hand():
    # "" (p 0.5) finishes at step 0 and nothing live (a: ln .3) can beat it: one decoder call only.
    model = ScriptedModel(TABLES)
    (h,), = beam_search(model, src_of(2), beam=2, alpha=0.0, min_len=0, max_len_a=0.0, max_len_b=3)
    assert h.tokens == [] and h.score == pytest.approx(ln(0.5)) and model.calls == 1
    # min_len 1 bans EOS at step 0: "a" (0.3 * 0.9 = 0.27) beats "b" (0.2 * 0.5).
    (h,), = run([2], beam=2, alpha=0.0, min_len=1)
    assert h.tokens == [A] and h.score == pytest.approx(ln(0.27))


def test_length_limit_holds():
    # x = 2 source tokens, limit int(1.5 * 2 + 1) = 4 words. EOS is so unlikely that every search runs
    # into the limit, where EOS is forced.
    src, never = src_of(3), {A: 0.6, B: 0.4 - 1e-6, E: 1e-6}
    for hyps in (beam_search(ScriptedModel(TABLES, never), src, beam=3, nbest=3, max_len_a=1.5, max_len_b=1),
                 greedy_search(ScriptedModel(TABLES, never), src, max_len_a=1.5, max_len_b=1)):
        assert hyps[0][0].tokens == [A] * 4
        assert all(len(h.tokens) <= 4 for h in hyps[0])


def test_scripted_batch_equals_alone():
    # Sentences of different tables finish at different steps; each is dropped from the batch when done.
    alone = [run([t], beam=2, nbest=2, alpha=a) for t in (1, 2, 3) for a in (0.0, 2.0)]
    for a_i, alpha in enumerate((0.0, 2.0)):
        batch = run([3, 1, 2, 1], beam=2, nbest=2, alpha=alpha)
        for hyps, t in zip(batch, (3, 1, 2, 1)):
            expect = alone[(t - 1) * 2 + a_i][0]
            assert [h.tokens for h in hyps] == [h.tokens for h in expect]
            assert [h.score for h in hyps] == pytest.approx([h.score for h in expect])


def test_nbest_ordering_and_validation():
    (h1, h2, h3), = run([1], beam=3, nbest=3, alpha=0.6)
    assert h1.score >= h2.score >= h3.score
    assert len({tuple(h.tokens) for h in (h1, h2, h3)}) == 3
    with pytest.raises(ValueError):
        run([1], beam=2, nbest=3)


# ---------------------------------------------------------------------------------------------------------
# The real model (tiny preset, random weights).


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny")).eval()
    with torch.no_grad():  # a random model repeats its input; raise the EOS logit by 5 so lengths vary
        eos = model.embedding.weight[E]
        model.decoder.layers[-1].sublayers[-1].norm.bias += 5.0 * eos / eos.dot(eos)
    g = torch.Generator().manual_seed(1)
    lens = [7, 3, 9, 5, 1, 6]
    src = torch.full((len(lens), max(lens)), PAD_ID)
    for i, n in enumerate(lens):
        src[i, : n - 1] = torch.randint(4, 1000, (n - 1,), generator=g)
        src[i, n - 1] = E
    return model, src


def test_cached_decoding_equals_full_decoder(tiny):
    model, src = tiny
    tgt = torch.cat([torch.full((src.size(0), 1), BOS_ID), torch.randint(4, 1000, (src.size(0), 6))], 1)
    with torch.no_grad():
        memory, src_pad = model.encode(src), src.eq(PAD_ID)
        full = model.decode(tgt, memory, src_pad)  # (B, T, V)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, i: i + 1], memory, src_pad, cache=cache) for i in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def _same(a, b):
    assert [[h.tokens for h in s] for s in a] == [[h.tokens for h in s] for s in b]
    assert [h.score for s in a for h in s] == pytest.approx([h.score for s in b for h in s], abs=1e-4)


def test_beam_one_equals_greedy(tiny):
    model, src = tiny
    # With alpha 0 the finished greedy path is always at least as good as what beam 1 keeps alive.
    _same(beam_search(model, src, beam=1, alpha=0.0, max_len_b=8),
          greedy_search(model, src, max_len_b=8, alpha=0.0))
    # With a length penalty beam 1 keeps searching past the greedy stop, so it can only score higher.
    b1 = beam_search(model, src, beam=1, alpha=0.6, max_len_b=8)
    gr = greedy_search(model, src, max_len_b=8, alpha=0.6)
    assert all(b[0].score >= g[0].score - 1e-5 for b, g in zip(b1, gr))


def test_real_model_sentence_same_alone_and_in_any_batch(tiny):
    model, src = tiny
    batch = beam_search(model, src, beam=3, nbest=2, max_len_b=6)
    for i in range(src.size(0)):
        n = int(src[i].ne(PAD_ID).sum())
        _same([batch[i]], beam_search(model, src[i: i + 1, :n], beam=3, nbest=2, max_len_b=6))
    perm = [4, 2, 0, 5, 1, 3]
    _same([batch[i] for i in perm], beam_search(model, src[perm], beam=3, nbest=2, max_len_b=6))
    g_batch = greedy_search(model, src, max_len_b=6)
    _same([g_batch[2]], greedy_search(model, src[2:3], max_len_b=6))


def test_real_model_nbest_limits_and_scores(tiny):
    model, src = tiny
    nb = beam_search(model, src, beam=4, nbest=4, max_len_a=0.5, max_len_b=3)
    for s, hyps in zip(src, nb):
        limit = int(0.5 * int(s.ne(PAD_ID).sum()) + 3)
        assert 1 <= len(hyps) <= 4
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)  # no duplicates
        for h in hyps:
            assert 1 <= len(h.tokens) <= limit  # min_len 1 by default: never empty
            assert all(t not in (PAD_ID, BOS_ID, EOS_ID) for t in h.tokens)
            assert len(h.positional_scores) == len(h.tokens) + 1
            assert h.score == pytest.approx(sum(h.positional_scores) / length_penalty(len(h.tokens) + 1, 0.6))
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_decoding_through_the_fused_kernel_gives_the_same_search(tiny, monkeypatch):
    """Off the CPU a decoding step's attention runs torch's fused kernel (aiayn.fast.use_matmul_attention); forced
    here on the CPU, greedy and beam search (rows grouped per sentence in cross-attention) find what the matmul path
    finds, with the same scores."""
    import aiayn.model

    model, src = tiny
    with torch.no_grad():
        matmul = (beam_search(model, src, beam=3, nbest=2, max_len_b=8), greedy_search(model, src, max_len_b=8))
        calls = []

        def fused(q, decoding):
            calls.append(decoding)
            return False

        monkeypatch.setattr(aiayn.model, "use_matmul_attention", fused)
        fused_kernel = (beam_search(model, src, beam=3, nbest=2, max_len_b=8), greedy_search(model, src, max_len_b=8))
    assert any(calls)  # decoding steps went through the switch
    for a, b in zip(matmul, fused_kernel):
        _same(a, b)


def test_copying_only_what_beams_do_not_share_gives_the_same_search(tiny, monkeypatch):
    """Beam search whose cache copies, at a reorder, only the positions a beam does not already share with its new
    prefix, in place (aiayn.decoding.cache.entries_to_copy), finds exactly what it finds with every beam's whole past
    copied at every step: the same words and the same scores to the bit."""
    import aiayn.decoding.cache as cache

    model, src = tiny
    in_place, original = [], cache.entries_to_copy

    def spy(*args):
        in_place.append(original(*args))
        return in_place[-1]

    with torch.no_grad():
        monkeypatch.setattr(cache, "entries_to_copy", spy)
        fast = beam_search(model, src, beam=4, nbest=4, max_len_b=8)
        monkeypatch.setattr(cache, "entries_to_copy", lambda *args: None)
        every = beam_search(model, src, beam=4, nbest=4, max_len_b=8)
    assert any(copies is not None for copies in in_place)  # beams moved in place
    assert [[(h.tokens, h.score, h.positional_scores) for h in s] for s in fast] == [
        [(h.tokens, h.score, h.positional_scores) for h in s] for s in every]


def test_top_candidates_are_fairseqs_one_top_n(monkeypatch):
    """A beam step's candidates, from the n best blocks of columns (the CPU path) and from each row's best n (the
    other), are fairseq's: one top-n of (running score + log-prob) over each sentence's kk * V entries, the same
    values to the bit, each (beam, token) pointing at an entry of that value, none twice; with banned (-inf) tokens,
    values tied across rows, and a V no block width divides."""
    import aiayn.decoding.search as search

    g = torch.Generator().manual_seed(0)
    for V, block in ((640, 64), (640, None), (650, None)):
        monkeypatch.setattr(search, "BLOCK_SIZES", (block,) if block else ())
        for bsz, kk, n in ((3, 4, 8), (2, 1, 8), (5, 4, 4)):
            lprobs = torch.log_softmax(torch.randn(bsz * kk, V, generator=g), -1)
            lprobs[:, :3] = float("-inf")
            lprobs[1, 10:20] = lprobs[0, 10:20]  # the same values in two rows
            scores = torch.randn(bsz * kk, generator=g).round()  # and the same running scores
            assert (search._block_size(V, kk, n) is not None) == (block is not None)
            values, beams, tokens = search.top_candidates(lprobs, scores, bsz, n)
            fairseq = (lprobs + scores[:, None]).view(bsz, kk * V).topk(n, dim=1).values
            assert torch.equal(values, fairseq)
            rows = beams + torch.arange(bsz)[:, None] * kk
            assert torch.equal(lprobs[rows, tokens] + scores[rows], values)
            assert all(len(set(zip(b, t))) == n for b, t in zip(beams.tolist(), tokens.tolist()))


def test_block_candidates_give_the_same_search(tiny, monkeypatch):
    """Beam search with the step's candidates from blocks of columns finds exactly what it finds with each row's top
    n: the same words and scores to the bit (the tiny model's 1,000 pieces in blocks of 40)."""
    import aiayn.decoding.search as search

    model, src = tiny
    found = []
    for sizes in ((40,), ()):
        monkeypatch.setattr(search, "BLOCK_SIZES", sizes)
        hyps = beam_search(model, src, beam=4, nbest=4, max_len_b=8)
        found.append([[(h.tokens, h.score, h.positional_scores) for h in s] for s in hyps])
    assert found[0] == found[1]


# ---------------------------------------------------------------------------------------------------------
# Sampling, target prefixes, n-gram blocking: the scripted model again, with distributions known by hand.

D = 7  # a fourth word
# Table 4: one word drawn from p = (a .4, b .3, c .2, d .1), then EOS.
T4 = {(): {A: 0.4, B: 0.3, C: 0.2, D: 0.1}}
DRAWS = 4000


def first_words(top_k=0, top_p=1.0, temperature=1.0, seed=0, table=T4):
    """The first word of each of DRAWS samples of one sentence, as frequencies of a, b, c, d."""
    search = SearchConfig(sampling=True, nbest=DRAWS, top_k=top_k, top_p=top_p, temperature=temperature, seed=seed,
                          max_len_a=0.0, max_len_b=3)
    (hyps,) = sample_search(ScriptedModel({9: table}), src_of(9), search)
    assert len(hyps) == DRAWS and all(len(h.tokens) == 1 for h in hyps)
    counts = torch.bincount(torch.tensor([h.tokens[0] for h in hyps]), minlength=V).float() / DRAWS
    return counts[[A, B, C, D]].tolist()


def close(freqs, expect, tol=0.03):  # 4000 draws: a frequency's standard deviation is at most 0.008
    return all(abs(f - e) <= tol for f, e in zip(freqs, expect))


def test_sampling_draws_the_model_distribution():
    assert close(first_words(), [0.4, 0.3, 0.2, 0.1])
    assert first_words(seed=3) == first_words(seed=3) != first_words(seed=4)  # reproducible, and seeded


def test_top_k_never_leaves_the_k_best():
    freqs = first_words(top_k=2)
    assert freqs[2] == freqs[3] == 0.0 and close(freqs, [0.4 / 0.7, 0.3 / 0.7, 0, 0])
    # A tie at the boundary: the lower id is kept (a stable sort), so b (id 5) never, a (id 4) and c always may.
    freqs = first_words(top_k=2, table={(): {A: 0.3, B: 0.3, C: 0.4}})
    assert freqs[1] == 0.0 and close(freqs, [3 / 7, 0, 4 / 7, 0])


def test_top_p_keeps_exactly_the_nucleus():
    # The nucleus is the fewest best tokens of mass >= p: a and b (0.7) for p = 0.65; a, b and c (0.9) for 0.75.
    freqs = first_words(top_p=0.65)
    assert freqs[2] == freqs[3] == 0.0 and close(freqs, [0.4 / 0.7, 0.3 / 0.7, 0, 0])
    freqs = first_words(top_p=0.75)
    assert freqs[3] == 0.0 and close(freqs, [0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9, 0])
    assert first_words(top_p=0.3)[0] == 1.0  # the best token alone holds more than p
    # top_k first, then top_p on the renormalized k best: a .44 b .33 c .22, p = 0.5 keeps a and b.
    assert close(first_words(top_k=3, top_p=0.5), [0.4 / 0.7, 0.3 / 0.7, 0, 0])


def test_temperature_reshapes_the_distribution():
    p = torch.tensor([0.4, 0.3, 0.2, 0.1])
    for temperature in (0.5, 2.0):
        expect = p ** (1 / temperature) / (p ** (1 / temperature)).sum()  # softmax(log p / T)
        assert close(first_words(temperature=temperature), expect.tolist())
    # lower T sharpens (a more often), higher T flattens (d more often)
    assert first_words(temperature=0.5)[0] > 0.5 > first_words(temperature=2.0)[0]
    assert first_words(temperature=0.0) == [1.0, 0.0, 0.0, 0.0]  # T = 0: the argmax, every time


def test_sample_scores_are_the_model_log_probs():
    search = SearchConfig(sampling=True, nbest=50, temperature=2.0, top_k=3, max_len_a=0.0, max_len_b=3, alpha=0.0)
    (hyps,), = [sample_search(ScriptedModel(TABLES), src_of(1), search)]
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)  # best first
    table = {(A,): ln(0.5 * 0.4), (B,): ln(0.4 * 0.6), (A, B): ln(0.5 * 0.35), (B, A, C): ln(0.4 * 0.4 * 0.4),
             (B, A): ln(0.4 * 0.4 * 0.6), (A, C): ln(0.5 * 0.25)}
    for h in hyps:
        assert h.score == pytest.approx(table[tuple(h.tokens)], abs=1e-5)


def test_sampling_options_are_validated():
    for bad, says in [(dict(sampling=True, top_p=0.0), "top_p"), (dict(sampling=True, top_p=1.5), "top_p"),
                      (dict(sampling=True, temperature=-1.0), "temperature"), (dict(sampling=True, top_k=-1), "top_k"),
                      (dict(top_k=5), "only apply to sampling"), (dict(no_repeat_ngram_size=-1), "no_repeat")]:
        with pytest.raises(ValueError, match=says):
            SearchConfig(**bad)
    assert SearchConfig(sampling=True, beam=2, nbest=5).nbest == 5  # samples are not bounded by the beam


def test_prefix_is_forced_and_scored_by_hand():
    # Greedy takes "a" (0.5) unprompted; forced to start with b it goes on with EOS (0.6); forced to "b a" it ends
    # with EOS (0.6 > 0.4). The prefix's log-probs count in the score.
    src = src_of(1, 1, 1)
    hyps = greedy_search(ScriptedModel(TABLES), src, max_len_a=0.0, max_len_b=3, alpha=0.0,
                         prefixes=[[], [B], [B, A]])
    assert [h.tokens for h, in hyps] == [[A], [B], [B, A]]
    assert hyps[1][0].positional_scores == pytest.approx([ln(0.4), ln(0.6)])
    assert hyps[2][0].score == pytest.approx(ln(0.4 * 0.4 * 0.6))
    # Beam 2 from "a": "a" (0.2) then "a b" (0.175) then "a c" (0.125); "b" (the best without prefix) is gone.
    (h1, h2), = _beam_search(ScriptedModel(TABLES), src_of(1), SearchConfig(beam=2, nbest=2, alpha=0.0, max_len_a=0,
                                                                           max_len_b=3), prefixes=[[A]])
    assert (h1.tokens, h2.tokens) == ([A], [A, B]) and h1.score == pytest.approx(ln(0.2))
    # Sampling: every sample starts with the prefix.
    search = SearchConfig(sampling=True, nbest=20, max_len_a=0.0, max_len_b=3)
    (samples,) = sample_search(ScriptedModel(TABLES), src_of(1), search, prefixes=[[B]])
    assert all(h.tokens[0] == B for h in samples) and {tuple(h.tokens) for h in samples} <= {(B,), (B, A), (B, A, C)}


def test_prefix_over_the_length_limit_names_the_line():
    with pytest.raises(ValueError, match="input line 8: its prefix has 4 words, more than the 3"):
        greedy_search(ScriptedModel(TABLES), src_of(1, 1), max_len_a=0.0, max_len_b=3, prefixes=[[A], [A, B, A, B]],
                      lines=torch.tensor([3, 7]))


class Looping(dict):
    """A table for every prefix: after a the model prefers b, after b (or at the start) a, c when told no, and c is
    followed by EOS. Unblocked, it loops "a b a b ..." to the length limit."""

    def get(self, prefix, default=None):
        last = prefix[-1] if prefix else B
        return {C: {E: 1.0}, A: {B: 0.6, C: 0.3, E: 0.1}}.get(last, {A: 0.6, C: 0.3, E: 0.1})


def loop(n, beam=1, **kw):
    search = SearchConfig(beam=beam, no_repeat_ngram_size=n, max_len_a=0.0, max_len_b=8, alpha=0.0, **kw)
    return (sample_search if search.sampling else _beam_search)(ScriptedModel({1: Looping()}), src_of(1), search)[0]


def test_no_repeat_ngram_stops_the_loop_by_hand():
    assert loop(0)[0].tokens == [A, B] * 4  # off: the loop runs to the limit
    # n = 2: "a b a" then b would repeat the bigram "a b": c (0.3), then EOS.
    (h,) = loop(2)
    assert h.tokens == [A, B, A, C] and h.score == pytest.approx(ln(0.6 ** 3 * 0.3))
    assert loop(3)[0].tokens == [A, B, A, B, C]  # "a b a b", then a would repeat "a b a": c
    assert loop(1)[0].tokens == [A, B, C]  # no word twice
    for hyp in loop(2, beam=3, nbest=3) + loop(2, sampling=True, nbest=30):  # beam and sampling alike
        bigrams = list(zip(hyp.tokens, hyp.tokens[1:]))
        assert len(bigrams) == len(set(bigrams))


def test_temperature_zero_equals_greedy(tiny):
    model, src = tiny
    for extra in ({}, {"no_repeat_ngram_size": 2}):
        greedy = greedy_search(model, src, max_len_b=8, **extra)
        sampled = sample_search(model, src, SearchConfig(sampling=True, temperature=0.0, max_len_b=8, **extra))
        _same(sampled, greedy)


def test_unscored_greedy_search_ranks_the_logits_without_their_log_softmax(tiny, monkeypatch):
    """scores=False: each step's argmax of the constrained logits (min length, n-gram blocking, the word limit), no
    log-softmax computed: the scored search's words, score NaN, no positional scores. Sampling ranks its samples by
    log-probs: scored all the same."""
    import aiayn.decoding.search as search

    model, src = tiny
    log_probs = search._log_probs
    for extra in ({}, {"no_repeat_ngram_size": 2, "min_len": 3, "max_len_a": 0.0, "max_len_b": 4}):
        scored = greedy_search(model, src, **{"max_len_b": 8, **extra})
        monkeypatch.setattr(search, "_log_probs", lambda logits: pytest.fail("log-softmax computed"))
        unscored = greedy_search(model, src, scores=False, **{"max_len_b": 8, **extra})
        monkeypatch.setattr(search, "_log_probs", log_probs)
        assert [[h.tokens for h in hs] for hs in unscored] == [[h.tokens for h in hs] for hs in scored]
        assert all(math.isnan(h.score) and h.positional_scores == [] for hs in unscored for h in hs)
        assert all(math.isfinite(h.score) for hs in scored for h in hs)
    samples = sample_search(model, src, SearchConfig(sampling=True, nbest=2, max_len_b=6, scores=False))
    assert all(math.isfinite(h.score) and h.positional_scores for hs in samples for h in hs)


def test_sampled_sentence_same_alone_and_in_any_batch(tiny):
    model, src = tiny
    search = SearchConfig(sampling=True, nbest=3, top_k=20, max_len_b=8, seed=5)
    lines = torch.arange(src.size(0))
    batch = sample_search(model, src, search, lines=lines)
    perm = [4, 2, 0, 5, 1, 3]
    _same([batch[i] for i in perm], sample_search(model, src[perm], search, lines=lines[perm]))
    n = int(src[2].ne(PAD_ID).sum())
    _same([batch[2]], sample_search(model, src[2:3, :n], search, lines=lines[2:3]))
    assert len({tuple(h.tokens) for hs in batch for h in hs}) > src.size(0)  # the samples do differ


def test_a_sentence_that_ends_leaves_its_place_to_the_last_one():
    """going_on keeps the sentences not done, each that ends replaced by the last going on (the others stay where they
    are), so a beam reorder after it moves the rows of those last sentences alone: with 4 beams of 5 sentences and
    the second ending, the fifth's 4 rows move, where closing the gap moved the 12 rows of the three after it."""
    from aiayn.decoding.cache import entries_to_copy
    from aiayn.decoding.search import going_on

    done = torch.tensor([False, True, False, False, True, False])
    assert going_on(done).tolist() == [0, 5, 2, 3]
    assert going_on(torch.tensor([False, False, True])).tolist() == [0, 1]
    assert going_on(torch.tensor([True, False, False])).tolist() == [2, 1]
    assert going_on(torch.zeros(3, dtype=torch.bool)).tolist() == [0, 1, 2]
    k, length = 4, 6
    shared = torch.full((5 * k, 5 * k), 0, dtype=torch.int32)
    for s in range(5):
        shared[s * k:(s + 1) * k, s * k:(s + 1) * k] = 2  # beams of a sentence share their first two positions
    shared.fill_diagonal_(length)
    ended = torch.tensor([False, True, False, False, False])

    def moved(sentences):  # the (position, row) entries a reorder that keeps every beam's own parent copies
        rows = (sentences[:, None] * k + torch.arange(k)).reshape(-1)
        found = entries_to_copy(rows, shared, length, 5 * k)
        return length * rows.numel() if found is None else found[0].numel()

    assert moved(going_on(ended)) == k * length
    assert moved((~ended).nonzero().squeeze(1)) == length * 4 * k  # more than half: copied whole
