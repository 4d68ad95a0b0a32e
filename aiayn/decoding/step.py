"""One step of incremental decoding written out: what a DecodingTransformer's decoder layers compute for one new
position once its cache is primed, with the same operators on the same weights in the same order as its modules
(model.py: MultiHeadAttention, eq. 1 as two matmuls, FeedForward, the sublayer connections; cache.py: LayerCache,
by_sentence), so the same bits, without the ~50 nn.Module calls a step and their wrappers: on a CPU, Python and
torch's dispatch are the part of a step that CTranslate2 does not spend (what this is worth: docs/speed-design.md,
benchmarks/ab/decoder_step.py).

    takes(model, tgt_in, cache)          whether `step` computes this call: on a CPU (fp32, bf16, int8), one new
                                         position, a primed time-major cache, attention as model.attention computes
                                         it (no recorder installed), eval mode, no autocast; else the modules run it
    step(model, tgt_in, src_pad, cache)  the decoder's hidden states (N, 1, D) for the new position tgt_in (N, 1)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from aiayn.decoding.cache import DecoderCache, LayerCache, held_dtype
from aiayn.model import attention


def takes(model, tgt_in: Tensor, cache) -> bool:
    if not isinstance(cache, DecoderCache) or not cache.layers or tgt_in.size(1) != 1 or tgt_in.device.type != "cpu":
        return False
    if model.training or torch.is_autocast_enabled("cpu"):
        return False
    return all(c.time_major and c.cross_k is not None and layer.self_attn.attention is attention
               and layer.cross_attn.attention is attention for layer, c in zip(model.decoder.layers, cache.layers))


def step(model, tgt_in: Tensor, src_pad: Tensor | None, cache: DecoderCache) -> Tensor:
    x = model.embed(tgt_in, cache.length)  # (N, 1, D)
    masked = None if src_pad is None else src_pad[:, None, None, :]  # (B, 1, 1, S): what the cross-attention skips
    for layer, c in zip(model.decoder.layers, cache.layers):  # SublayerConnection; dropout is the identity in eval
        n0, n1, n2 = (sublayer.norm for sublayer in layer.sublayers)
        if model.cfg.norm_first:
            x = x + _self_attention(layer.self_attn, c, _layer_norm(n0, x))
            x = x + _cross_attention(layer.cross_attn, c, _layer_norm(n1, x), masked)
            x = x + _feed_forward(layer.ffn, _layer_norm(n2, x))
        else:
            x = _layer_norm(n0, x + _self_attention(layer.self_attn, c, x))
            x = _layer_norm(n1, x + _cross_attention(layer.cross_attn, c, x, masked))
            x = _layer_norm(n2, x + _feed_forward(layer.ffn, x))
    cache.length += 1
    return model.decoder.norm(x)


def _self_attention(attn, c: LayerCache, x: Tensor) -> Tensor:
    n, h = x.size(0), attn.h
    q = attn.w_q.forward(x).view(n, 1, h, attn.d_k).transpose(1, 2)  # (N, h, 1, dk)
    k = attn.w_k.forward(x).view(n, 1, h, attn.d_k).transpose(1, 2)
    v = attn.w_v.forward(x).view(n, 1, h, attn.d_v).transpose(1, 2)
    held = held_dtype(q, True)  # bf16 attends over fp32 copies of its keys and values
    k, v = c.append(k.to(held), v.to(held))  # (N, h, t+1, d): every position so far; a new one sees them all
    return _heads_out(attn, _attend(q.to(held), k, v, None).to(q.dtype), n)


def _cross_attention(attn, c: LayerCache, x: Tensor, masked: Tensor | None) -> Tensor:
    n, h, dk = x.size(0), attn.h, attn.d_k
    q = attn.w_q.forward(x).view(n, 1, h, dk).transpose(1, 2)  # (N, h, 1, dk)
    b = c.cross_k.size(0)
    g = n // b  # decoder rows (beams) per source sentence, which attend to its keys together (cache.by_sentence)
    if g > 1:
        q = q.view(b, g, h, 1, dk).transpose(1, 2).reshape(b, h, g, dk)
    heads = _attend(q.to(c.cross_k.dtype), c.cross_k, c.cross_v, masked).to(q.dtype)
    if g > 1:
        heads = heads.view(b, h, g, 1, -1).transpose(1, 2).reshape(n, h, 1, -1)
    return _heads_out(attn, heads, n)


def _feed_forward(ffn, x: Tensor) -> Tensor:
    return ffn.w_2.forward(ffn.activation(ffn.w_1.forward(x)))


def _attend(q: Tensor, k: Tensor, v: Tensor, masked: Tensor | None) -> Tensor:
    """Eq. 1 as model.scaled_dot_product_attention computes it (masked: True where a key is skipped)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    return scores.softmax(dim=-1, dtype=torch.float32) @ v


def _heads_out(attn, heads: Tensor, n: int) -> Tensor:
    return attn.w_o.forward(heads.transpose(1, 2).reshape(n, 1, attn.h * attn.d_v))  # Concat(head_1..head_h) W^O


def _layer_norm(norm, x: Tensor) -> Tensor:
    return torch.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
