"""aiayn <-> HF transformers MarianMTModel: export a model to a folder `from_pretrained` loads, and import it back.

Marian is the paper's architecture (post-norm, sinusoidal positions, LayerNorm eps 1e-5, embeddings scaled by
sqrt(d_model) and shared by encoder, decoder and output layer). Two differences are absorbed here:

* Marian's sinusoids are laid out [sin | cos] (column i < D/2 holds the paper's column 2i, column D/2 + i its
  column 2i + 1) and are rebuilt on load, so they cannot be overwritten. Instead every d_model axis of every
  weight (the axes names.py marks "D") is permuted by P = [0, 2, ..., D-2, 1, 3, ..., D-1]: the Marian model
  computes the aiayn model's residual stream with its features reordered, and the same logits.
* Marian's defaults (gelu, unscaled embeddings, pad 58100, forced EOS 0) are all replaced in `marian_config`.

A model imported from OPUS-MT (marian.py) exports back with its swish and its output bias (final_logits_bias), and
its tokenizer's two SentencePiece models.

What Marian cannot represent is refused (`check_marian`): pre-norm, learned positions (Table 3 row E), and
h * d_k != d_model or h * d_v != d_model (Table 3 row B; CTranslate2 takes those, see ct2.py).

The folder also holds the tokenizer (source.spm = target.spm = the SentencePiece model, vocab.json = piece -> id,
so MarianTokenizer gives aiayn's ids), a README model card, and the aiayn config under the key "aiayn" of
config.json, which makes `import_hf` an exact round trip.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig
from aiayn.errors import CheckpointError, UserError
from aiayn.export.card import Provenance, fresh_folder, write_card
from aiayn.export.names import parameter_map
from aiayn.model import Transformer

# The paper's search (section 6.1) as HF generate() settings, as close as HF allows (README / docs/export.md):
# HF's length penalty is |Y|^alpha (aiayn's lp="power"), its length limit one number per batch.
GENERATION_DEFAULTS = dict(num_beams=4, length_penalty=0.6, early_stopping="never", max_length=256,
                           min_new_tokens=1, suppress_tokens=[PAD_ID, BOS_ID], forced_eos_token_id=EOS_ID)


def check_marian(cfg: ModelConfig) -> None:
    """Raise UserError naming every feature of `cfg` that MarianMTModel cannot represent."""
    problems = []
    if cfg.norm_first:
        problems.append("pre-norm layers (norm_first=True); Marian is post-norm")
    if cfg.positional != "sinusoidal":
        problems.append(f"{cfg.positional} positions (Table 3 row E); Marian has sinusoids only")
    if cfg.n_heads * cfg.d_k != cfg.d_model or cfg.n_heads * cfg.d_v != cfg.d_model:
        problems.append(f"h * d_k = {cfg.n_heads * cfg.d_k} and h * d_v = {cfg.n_heads * cfg.d_v} with d_model = "
                        f"{cfg.d_model} (Table 3 rows A/B); Marian's heads are d_model / h wide")
    if problems:
        raise UserError("MarianMTModel cannot represent this model: " + "; ".join(problems)
                        + ". Export it with --to ct2 instead (CTranslate2 takes every aiayn preset).")


def sinusoid_permutation(d_model: int) -> Tensor:
    """P with marian_features = aiayn_features[..., P]: the paper's interleaved sin/cos as Marian's [sin | cos]."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _permute_d(x: Tensor, axes: tuple[str, ...], perm: Tensor) -> Tensor:
    for dim, axis in enumerate(axes):
        if axis == "D":
            x = x.index_select(dim, perm)
    return x


def marian_config(cfg: ModelConfig):
    """The MarianConfig of the same architecture (aiayn's config kept under the extra key "aiayn")."""
    from transformers import MarianConfig

    check_marian(cfg)
    return MarianConfig(
        vocab_size=cfg.vocab_size, decoder_vocab_size=cfg.vocab_size, d_model=cfg.d_model,
        encoder_layers=cfg.n_enc_layers, decoder_layers=cfg.n_dec_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function=cfg.activation,
        max_position_embeddings=max(1024, cfg.max_positions),  # aiayn's sinusoids have no end; Marian's table does
        dropout=cfg.dropout, attention_dropout=0.0, activation_dropout=0.0,
        scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None, aiayn=cfg.to_dict(),
    )


