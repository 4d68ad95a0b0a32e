"""aiayn -> CTranslate2: a model folder for `ctranslate2.Translator` (decoding through it: aiayn/decoding/ct2.py).

The spec is built with CTranslate2's Python spec API (`ctranslate2.specs`), not through its HF converter, so every
aiayn config exports: Table 3 rows A, B and E, and pre-norm, included.

    names.py rows (aiayn -> CT2 name)      -> `ct2_variables`: renamed, heads padded, Q/K/V fused
    the paper's sinusoids (section 3.5)    -> written out as position_encodings/encodings (CTranslate2's own are
                                              [sin | cos], another timescale, from position 1: not the paper's)
    learned positions (row E)              -> the learned table itself
    h * d_k != d_model (row B: d_k != d_v) -> one head width, max(d_k, d_v): the narrower heads padded with zero
                                              features, queries scaled by 1/sqrt(d_k) (`queries_scale`), which
                                              leaves softmax(Q K^T / sqrt(d_k)) V unchanged
    shared vocabulary                      -> the SentencePiece pieces in id order on both sides; vocab.model is
                                              copied into the folder so `translate_ct2` (decoding/ct2.py) can tokenize
    an imported OPUS-MT model (marian.py)  -> CTranslate2's swish, its output bias as the projection's bias
    the run's lexical shortlist            -> vmap.txt, CTranslate2's vocabulary map (use_vmap)

How `translate_ct2` maps aiayn's SearchConfig onto CTranslate2's options, and what cannot map: DECODING_NOTES in
aiayn/decoding/ct2.py (also in the README of every exported folder).
"""

from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from aiayn.config import BOS_ID, EOS_ID, UNK_ID, ModelConfig
from aiayn.data.vocab import MODEL_FILE
from aiayn.decoding.ct2 import AIAYN_FILE, DECODING_NOTES, MIN_POSITIONS, VMAP_FILE
from aiayn.decoding.shortlist import Shortlist, vmap_lines
from aiayn.errors import UsageError
from aiayn.export.card import Provenance, fresh_folder, write_card
from aiayn.export.names import POSITIONS, parameter_map
from aiayn.model import Transformer, sinusoidal_positions

QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16")
def head_dim(cfg: ModelConfig) -> int:
    """CTranslate2's one per-head width for queries, keys and values."""
    return max(cfg.d_k, cfg.d_v)


def _pad_heads(x: torch.Tensor, dim: int, heads: int, width: int, to: int) -> torch.Tensor:
    """Zero-pad each of the `heads` blocks of `width` along `dim` to `to`: (.., h*width, ..) -> (.., h*to, ..)."""
    if width == to:
        return x
    shape = list(x.shape)
    x = x.reshape(shape[:dim] + [heads, width] + shape[dim + 1:])
    pad = [0, 0] * (x.dim() - dim - 2) + [0, to - width]  # F.pad lists dims from the last one
    return torch.nn.functional.pad(x, pad).reshape(shape[:dim] + [heads * to] + shape[dim + 1:])


def ct2_variables(model: Transformer) -> dict[str, np.ndarray]:
    """Every CTranslate2 variable of `model` (fp32 numpy arrays), named as in names.py."""
    cfg = model.cfg
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    params = parameter_map(cfg)
    if cfg.positional == "sinusoidal":  # the paper's table, written out: aiayn computes it, CTranslate2 reads it
        state[POSITIONS.aiayn] = sinusoidal_positions(max(MIN_POSITIONS, cfg.max_positions), cfg.d_model)
        params.append(POSITIONS)
    widths = {"qk": cfg.d_k, "v": cfg.d_v}
    parts: dict[str, dict[int, torch.Tensor]] = defaultdict(dict)  # CT2 name -> {part index: tensor}
    for p in params:
        x = state[p.aiayn]
        for dim, axis in enumerate(p.axes):
            if axis in widths:
                x = _pad_heads(x, dim, cfg.n_heads, widths[axis], head_dim(cfg))
        for name in p.ct2:
            parts[name][p.part[0]] = x
    return {name: torch.cat([ps[i] for i in sorted(ps)]).contiguous().numpy() for name, ps in parts.items()}


def _set(spec, path: str, value) -> None:
    """spec.<path> = value, for a path such as "decoder/layer_3/attention/linear_1/weight", where a scope
    "name_3" means element 3 of the list attribute `name` (layer, linear, embeddings)."""
    *scopes, leaf = path.split("/")
    for scope in scopes:
        name, _, index = scope.rpartition("_")
        items = getattr(spec, name, None) if index.isdigit() else None
        spec = items[int(index)] if isinstance(items, list) else getattr(spec, scope)
    setattr(spec, leaf, value)


