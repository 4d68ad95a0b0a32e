"""The decoder's incremental state (aiayn.decoding.cache): the self-attention cache's layouts, writes in place, its one
spare buffer under beam reorders, and incremental decoding equal to full decoding through all of it."""

from unittest.mock import patch

import pytest
import torch
from test_model import make_model, rand_tokens

from aiayn.config import PAD_ID
from aiayn.decoding.cache import entries_to_copy, held_dtype, keys_for_queries, sentence_moves, sentences_of


@pytest.mark.parametrize("grad,bf16", [(False, False), (True, False), (False, True)])
def test_self_attention_cache_layouts(grad, bf16):
    """fp32: a step writes its keys/values into the cache's time-major buffer (no copy of the past: the buffer
    stays the same tensor while it has room), and the buffer grows past its first 16 positions; a reorder copies
    the past into the decoder's one spare buffer, whose place the old buffer takes (a second reorder of as many rows
    allocates nothing), unless few of its entries change (then they are copied in place).
    CPU bf16 holds its keys/values in fp32 in the same layout (cache.held_dtype). In every case incremental decoding
    equals full decoding of the (reordered) prefixes."""
    with torch.set_grad_enabled(grad):
        model = make_model()
        if bf16:
            model = model.to(torch.bfloat16)
        src, tgt = rand_tokens(3, 5, 11), rand_tokens(3, 26, 12)
        memory, src_pad = model.encode(src), src.eq(PAD_ID)
        cache = model.new_cache()
        model.decode(tgt[:, :1], memory, src_pad, cache=cache)
        prefix, first = tgt[:, :1], None
        reorders = {20: [2, 2, 0], 21: [2, 0, 1], 23: [0, 0, 1]}  # the last in place: see the test below
        for t in range(1, tgt.size(1)):
            if t in reorders:
                before = cache.layers[0].keys
                rows = torch.tensor(reorders[t])
                cache.reorder(rows, rows)
                prefix, memory, src_pad = prefix[rows], memory[rows], src_pad[rows]
                assert cache.layers[0].time_major
                if not grad and t == 23:
                    assert cache.layers[0].keys is before
                elif not grad:
                    assert cache.layers[0].keys is not before and cache.layers[0].keys.size(0) >= 20 > 16  # grew
                    buffers = {id(x) for c in cache.layers for x in (c.keys, c.values)} | set(map(id,
                                                                                             cache.spares.values()))
                    assert len(buffers) == 2 * len(cache.layers) + 1  # one spare for the whole decoder
                    if t == 21:  # as many rows as the reorder before: the same buffers, no new one
                        assert buffers == first
                    first = buffers
            before = cache.layers[0].keys
            prefix = torch.cat([prefix, tgt[:, t: t + 1]], 1)
            step = model.decode(tgt[:, t: t + 1], memory, src_pad, cache=cache)
            if t != 16:  # position 16 is past the first 16 of room: the buffer grows there
                assert cache.layers[0].keys is before  # written in place
            full = model.decode(prefix, memory, src_pad)
            torch.testing.assert_close(step[:, 0], full[:, -1], **(dict(rtol=0, atol=0.1) if bf16 else
                                                                   dict(rtol=0, atol=1e-5)))
        assert cache.layers[0].length == tgt.size(1) == cache.length
        assert cache.layers[0].keys.requires_grad == grad
        assert cache.layers[0].keys.dtype == cache.layers[0].cross_k.dtype == torch.float32
        from aiayn import native

        for layer in cache.layers:  # one query per sentence: keys held as K, or K^T for aiayn.native's kernels
            assert native.reads_keys(layer.cross_k) if native.available() else layer.cross_k.is_contiguous()