def to_marian(model: Transformer):
    """A MarianMTModel (eval mode, fp32) computing the same function as `model`."""
    from transformers import GenerationConfig, MarianMTModel

    cfg = model.cfg
    hf = MarianMTModel(marian_config(cfg))
    perm = sinusoid_permutation(cfg.d_model)
    state = model.state_dict()
    hf_state = {name: _permute_d(state[p.aiayn].float(), p.axes, perm) for p in parameter_map(cfg) for name in p.hf}
    missing, unexpected = hf.load_state_dict(hf_state, strict=False)
    # Only Marian's own may be missing: the sinusoid tables (rebuilt from the config), the output bias (set here).
    if unexpected or any("embed_positions" not in k and k != "final_logits_bias" for k in missing):
        raise RuntimeError(f"names.py does not match MarianMTModel: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        hf.final_logits_bias.zero_()
        if model.output_bias is not None:
            hf.final_logits_bias[0] = model.output_bias.float()
    hf.generation_config = GenerationConfig(**{**hf.generation_config.to_dict(), **GENERATION_DEFAULTS})
    return hf.eval()


def from_marian(hf) -> Transformer:
    """The aiayn Transformer of a MarianMTModel of the paper's architecture (what `to_marian` makes)."""
    c = hf.config
    if c.activation_function not in ("relu", "swish") or not c.scale_embedding or not getattr(
            c, "share_encoder_decoder_embeddings", True):
        raise UserError("this Marian model is not the paper's architecture (it needs relu or swish, scaled and shared "
                        f"embeddings; it has {c.activation_function}, scale_embedding={c.scale_embedding}); "
                        "aiayn cannot import it")
    if (c.pad_token_id, c.eos_token_id, c.decoder_start_token_id) != (PAD_ID, EOS_ID, BOS_ID):
        ids = (c.pad_token_id, c.eos_token_id, c.decoder_start_token_id)
        raise UserError(f"this Marian model uses pad/eos/start ids {ids}; aiayn needs {(PAD_ID, EOS_ID, BOS_ID)}")
    aiayn_cfg = getattr(c, "aiayn", None) or {}
    if hf.final_logits_bias.abs().max() > 0 and not aiayn_cfg.get("output_bias"):
        raise UserError("this Marian model has a non-zero final_logits_bias, which aiayn's tied output layer lacks")
    if (c.encoder_attention_heads, c.encoder_ffn_dim) != (c.decoder_attention_heads, c.decoder_ffn_dim):
        raise UserError("this Marian model's encoder and decoder differ in heads or d_ff; aiayn's share them")
    if getattr(c, "aiayn", None):  # exported by aiayn: its exact config (label smoothing, max_positions, ...)
        cfg = ModelConfig.from_dict(c.aiayn)
    else:
        h = c.encoder_attention_heads
        cfg = ModelConfig(vocab_size=c.vocab_size, n_enc_layers=c.encoder_layers, n_dec_layers=c.decoder_layers,
                          d_model=c.d_model, d_ff=c.encoder_ffn_dim, n_heads=h, d_k=c.d_model // h,
                          d_v=c.d_model // h, dropout=c.dropout, activation=c.activation_function)
    hf_state = hf.state_dict()
    params = parameter_map(cfg)
    for p in params:  # one aiayn tensor may be several tied Marian ones; they must be equal
        if any(not torch.equal(hf_state[name], hf_state[p.hf[0]]) for name in p.hf[1:]):
            raise UserError(f"this Marian model's {', '.join(p.hf)} differ; aiayn shares one embedding for all")
    model = Transformer(cfg)
    inverse = torch.argsort(sinusoid_permutation(cfg.d_model))
    state = {p.aiayn: _permute_d(hf_state[p.hf[0]], p.axes, inverse) for p in params}
    if cfg.output_bias:
        state["output_bias"] = hf_state["final_logits_bias"].reshape(-1)
    model.load_state_dict(state)
    return model.eval()


def spm_files(vocab) -> tuple[bytes, bytes]:
    """The SentencePiece models (source, target) of a vocabulary: its one model twice, or a MarianVocab's two."""
    if hasattr(vocab, "spm_bytes"):
        return vocab.spm_bytes
    model = Path(vocab.model_path).read_bytes()
    return model, model


def save_tokenizer(vocab, folder: Path, max_length: int = 1024) -> None:
    """MarianTokenizer files giving aiayn's ids: the SentencePiece model of each side (one for both but for an
    imported OPUS-MT model's MarianVocab) and the pieces in id order."""
    from transformers import MarianTokenizer

    source, target = spm_files(vocab)
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    pieces = {vocab.piece(i): i for i in range(len(vocab))}
    (folder / "vocab.json").write_text(json.dumps(pieces, ensure_ascii=False, indent=1), encoding="utf-8")
    tok = MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"),
                          unk_token=vocab.piece(UNK_ID), eos_token=vocab.piece(EOS_ID), pad_token=vocab.piece(PAD_ID),
                          model_max_length=max_length)
    tok.save_pretrained(folder)


_USAGE = """```python
from transformers import MarianMTModel, MarianTokenizer

tok = MarianTokenizer.from_pretrained("{path}")
model = MarianMTModel.from_pretrained("{path}")
batch = tok(["A man is riding a bike."], return_tensors="pt", padding=True)
out = model.generate(**batch)  # beam 4, alpha 0.6 (generation_config.json)
print(tok.batch_decode(out, skip_special_tokens=True))
```"""

_NOTES = """* Length penalty: HF divides by |Y|^alpha (aiayn's `--lp power`), the paper by ((5 + |Y|) / 6)^alpha
  (aiayn's default `--lp gnmt`). |Y| counts the EOS in both. With `--lp power` aiayn and HF give the same beams.
* Length limit: aiayn allows int(a * source tokens + b) words per sentence (default source + 50); HF one
  `max_length` per call (256 here, decoder start included). EOS is forced at the limit in both, but HF scores the
  forced EOS as log 1 where aiayn adds its log-prob: the two can rank hypotheses that reach the limit differently.
* `early_stopping="never"` makes HF's beam search stop as aiayn's does: only when no live hypothesis can still win.
* PAD and BOS are never generated (`suppress_tokens`), EOS is banned before the first word (`min_new_tokens=1`),
  as in aiayn; HF applies both after the log-softmax, as aiayn does, so scores agree.
* MarianTokenizer in transformers >= 5 applies no punctuation normalization (its `normalize` is not called), as
  aiayn; older versions with sacremoses installed normalize punctuation, which can change a few ids."""


def export_hf(model: Transformer, vocab, out: Path, prov: Provenance | None = None) -> Path:
    """Write `out`: an HF folder (weights, config, generation config, tokenizer, README). Returns `out`."""
    hf = to_marian(model)  # refuses what Marian cannot hold before anything is written
    with fresh_folder(out) as tmp:
        hf.save_pretrained(tmp)
        save_tokenizer(vocab, tmp, hf.config.max_position_embeddings)
        write_card(tmp, model.cfg, prov or Provenance(), "hf", _USAGE.format(path=Path(out).name), _NOTES)
    return Path(out)


def import_hf(folder: Path):
    """(aiayn Transformer, Vocab) from an HF Marian folder of the paper's architecture with aiayn's special ids."""
    from transformers import MarianMTModel

    from aiayn.data import Vocab

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} is not an HF model folder (no config.json)")
    spm, target_spm = folder / "source.spm", folder / "target.spm"
    if not spm.is_file() or not target_spm.is_file() or target_spm.read_bytes() != spm.read_bytes():
        raise UserError(f"{folder} needs one SentencePiece model for both sides (source.spm = target.spm)")
    vocab = Vocab(spm)  # refuses other special ids
    pieces = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    if any(vocab.piece(i) != p for p, i in pieces.items()) or len(pieces) != len(vocab):
        raise UserError(f"{folder}/vocab.json does not give source.spm's SentencePiece ids; aiayn needs them equal")
    return from_marian(MarianMTModel.from_pretrained(folder).float()), vocab