def ct2_spec(model: Transformer, vocab):
    """The CTranslate2 TransformerSpec of `model`, with the shared vocabulary registered on both sides."""
    from ctranslate2.specs import TransformerSpec, common_spec, transformer_spec

    cfg = model.cfg
    activation = {"relu": common_spec.Activation.RELU, "swish": common_spec.Activation.SWISH}[cfg.activation]
    sides = dict(num_heads=cfg.n_heads, pre_norm=cfg.norm_first, activation=activation, head_dim=head_dim(cfg))
    spec = TransformerSpec(transformer_spec.TransformerEncoderSpec(cfg.n_enc_layers, **sides),
                           # return_attention: the top layer's heads averaged, as aiayn aligns words (--print-alignment)
                           transformer_spec.TransformerDecoderSpec(cfg.n_dec_layers, alignment_heads=cfg.n_heads,
                                                                   **sides))
    for name, value in ct2_variables(model).items():
        _set(spec, name, value)
    bias = model.output_bias  # the paper's tied output has none; an imported OPUS-MT model's has one
    spec.decoder.projection.bias = np.zeros(cfg.vocab_size, dtype=np.float32) if bias is None else \
        bias.detach().float().cpu().numpy().copy()
    scale = np.float32(1 / math.sqrt(cfg.d_k))  # the paper's 1/sqrt(d_k), whatever the padded head width
    for layer in [*spec.encoder.layer, *spec.decoder.layer]:
        for attention in (layer.self_attention, getattr(layer, "attention", None)):
            if attention is not None:
                attention.queries_scale = scale
    pieces = [vocab.piece(i) for i in range(len(vocab))]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.add_source_eos = True  # aiayn's sources end with EOS
    spec.config.decoder_start_token = spec.config.bos_token = vocab.piece(BOS_ID)
    spec.config.eos_token, spec.config.unk_token = vocab.piece(EOS_ID), vocab.piece(UNK_ID)
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    return spec


_USAGE = """\
```python
import ctranslate2, sentencepiece as spm

sp = spm.SentencePieceProcessor(model_file="{path}/vocab.model")
translator = ctranslate2.Translator("{path}", device="cpu")
pieces = sp.encode(["A man is riding a bike."], out_type=str)
out = translator.translate_batch(pieces, beam_size=4, length_penalty=0.6, max_decoding_length=256,
                                 suppress_sequences=[["<pad>"], ["<s>"]])
print(sp.decode(out[0].hypotheses[0]))
```

Or through aiayn: `aiayn translate --engine ct2 --checkpoint {path} --lp power` (search flags map as below)."""

# An imported OPUS-MT model (marian.py): its two SentencePiece models, written beside vocab.model (aiayn's paired file)
_PAIRED_USAGE = """\
```python
import ctranslate2, sentencepiece as spm

source = spm.SentencePieceProcessor(model_file="{path}/source.spm")
target = spm.SentencePieceProcessor(model_file="{path}/target.spm")
translator = ctranslate2.Translator("{path}", device="cpu")
pieces = source.encode(["A man is riding a bike."], out_type=str)
out = translator.translate_batch(pieces, beam_size=4, length_penalty=0.6, max_decoding_length=256,
                                 suppress_sequences=[["<pad>"], ["<s>"]])
print(target.decode_pieces(out[0].hypotheses[0]).replace("\u2581", " ").strip())
```

Or through aiayn: `aiayn translate --engine ct2 --checkpoint {path} --lp power` (search flags map as below)."""


def export_ct2(model: Transformer, vocab, out: Path, quantization: str | None = None,
               prov: Provenance | None = None, shortlist: Shortlist | None = None,
               languages: tuple[str, str] | None = None, aligner: Path | None = None) -> Path:
    """Write `out`: a CTranslate2 folder (model.bin, config.json, shared vocabulary, vocab.model, aiayn.json,
    README.md), the weights quantized as `quantization` says (None: float32); with a `shortlist`
    (aiayn.decoding.shortlist), also its vocabulary map, vmap.txt (CTranslate2's use_vmap); with an `aligner` (the
    run's aligner.safetensors), a copy of it, which CTranslate2's engine aligns with (aiayn.decoding.aligner).
    aiayn.json records the model config, the quantization and the (source, target) `languages` (None: unknown),
    which `aiayn serve` reads. Returns `out`."""
    from ctranslate2.converters.converter import Converter

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UsageError(f"unknown quantization {quantization!r}; choose one of: {', '.join(QUANTIZATIONS)}")
    spec = ct2_spec(model, vocab)

    class _Given(Converter):  # CTranslate2's validate / de-duplicate / quantize / save steps, on our spec
        def _load(self):
            return spec

    with fresh_folder(out) as tmp:
        _Given().convert(str(tmp), quantization=quantization, force=True)
        shutil.copyfile(vocab.model_path, tmp / MODEL_FILE)
        paired = hasattr(vocab, "spm_bytes")  # an imported OPUS-MT model's MarianVocab
        if paired:
            for name, model_bytes in zip(("source.spm", "target.spm"), vocab.spm_bytes):
                (tmp / name).write_bytes(model_bytes)
        if shortlist is not None:  # where CTranslate2 looks for it (its converters' --vocab_mapping copies it there)
            (tmp / VMAP_FILE).write_text("\n".join(vmap_lines(shortlist, vocab)) + "\n", encoding="utf-8")
        if aligner is not None:
            shutil.copyfile(aligner, tmp / aligner.name)
        pair = {"source": languages[0], "target": languages[1]} if languages else None
        (tmp / AIAYN_FILE).write_text(json.dumps({"model": model.cfg.to_dict(), "quantization": quantization,
                                                  "languages": pair}, indent=2) + "\n")
        usage = (_PAIRED_USAGE if paired else _USAGE).format(path=Path(out).name)
        write_card(tmp, model.cfg, prov or Provenance(), "ct2", usage, DECODING_NOTES,
                   quantization or "float32")
    return Path(out)