def test_cross_attention_keys_are_held_as_k_transposed_for_four_queries_or_more(monkeypatch):
    """keys_for_queries: on the CPU, for 4 or more queries per sentence, the keys as a view of K^T held contiguous,
    the same values; for fewer, K contiguous; sentences_of picks sentences in either layout. Q K^T against them is
    bit for bit the product against K itself. In a cache: beam 4's keys held as K^T through a reorder of
    sentences, and its steps equal full decoding. Where aiayn.native's attention runs the steps, for any number of
    queries, K^T held with each head's rows padded to whole vectors of 8 positions (zeros), which sentences_of
    keeps."""
    from aiayn import native

    if native.available():
        for queries in (1, 4):
            k = torch.randn(3, 2, 5, 4)
            held = keys_for_queries(k, queries)
            assert torch.equal(held, k) and native.reads_keys(held) and held.stride() == (64, 32, 1, 8)
            assert torch.equal(held.transpose(-2, -1).as_strided((3, 2, 4, 8), (64, 32, 8, 1))[..., 5:],
                               torch.zeros(3, 2, 4, 3))
            picked = sentences_of(held, torch.tensor([2, 0]))
            assert torch.equal(picked, k[[2, 0]]) and picked.stride() == held.stride()
    monkeypatch.setitem(native._state, "enabled", False)  # torch's matmuls: the layout they want
    k, q = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 4, 4)
    held = keys_for_queries(k, 4)
    assert held.shape == k.shape and held.transpose(-2, -1).is_contiguous() and torch.equal(held, k)
    assert torch.equal(q @ held.transpose(-2, -1), q @ k.transpose(-2, -1))
    picked = sentences_of(held, torch.tensor([2, 0]))
    assert picked.transpose(-2, -1).is_contiguous() and torch.equal(picked, k[[2, 0]])
    plain = keys_for_queries(k.transpose(-2, -1).contiguous().transpose(-2, -1), 2)
    assert plain.is_contiguous() and torch.equal(plain, k)
    assert sentences_of(plain, torch.tensor([1])).is_contiguous()

    model = make_model()
    src, tgt = rand_tokens(2, 5, 41), rand_tokens(8, 6, 42)  # four beams of each of two sentences
    memory, src_pad = model.encode(src), src.eq(PAD_ID)
    cache = model.new_cache()
    for t in range(tgt.size(1)):
        if t == 3:  # the second sentence ends: its beams and keys leave
            cache.reorder(torch.arange(4), torch.tensor([0]))
            tgt, memory, src_pad = tgt[:4], memory[:1], src_pad[:1]
        step = model.decode(tgt[:, t: t + 1], memory, src_pad, cache=cache)
        assert all(c.cross_k.transpose(-2, -1).is_contiguous() and not c.cross_k.is_contiguous()
                   for c in cache.layers)
        full = model.decode(tgt[:, : t + 1], memory.repeat_interleave(4, 0), src_pad.repeat_interleave(4, 0))
        torch.testing.assert_close(step[:, 0], full[:, -1], rtol=0, atol=1e-5)



def test_sentences_leaving_a_batch_move_only_the_rows_that_take_their_places(monkeypatch):
    """sentences_of(x, keep) equals x.index_select(0, keep). For a keep as going_on gives it (sentences 1 and 3 of 5
    end: 4 takes 1's place), only that row is copied, in place, and the result is a view of x's first rows (x's own
    storage); for any other order, a copy, in x's layout (K^T views stay K^T); under autograd, a copy. What moves
    (sentence_moves), found once, gives every tensor of the reorder the same rows."""
    from aiayn import native
    from aiayn.decoding.search import going_on

    monkeypatch.setitem(native._state, "enabled", False)  # keys_for_queries's K^T layout, as for torch's matmuls
    x = torch.randn(5, 2, 3, 4)
    keep = going_on(torch.tensor([False, True, False, True, False]))
    assert keep.tolist() == [0, 4, 2]
    expected = x.index_select(0, keep)
    kept = sentences_of(x, keep)
    assert torch.equal(kept, expected) and kept.data_ptr() == x.data_ptr()  # in place: a view of x
    held = keys_for_queries(torch.randn(5, 2, 3, 4), 4)
    order = torch.tensor([3, 1, 0])  # rows kept in no place of their own: a copy
    picked = sentences_of(held, order)
    assert torch.equal(picked, held.index_select(0, order)) and picked.transpose(-2, -1).is_contiguous()
    assert picked.data_ptr() != held.data_ptr()
    leaf = torch.randn(5, 3, requires_grad=True)
    with torch.enable_grad():
        grad_kept = sentences_of(leaf * 1, keep)
    assert torch.equal(grad_kept, (leaf * 1).index_select(0, keep)) and grad_kept.requires_grad
    # what moves, found once (sentence_moves), serves every tensor of a reorder alike, in either layout
    moves, others = sentence_moves(keep), [torch.randn(5, 7), keys_for_queries(torch.randn(5, 2, 3, 4), 4)]
    assert moves.moved.tolist() == [1] and moves.sources.tolist() == [4] and moves.in_place
    for other in [x.clone()] + others:
        expected = other.index_select(0, keep)
        assert torch.equal(sentences_of(other, moves), expected)
    assert not sentence_moves(order).in_place
    assert torch.equal(sentences_of(held, sentence_moves(order)), held.index_select(0, order))

