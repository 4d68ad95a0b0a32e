"""The decoder's incremental state (aiayn.decoding.cache): the self-attention cache's layouts, writes in place, its one
spare buffer under beam reorders, and incremental decoding equal to full decoding through all of it."""

from unittest.mock import patch

import pytest
import torch
from test_model import make_model, rand_tokens

from aiayn.config import PAD_ID
from aiayn.decoding.cache import held_dtype, moved_rows


@pytest.mark.parametrize("grad,bf16", [(False, False), (True, False), (False, True)])
def test_self_attention_cache_layouts(grad, bf16):
    """fp32: a step writes its keys/values into the cache's time-major buffer (no copy of the past: the buffer
    stays the same tensor while it has room), and the buffer grows past its first 16 positions; a reorder copies
    the past into the decoder's one spare buffer, whose place the old buffer takes (a second reorder of as many rows
    allocates nothing).
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
        reorders = {20: [2, 2, 0], 21: [1, 0, 2], 23: [0, 0, 1]}
        for t in range(1, tgt.size(1)):
            if t in reorders:
                before = cache.layers[0].keys
                rows = torch.tensor(reorders[t])
                cache.reorder(rows, rows)
                prefix, memory, src_pad = prefix[rows], memory[rows], src_pad[rows]
                assert cache.layers[0].time_major
                if not grad:
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


@pytest.mark.parametrize("rows", [[0, 1, 2, 3], [0, 1, 0, 3], [2, 1, 0, 3], [1, 2, 3, 0]])
@torch.no_grad()
def test_beam_reorder_copies_only_the_rows_that_move(rows):
    """A reorder of as many rows (beam search between steps of the same sentences): no copy when every row keeps its
    prefix, only the moved rows copied, in place, when they are at most half; otherwise the copy into the spare. The
    steps after it equal full decoding of the reordered prefixes in every case."""
    model = make_model()
    src, tgt = rand_tokens(1, 5, 31), rand_tokens(4, 6, 32)  # four beams of one sentence
    memory, src_pad = model.encode(src), src.eq(PAD_ID)
    cache = model.new_cache()
    model.decode(tgt[:, :3], memory, src_pad, cache=cache)
    before = [(c.keys, c.keys.clone()) for c in cache.layers]
    index = torch.tensor(rows)
    moved = [r for r, parent in enumerate(rows) if parent != r]
    assert moved_rows(index, 4).tolist() == moved and moved_rows(index[:3], 4) is None
    cache.reorder(index)
    for layer, (buf, old) in zip(cache.layers, before):
        assert (layer.keys is buf) == (2 * len(moved) <= 4)  # in place, or copied into the spare
        torch.testing.assert_close(layer.keys[:3], old[:3, index], rtol=0, atol=0)
    tgt = tgt[index]
    for t in (3, 4, 5):
        step = model.decode(tgt[:, t: t + 1], memory, src_pad, cache=cache)
        full = model.decode(tgt[:, : t + 1], memory.expand(4, -1, -1), src_pad.expand(4, -1))
        torch.testing.assert_close(step[:, 0], full[:, -1], rtol=0, atol=1e-5)


def test_cache_reorder_selects_rows():
    model = make_model()
    src, tgt = rand_tokens(3, 5, 7), rand_tokens(3, 4, 8)
    memory, src_pad = model.encode(src), src.eq(PAD_ID)
    cache = model.new_cache()
    model.decode(tgt[:, :2], memory, src_pad, cache=cache)
    index = torch.tensor([2, 0, 0])
    cache.reorder(index, index)  # one row per sentence: rows and sentences move together
    step = model.decode(tgt[index, 2:3], memory[index], src_pad[index], cache=cache)
    full = model.decode(tgt[index, :3], memory[index], src_pad[index])
    torch.testing.assert_close(step[:, 0], full[:, 2], rtol=0, atol=1e-5)
