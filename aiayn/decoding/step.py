"""One step of incremental decoding written out: what a DecodingTransformer's decoder layers compute for one new
position once its cache is primed, with the same operators on the same weights in the same order as its modules
(model.py: MultiHeadAttention, FeedForward, the sublayer connections; eq. 1 is model.attention itself and the
cross-attention LayerCache.attend itself), so the same bits, without the ~50 nn.Module calls a step and their
wrappers: on a CPU, Python and torch's dispatch are the part of a step that CTranslate2 does not spend (what this is
worth: docs/speed-design.md, benchmarks/ab/decoder_step.py). Where aiayn.native's compiled kernels are built and
enabled, eq. 1 runs there instead (fp32 attention: fp32, int8, and bf16's fp32 attention), equal to rounding; with
them off (aiayn.native.set_enabled(False)), the modules' bits. int8 copies project a self-attention's Q, K and V in
one GEMM (DecodingTransformer.fused_qkv: the three projections' products to the bit). What a step reads of the
model (each layer's projections with their weights bound, the norms' arguments, the embedding) is looked up once
and kept on the model (`_plan`; a load_state_dict drops it), and the step runs with torch's search for
`__torch_function__` overrides off: the attribute lookups and the searches cost a few microseconds each, a large
part of a step at a few rows.

    takes(model, tgt_in, cache)          whether `step` computes this call: on a CPU (fp32, bf16, int8), one new
                                         position, a primed time-major cache, attention as model.attention computes
                                         it (no recorder installed), eval mode, no autocast; else the modules run it
    step(model, tgt_in, src_pad, cache)  the decoder's hidden states (N, 1, D) for the new position tgt_in (N, 1)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn import native
from aiayn.decoding.cache import DecoderCache, LayerCache, held_dtype
from aiayn.decoding.int8_rows import RowInt8Linear
from aiayn.model import attention


def takes(model, tgt_in: Tensor, cache) -> bool:
    if not isinstance(cache, DecoderCache) or not cache.layers or tgt_in.size(1) != 1 or tgt_in.device.type != "cpu":
        return False
    if model.training or torch.is_autocast_enabled("cpu"):
        return False
    return all(c.time_major and c.cross_k is not None and layer.self_attn.attention is attention
               and layer.cross_attn.attention is attention for layer, c in zip(model.decoder.layers, cache.layers))


def step(model, tgt_in: Tensor, src_pad: Tensor | None, cache: DecoderCache) -> Tensor:
    plan = model.__dict__.get("_step_plan") or _plan(model)
    with torch._C.DisableTorchFunction():  # plain tensors only: torch skips its search for overrides at every call
        x = plan.embed(tgt_in, cache.length)  # (N, 1, D)
        mask = None if src_pad is None else ~src_pad  # (B, S), True = attend (aiayn.native's layout)
        for layer, c in zip(plan.layers, cache.layers):  # SublayerConnection; dropout is the identity in eval
            n0, n1, n2 = layer.norms
            if plan.norm_first:
                x = x + _self_attention(layer, c, torch.layer_norm(x, *n0))
                x = x + _cross_attention(layer, c, torch.layer_norm(x, *n1), mask)
                x = x + layer.ffn_out(layer.activation(layer.ffn_in(torch.layer_norm(x, *n2))))
            else:
                x = torch.layer_norm(x + _self_attention(layer, c, x), *n0)
                x = torch.layer_norm(x + _cross_attention(layer, c, x, mask), *n1)
                x = torch.layer_norm(x + layer.ffn_out(layer.activation(layer.ffn_in(x))), *n2)
        cache.length += 1
        return plan.final_norm(x)


def _self_attention(layer: _Layer, c: LayerCache, x: Tensor) -> Tensor:
    n, h, d_k, d_v = x.size(0), layer.h, layer.d_k, layer.d_v
    if layer.qkv is not None:  # int8: W^Q, W^K, W^V as one GEMM, the same products (inference._Int8Fused)
        q, k, v = layer.qkv(x).split((h * d_k, h * d_k, h * d_v), dim=-1)  # (N, 1, h*d) each
    else:
        q, k, v = layer.w_q(x), layer.w_k(x), layer.w_v(x)
    k = k.view(n, 1, h, d_k).transpose(1, 2)  # (N, h, 1, dk)
    v = v.view(n, 1, h, d_v).transpose(1, 2)
    held = held_dtype(q, True)  # bf16 attends over fp32 copies of its keys and values
    if held == torch.float32 and c.time_major and native.available():  # the buffers themselves, no views
        c.append(k.to(held), v.to(held), views=False)
        heads = native.self_attention(q.to(held), c.keys, c.values, n, c.length)  # (N, 1, h*dv)
        return layer.self_out(heads.to(q.dtype))
    k, v = c.append(k.to(held), v.to(held))  # (N, h, t+1, d): every position so far; a new one sees them all
    q = q.view(n, 1, h, d_k).transpose(1, 2)  # (N, h, 1, dk)
    heads = attention(q.to(held), k, v, None, False, True).to(q.dtype)
    return layer.self_out(heads.transpose(1, 2).reshape(n, 1, h * d_v))  # Concat(head_1..head_h) W^O


def _cross_attention(layer: _Layer, c: LayerCache, x: Tensor, mask: Tensor | None) -> Tensor:
    n = x.size(0)
    q = layer.cross_q(x)  # (N, 1, h*dk)
    if native.reads_keys(c.cross_k) and native.available():
        return layer.cross_out(native.cross_attention(q.float(), c.cross_k, c.cross_v, mask).to(q.dtype))
    attn = layer.cross_attn
    mask = None if mask is None else mask[:, None, None, :]  # (B, 1, 1, S): Transformer._key_mask's
    q = q.view(n, 1, attn.h, attn.d_k).transpose(1, 2)  # (N, h, 1, dk)
    heads = c.attend(attn, q, None, mask, False)  # over the keys computed at the first step
    return layer.cross_out(heads.transpose(1, 2).reshape(n, 1, attn.h * attn.d_v))


# ---------------------------------------------------------------------------------------------------------
# What a step reads of the model, looked up once: nn.Module's attribute lookups cost a few microseconds each.


class _Layer(NamedTuple):
    self_attn: nn.Module
    cross_attn: nn.Module
    h: int
    d_k: int
    d_v: int
    qkv: Callable | None  # int8: W^Q, W^K, W^V stacked (inference._Int8Fused)
    w_q: Callable
    w_k: Callable
    w_v: Callable
    self_out: Callable
    cross_q: Callable
    cross_out: Callable
    ffn_in: Callable
    activation: Callable
    ffn_out: Callable
    norms: tuple  # three (normalized_shape, weight, bias, eps): torch.layer_norm's arguments after the input


class _Plan(NamedTuple):
    layers: list[_Layer]
    norm_first: bool
    embed: Callable  # (tokens (N, 1), position) -> (N, 1, D): Transformer.embed less its dropout (eval)
    final_norm: Callable


def _plan(model) -> _Plan:
    """The step's view of `model`, kept on it till a load_state_dict (which may replace packed weights)."""
    fused = model.fused_qkv or [None] * len(model.decoder.layers)
    layers = []
    for layer, qkv in zip(model.decoder.layers, fused):
        a, x, f = layer.self_attn, layer.cross_attn, layer.ffn
        norms = tuple((s.norm.normalized_shape, s.norm.weight, s.norm.bias, s.norm.eps) for s in layer.sublayers)
        layers.append(_Layer(a, x, a.h, a.d_k, a.d_v, qkv, *map(_projection, (a.w_q, a.w_k, a.w_v, a.w_o, x.w_q,
                                                                             x.w_o, f.w_1)),
                             f.activation, _projection(f.w_2), norms))
    plan = _Plan(layers, model.cfg.norm_first, _embedding(model), model.decoder.norm.forward)
    if "_step_plan_hook" not in model.__dict__:
        model._step_plan_hook = model.register_load_state_dict_post_hook(_forget_plan)
    model._step_plan = plan
    return plan


def _forget_plan(model, _) -> None:
    model.__dict__.pop("_step_plan", None)


def _projection(module: nn.Module) -> Callable:
    """module's forward with its weights bound: nn.Linear's F.linear, an int8 projection's operator on its packed
    weights; any other module's own forward."""
    if type(module) is nn.Linear:
        return functools.partial(F.linear, weight=module.weight, bias=module.bias)
    packed = getattr(getattr(module, "_packed_params", None), "_packed_params", None)
    if packed is not None and hasattr(type(module), "operator"):  # inference's Int8Linear
        op = type(module).operator
        return lambda x: op(x, packed, True)
    if isinstance(module, RowInt8Linear):  # aiayn's int8 kernel
        return functools.partial(native.int8_linear, weights=module.weights)
    return module.forward


def _embedding(model) -> Callable:
    table, scale, sinusoids = model.embedding.weight, model.embed_scale, model._buffers.get("sinusoids")
    if model.cfg.positional != "sinusoidal" or sinusoids is None:
        return model.embed

    def embed(tokens: Tensor, position: int) -> Tensor:
        if position >= sinusoids.size(0):
            return model.embed(tokens, position)
        return F.embedding(tokens, table) * scale + sinusoids[position: position + 1]

    return embed
