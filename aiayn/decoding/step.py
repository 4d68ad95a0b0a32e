"""One step of incremental decoding written out: what a DecodingTransformer's decoder layers compute for one new
position once its cache is primed, with the same operators on the same weights in the same order as its modules
(model.py: MultiHeadAttention, FeedForward, the sublayer connections; eq. 1 is model.attention itself and the
cross-attention LayerCache.attend itself), so the same bits, without the ~50 nn.Module calls a step and their
wrappers: on a CPU, Python and torch's dispatch are the part of a step that CTranslate2 does not spend (what this is
worth: docs/speed-design.md, benchmarks/ab/decoder_step.py). Where aiayn.native's compiled kernels are built and
enabled, eq. 1 runs there instead (fp32 attention: fp32, int8, and bf16's fp32 attention), equal to rounding; with
them off (aiayn.native.set_enabled(False)), the modules' bits. int8 copies project a self-attention's Q, K and V in
one GEMM (DecodingTransformer.fused_qkv: the three projections' products to the bit).

    takes(model, tgt_in, cache)          whether `step` computes this call: on a CPU (fp32, bf16, int8), one new
                                         position, a primed time-major cache, attention as model.attention computes
                                         it (no recorder installed), eval mode, no autocast; else the modules run it
    step(model, tgt_in, src_pad, cache)  the decoder's hidden states (N, 1, D) for the new position tgt_in (N, 1)
"""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn import native
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
    mask = model._key_mask(src_pad)  # (B, 1, 1, S), True = attend: what Transformer.decode_hidden hands the layers
    fused = model.fused_qkv or [None] * len(cache.layers)
    for layer, c, qkv in zip(model.decoder.layers, cache.layers, fused):  # SublayerConnection; dropout: identity
        n0, n1, n2 = (sublayer.norm for sublayer in layer.sublayers)
        if model.cfg.norm_first:
            x = x + _self_attention(layer.self_attn, c, _layer_norm(n0, x), qkv)
            x = x + _cross_attention(layer.cross_attn, c, _layer_norm(n1, x), mask)
            x = x + _feed_forward(layer.ffn, _layer_norm(n2, x))
        else:
            x = _layer_norm(n0, x + _self_attention(layer.self_attn, c, x, qkv))
            x = _layer_norm(n1, x + _cross_attention(layer.cross_attn, c, x, mask))
            x = _layer_norm(n2, x + _feed_forward(layer.ffn, x))
    cache.length += 1
    return model.decoder.norm(x)


def _self_attention(attn, c: LayerCache, x: Tensor, qkv) -> Tensor:
    n, h = x.size(0), attn.h
    if qkv is not None:  # int8: W^Q, W^K, W^V as one GEMM, the same products (inference._Int8Fused)
        q, k, v = qkv(x).split((h * attn.d_k, h * attn.d_k, h * attn.d_v), dim=-1)  # (N, 1, h*d) each
    else:
        q, k, v = attn.w_q.forward(x), attn.w_k.forward(x), attn.w_v.forward(x)
    k = k.view(n, 1, h, attn.d_k).transpose(1, 2)  # (N, h, 1, dk)
    v = v.view(n, 1, h, attn.d_v).transpose(1, 2)
    held = held_dtype(q, True)  # bf16 attends over fp32 copies of its keys and values
    k, v = c.append(k.to(held), v.to(held))  # (N, h, t+1, d): every position so far; a new one sees them all
    if held == torch.float32 and native.available():  # the buffers themselves, not the views (N, h, t+1, d)
        heads = native.self_attention(q.to(held), c.keys, c.values, n, c.length)  # (N, 1, h*dv)
        return attn.w_o.forward(heads.to(q.dtype))
    q = q.view(n, 1, h, attn.d_k).transpose(1, 2)  # (N, h, 1, dk)
    return _heads_out(attn, attention(q.to(held), k, v, None, False, True).to(q.dtype), n)


def _cross_attention(attn, c: LayerCache, x: Tensor, mask: Tensor | None) -> Tensor:
    n = x.size(0)
    q = attn.w_q.forward(x)  # (N, 1, h*dk)
    if c.cross_k.dtype == torch.float32 and c.cross_k.is_contiguous() and native.available():
        return attn.w_o.forward(native.cross_attention(q.float(), c.cross_k, c.cross_v, mask).to(q.dtype))
    q = q.view(n, 1, attn.h, attn.d_k).transpose(1, 2)  # (N, h, 1, dk)
    return _heads_out(attn, c.attend(attn, q, None, mask, False), n)  # over the keys computed at the first step


def _feed_forward(ffn, x: Tensor) -> Tensor:
    return ffn.w_2.forward(ffn.activation(ffn.w_1.forward(x)))


def _heads_out(attn, heads: Tensor, n: int) -> Tensor:
    return attn.w_o.forward(heads.transpose(1, 2).reshape(n, 1, attn.h * attn.d_v))  # Concat(head_1..head_h) W^O


def _layer_norm(norm, x: Tensor) -> Tensor:
    return torch.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
