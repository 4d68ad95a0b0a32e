"""The decoder's incremental state (aiayn.decoding.cache): the self-attention cache's layouts, writes in place, its one
spare buffer under beam reorders, and incremental decoding equal to full decoding through all of it."""

import pytest
import torch
from test_model import make_model, rand_tokens

from aiayn.config import PAD_ID


@pytest.mark.parametrize("grad,bf16", [(False, False), (True, False), (False, True)])
def test_self_attention_cache_layouts(grad, bf16):
    """fp32: a step writes its keys/values into the cache's time-major buffer (no copy of the past: the buffer
    stays the same tensor while it has room), and the buffer grows past its first 16 positions; a reorder copies
    the past into the decoder's one spare buffer, whose place the old buffer takes (a second reorder of as many rows
    allocates nothing).
    CPU bf16 concatenates from the start. In every case incremental decoding equals full decoding of the
    (reordered) prefixes."""
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
                assert cache.layers[0].time_major != bf16
                if not bf16 and not grad:
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
            if not bf16 and t != 16:  # position 16 is past the first 16 of room: the buffer grows there
                assert cache.layers[0].keys is before  # written in place
            full = model.decode(prefix, memory, src_pad)
            torch.testing.assert_close(step[:, 0], full[:, -1], **(dict(rtol=0, atol=0.1) if bf16 else
                                                                   dict(rtol=0, atol=1e-5)))
        assert cache.layers[0].length == tgt.size(1) == cache.length
        assert cache.layers[0].keys.requires_grad == grad


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
