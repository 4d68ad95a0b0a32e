"""One table from aiayn's parameter names to HF Marian's and CTranslate2's (the exporters' single source of names).

Every tensor of `Transformer.state_dict()` has one `Param` row: its name in MarianMTModel's state dict, its
variable name(s) in a CTranslate2 `TransformerSpec`, and what each of its axes means. The exporters never spell a
layer name themselves: hf.py renames and permutes the axes marked "D" (Marian's sinusoid layout), ct2.py renames,
pads the axes marked "qk"/"v" to one head size and concatenates fused parts (CTranslate2's fused Q/K/V).

Axis codes:  D d_model   qk h*d_k   v h*d_v   F d_ff   V vocabulary   T positions

How the two targets group the paper's weights:
    aiayn (model.py)               HF Marian                     CTranslate2 spec
    embedding (shared, tied)       model.shared (+ 3 tied)       encoder/embeddings_0, decoder/embeddings,
                                                                 decoder/projection (stored once)
    self_attn.w_q, w_k, w_v        self_attn.q_proj, k, v        self_attention/linear_0 = [Q; K; V] fused
    self_attn.w_o                  self_attn.out_proj            self_attention/linear_1
    cross_attn.w_q                 encoder_attn.q_proj           attention/linear_0
    cross_attn.w_k, w_v            encoder_attn.k_proj, v        attention/linear_1 = [K; V] fused
    cross_attn.w_o                 encoder_attn.out_proj         attention/linear_2
    ffn.w_1, ffn.w_2               fc1, fc2                      ffn/linear_0, ffn/linear_1
    sublayers.j.norm (LN after     self_attn_layer_norm,         self_attention/layer_norm, attention/layer_norm,
      sub-layer j, post-norm)      encoder_attn_layer_norm,      ffn/layer_norm (gamma, beta)
                                   final_layer_norm
    encoder.norm, decoder.norm     - (Marian is post-norm only)  encoder/layer_norm, decoder/layer_norm
      (pre-norm only)
    positions (learned, row E)     - (Marian: sinusoids only)    {encoder,decoder}/position_encodings/encodings
"""

from __future__ import annotations

from dataclasses import dataclass

from aiayn.config import ModelConfig


@dataclass(frozen=True)
class Param:
    """One aiayn tensor and its names elsewhere (an empty tuple: the target has no such tensor)."""

    aiayn: str
    hf: tuple[str, ...]  # MarianMTModel state-dict names; the first is the one to read, the others are tied to it
    ct2: tuple[str, ...]  # CTranslate2 spec variables, all given this tensor (or its part, see `part`)
    axes: tuple[str, ...]  # meaning of each axis (codes above)
    part: tuple[int, int] = (0, 1)  # (i, n): rows i of n tensors concatenated along axis 0 into each ct2 variable