def test_bf16_attention_over_the_cache_runs_in_fp32_and_equals_bf16_attention():
    """A CPU bf16 decoder holds its cached keys/values in fp32 and attends over them with the fp32 path's matmuls, not
    torch's bf16 fused kernel; its steps equal those of the same bf16 model attending in bf16 (its fused kernel over
    bf16 keys/values) up to bf16 rounding, and its outputs are bf16."""
    model = make_model().to(torch.bfloat16)
    src, tgt = rand_tokens(2, 6, 21), rand_tokens(2, 9, 22)
    memory, src_pad = model.encode(src), src.eq(PAD_ID)
    assert held_dtype(memory, decoding=True) == torch.float32 and held_dtype(memory, decoding=False) == torch.bfloat16
    cache, fused = model.new_cache(), model.new_cache()
    for t in range(tgt.size(1)):
        step = model.decode(tgt[:, t: t + 1], memory, src_pad, cache=cache)
        with patch("aiayn.decoding.cache.held_dtype", lambda q, decoding: q.dtype):  # the bf16 reference
            ref = model.decode(tgt[:, t: t + 1], memory, src_pad, cache=fused)
        assert step.dtype == torch.bfloat16
        torch.testing.assert_close(step.float(), ref.float(), rtol=0, atol=0.1)
    assert cache.layers[0].keys.dtype == torch.float32 and fused.layers[0].keys.dtype == torch.bfloat16


@torch.no_grad()
def test_beam_reorder_copies_only_the_positions_since_beams_parted():
    """A reorder of as many rows (beam search between steps of the same sentences) copies, in place, only the
    (position, row) entries that change: nothing for a beam that keeps its parent, only the positions since they
    parted for a beam that takes a sibling's prefix; where that would move more than one copy of the whole past, the
    copy into the spare. The steps after each equal full decoding of the reordered prefixes."""
    model = make_model()
    src, tgt = rand_tokens(1, 5, 31), rand_tokens(4, 7, 32)  # four beams of one sentence
    memory, src_pad = model.encode(src), src.eq(PAD_ID)
    cache = model.new_cache()
    model.decode(tgt[:, :3], memory, src_pad, cache=cache)  # positions 0-2, each row its own

    def reorder(rows, entries):
        index = torch.tensor(rows)
        into_source = entries_to_copy(index, cache.shared_positions(cache.layers[0].rows), cache.length, 4)
        assert (None if into_source is None else [t.tolist() for t in into_source]) == entries
        before = [(c.keys, c.keys[: c.length].clone()) for c in cache.layers]
        cache.reorder(index)
        for layer, (buf, old) in zip(cache.layers, before):
            assert (layer.keys is buf) == (entries is not None)  # in place, or copied into the spare
            torch.testing.assert_close(layer.keys[: layer.length, : layer.rows], old[:, index], rtol=0, atol=0)
        return index

    tgt = tgt[reorder([0, 0, 2, 3], [[1, 5, 9], [0, 4, 8]])]  # row 1 takes row 0's three positions
    model.decode(tgt[:, 3:4], memory, src_pad, cache=cache)
    # rows 0 and 1 share positions 0-2: swapping them copies position 3 only; row 3 takes all of row 2's
    tgt = tgt[reorder([1, 0, 2, 2], [[3, 7, 11, 12, 13, 15], [2, 6, 10, 13, 12, 14]])]  # entry = position * 4 + row
    tgt = tgt[reorder([3, 2, 1, 0], None)]  # every row moves: the copy into the spare
    for t in (4, 5, 6):
        if t == 6:  # two rows leave, rows 0 and 1 swap (positions 0-3 shared): the buffer keeps its room for four
            tgt = tgt[reorder([1, 0], [[16, 17, 20, 21], [17, 16, 21, 20]])]
        step = model.decode(tgt[:, t: t + 1], memory, src_pad, cache=cache)
        full = model.decode(tgt[:, : t + 1], memory.expand(len(tgt), -1, -1), src_pad.expand(len(tgt), -1))
        torch.testing.assert_close(step[:, 0], full[:, -1], rtol=0, atol=1e-5)