# One row per sub-module of a layer: (aiayn, HF Marian, CTranslate2, output axis, input axis, CT2 fused part).
# Input axis None marks a LayerNorm (weight/bias -> HF weight/bias, CT2 gamma/beta).
_Row = tuple[str, str | None, str, str, str | None, tuple[int, int]]
_ONE = (0, 1)
_SELF_ATTENTION: list[_Row] = [
    ("self_attn.w_q", "self_attn.q_proj", "self_attention/linear_0", "qk", "D", (0, 3)),
    ("self_attn.w_k", "self_attn.k_proj", "self_attention/linear_0", "qk", "D", (1, 3)),
    ("self_attn.w_v", "self_attn.v_proj", "self_attention/linear_0", "v", "D", (2, 3)),
    ("self_attn.w_o", "self_attn.out_proj", "self_attention/linear_1", "D", "v", _ONE),
]
_CROSS_ATTENTION: list[_Row] = [
    ("cross_attn.w_q", "encoder_attn.q_proj", "attention/linear_0", "qk", "D", _ONE),
    ("cross_attn.w_k", "encoder_attn.k_proj", "attention/linear_1", "qk", "D", (0, 2)),
    ("cross_attn.w_v", "encoder_attn.v_proj", "attention/linear_1", "v", "D", (1, 2)),
    ("cross_attn.w_o", "encoder_attn.out_proj", "attention/linear_2", "D", "v", _ONE),
]
_FEED_FORWARD: list[_Row] = [
    ("ffn.w_1", "fc1", "ffn/linear_0", "F", "D", _ONE),
    ("ffn.w_2", "fc2", "ffn/linear_1", "D", "F", _ONE),
]
# The LayerNorm of sub-layer j (post-norm: after its residual sum; pre-norm: before the sub-layer).
_SELF_NORM: _Row = ("sublayers.0.norm", "self_attn_layer_norm", "self_attention/layer_norm", "D", None, _ONE)
_CROSS_NORM: _Row = ("sublayers.1.norm", "encoder_attn_layer_norm", "attention/layer_norm", "D", None, _ONE)
ENCODER_LAYER: list[_Row] = [  # in the order of Transformer.state_dict()
    *_SELF_ATTENTION, *_FEED_FORWARD,
    _SELF_NORM, ("sublayers.1.norm", "final_layer_norm", "ffn/layer_norm", "D", None, _ONE),
]
DECODER_LAYER: list[_Row] = [
    *_SELF_ATTENTION, *_CROSS_ATTENTION, *_FEED_FORWARD,
    _SELF_NORM, _CROSS_NORM, ("sublayers.2.norm", "final_layer_norm", "ffn/layer_norm", "D", None, _ONE),
]


def _expand(row: _Row, aiayn: str, hf: str | None, ct2: str) -> list[Param]:
    """A Linear's weight and bias, or a LayerNorm's weight and bias, as Params under the given prefixes."""
    a, h, c, out_axis, in_axis, part = row
    hf_name = (lambda leaf: (f"{hf}{h}.{leaf}",)) if hf is not None and h is not None else (lambda leaf: ())
    if in_axis is None:  # LayerNorm
        return [Param(f"{aiayn}{a}.weight", hf_name("weight"), (f"{ct2}{c}/gamma",), (out_axis,)),
                Param(f"{aiayn}{a}.bias", hf_name("bias"), (f"{ct2}{c}/beta",), (out_axis,))]
    return [Param(f"{aiayn}{a}.weight", hf_name("weight"), (f"{ct2}{c}/weight",), (out_axis, in_axis), part),
            Param(f"{aiayn}{a}.bias", hf_name("bias"), (f"{ct2}{c}/bias",), (out_axis,), part)]


# Learned positions (Table 3 row E); ct2.py also writes the paper's sinusoids under these names (aiayn computes
# them, so they are no parameter of its own).
POSITIONS = Param("positions.weight", (),
                  ("encoder/position_encodings/encodings", "decoder/position_encodings/encodings"), ("T", "D"))


def parameter_map(cfg: ModelConfig) -> list[Param]:
    """Every tensor of `Transformer(cfg).state_dict()`, in that order, with its HF and CT2 names."""
    params = [Param("embedding.weight",
                    ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                     "lm_head.weight"),
                    ("encoder/embeddings_0/weight", "decoder/embeddings/weight", "decoder/projection/weight"),
                    ("V", "D"))]
    if cfg.positional == "learned":
        params.append(POSITIONS)
    for side, n_layers, rows in (("encoder", cfg.n_enc_layers, ENCODER_LAYER),
                                 ("decoder", cfg.n_dec_layers, DECODER_LAYER)):
        for i in range(n_layers):
            for row in rows:
                params += _expand(row, f"{side}.layers.{i}.", f"model.{side}.layers.{i}.", f"{side}/layer_{i}/")
        if cfg.norm_first:  # pre-norm: one LayerNorm after the stack
            params += _expand(("norm", None, "layer_norm", "D", None, _ONE), f"{side}.", None, f"{side}/")
    return params
