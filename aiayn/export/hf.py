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
so MarianTokenizer gives aiayn's ids; tokenizer_config.json's source_lang/target_lang = the language pair, where HF's
Marian converter writes it), a README model card, and the aiayn config under the key "aiayn" of config.json, which
makes `import_hf` an exact round trip.

Reading a Marian folder back (here for aiayn's exports, in marian.py for OPUS-MT's) needs no transformers: the
weights are read as files (`read_weights`: safetensors, or torch.load(weights_only=True), which never runs pickled
code) and every tensor's name and shape is checked against config.json (`check_weights`) before a model is built, so
a config of another model is refused instead of a layer being dropped or filled with random weights.
"""

from __future__ import annotations

import json
import re
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
    return from_marian_state(hf.config.to_dict(), hf.state_dict(), "this MarianMTModel")


def from_marian_state(config: dict, state: dict[str, Tensor], where: str,
                      config_path: Path | str = "config.json") -> Transformer:
    """The aiayn Transformer of a MarianMTModel's config.json (as a dict, read from `config_path`) and state dict (read
    from `where`), of the paper's architecture with aiayn's special ids; refused with one line naming the file."""
    c = config
    check_marian_config(c, config_path)
    if c.get("activation_function", "gelu") not in ("relu", "swish") or not c.get("scale_embedding", False) or not \
            c.get("share_encoder_decoder_embeddings", True):
        raise UserError("this Marian model is not the paper's architecture (it needs relu or swish, scaled and shared "
                        f"embeddings; it has {c.get('activation_function', 'gelu')}, scale_embedding="
                        f"{c.get('scale_embedding', False)}); aiayn cannot import it")
    ids = (c.get("pad_token_id"), c.get("eos_token_id"), c.get("decoder_start_token_id"))
    if ids != (PAD_ID, EOS_ID, BOS_ID):
        raise UserError(f"this Marian model uses pad/eos/start ids {ids}; aiayn needs {(PAD_ID, EOS_ID, BOS_ID)}")
    cfg = _recorded_config(c, config_path)
    check_weights(c, state, where)
    bias = state.get("final_logits_bias", torch.zeros(1, c["vocab_size"])).float().reshape(-1)
    if bias.abs().max() > 0 and not cfg.output_bias:
        raise UserError("this Marian model has a non-zero final_logits_bias, which aiayn's tied output layer lacks")
    inverse = torch.argsort(sinusoid_permutation(cfg.d_model))
    model_state = {p.aiayn: _permute_d(tied_tensor(state, p.hf), p.axes, inverse) for p in parameter_map(cfg)}
    if cfg.output_bias:
        model_state["output_bias"] = bias
    model = Transformer(cfg)
    model.load_state_dict(model_state)
    return model.eval()


def _recorded_config(c: dict, path: Path | str) -> ModelConfig:
    """The ModelConfig of a Marian config.json: aiayn's own record (key "aiayn": label smoothing, max_positions, ...)
    where it has one, checked against the Marian fields that say what the weights are; else those fields."""
    marian = (c["vocab_size"], c["encoder_layers"], c["decoder_layers"], c["d_model"], c["encoder_ffn_dim"],
              c["encoder_attention_heads"])
    if not c.get("aiayn"):
        h = c["encoder_attention_heads"]
        return _model_config(path, dict(vocab_size=c["vocab_size"], n_enc_layers=c["encoder_layers"],
                                  n_dec_layers=c["decoder_layers"], d_model=c["d_model"], d_ff=c["encoder_ffn_dim"],
                                  n_heads=h, d_k=c["d_model"] // h, d_v=c["d_model"] // h,
                                  dropout=c.get("dropout", 0.1), activation=c["activation_function"]))
    cfg = _model_config(path, c["aiayn"])
    recorded = (cfg.vocab_size, cfg.n_enc_layers, cfg.n_dec_layers, cfg.d_model, cfg.d_ff, cfg.n_heads)
    if recorded != marian:
        raise UserError(f"{path}: vocab_size, encoder_layers, decoder_layers, d_model, *_ffn_dim, "
                        f"*_attention_heads {marian} disagree with its aiayn record {recorded}; was config.json "
                        "edited?")
    return cfg


def _model_config(path: Path | str, fields: object) -> ModelConfig:
    try:
        return ModelConfig.from_dict(fields)
    except (UserError, TypeError, ValueError, AttributeError) as e:
        raise UserError(f"{path} does not describe a model aiayn can hold: {e}") from None


def tied_tensor(state: dict[str, Tensor], names: tuple[str, ...]) -> Tensor:
    """The one tensor of tied names in fp32 (a file keeps one of them, or all; all kept must be equal)."""
    tied = [state[name] for name in names if name in state]
    if any(not torch.equal(t, tied[0]) for t in tied[1:]):
        raise UserError(f"this Marian model's {', '.join(names)} differ; aiayn shares one embedding for all")
    return tied[0].float()


# What a MarianConfig must give, as positive integers, for aiayn to know every tensor's shape.
SHAPE_FIELDS = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim")


def check_marian_config(config: dict, path: Path | str) -> None:
    """Refuse, naming `path`, a config.json that is not a MarianMTModel's, or whose sizes aiayn cannot hold."""
    c = config
    if c.get("model_type") != "marian":
        raise UserError(f"{path}: model_type {c.get('model_type')!r} is not 'marian'; aiayn imports MarianMTModel "
                        "folders only (OPUS-MT's, or aiayn's own --to hf exports)")
    missing = [k for k in SHAPE_FIELDS if not isinstance(c.get(k), int) or isinstance(c.get(k), bool) or c[k] < 1]
    if missing:
        raise UserError(f"{path} lacks {', '.join(missing)} (positive integers every MarianMTModel config has)")
    if (c["encoder_attention_heads"], c["encoder_ffn_dim"]) != (c["decoder_attention_heads"], c["decoder_ffn_dim"]):
        raise UserError(f"{path}: an encoder and decoder of different heads or d_ff (aiayn's share them)")
    if c["d_model"] % c["encoder_attention_heads"] or c["d_model"] % 2:
        raise UserError(f"{path}: d_model {c['d_model']} is odd or not divisible by the {c['encoder_attention_heads']} "
                        "heads")


def marian_tensors(config: dict) -> tuple[list[tuple[tuple[str, ...], tuple[int, ...]]], dict[str, tuple[int, ...]]]:
    """([(tied names, shape)] of every tensor the MarianMTModel of a checked config.json holds, {name: shape} of the
    ones a file may leave out: the sinusoid tables, rebuilt on load, and the output bias)."""
    c = config
    h = c["encoder_attention_heads"]
    names = ModelConfig(vocab_size=c["vocab_size"], n_enc_layers=c["encoder_layers"], n_dec_layers=c["decoder_layers"],
                        d_model=c["d_model"], d_ff=c["encoder_ffn_dim"], n_heads=h, d_k=c["d_model"] // h,
                        d_v=c["d_model"] // h)
    size = {"D": c["d_model"], "qk": c["d_model"], "v": c["d_model"], "F": c["encoder_ffn_dim"], "V": c["vocab_size"]}
    table = (c.get("max_position_embeddings", 512), c["d_model"])
    optional = {"final_logits_bias": (1, c["vocab_size"]), "model.encoder.embed_positions.weight": table,
                "model.decoder.embed_positions.weight": table}
    return [(p.hf, tuple(size[a] for a in p.axes)) for p in parameter_map(names)], optional


def check_weights(config: dict, state: dict[str, Tensor], where: str) -> None:
    """Refuse, naming `where`, weights that are not the MarianMTModel a checked config.json describes: a layer more or
    less, a tensor missing or unknown, a shape other than the config's, a tensor that is not floating point."""
    for side in ("encoder", "decoder"):
        layers = {int(m[1]) for name in state if (m := re.match(rf"model\.{side}\.layers\.(\d+)\.", name))}
        held = max(layers, default=-1) + 1
        if held != config[f"{side}_layers"]:
            raise UserError(f"{where} holds {held} {side} layers where config.json says {side}_layers="
                            f"{config[f'{side}_layers']}: the config is not this model's")
    tensors, optional = marian_tensors(config)
    shapes = {name: shape for names, shape in tensors for name in names} | optional
    unknown = sorted(set(state) - set(shapes))
    if unknown:
        raise UserError(f"{where} holds tensors a MarianMTModel has not: {', '.join(unknown[:3])}"
                        f"{f' and {len(unknown) - 3} more' if len(unknown) > 3 else ''}")
    absent = [names[0] for names, _ in tensors if not any(name in state for name in names)]
    if absent:
        raise UserError(f"{where} lacks {absent[0]}{f' and {len(absent) - 1} more' if len(absent) > 1 else ''}, "
                        "which the MarianMTModel of config.json has")
    c = config
    for name in sorted(state, key=list(shapes).index):  # the embedding first: it names d_model and vocab_size
        tensor = state[name]
        if tuple(tensor.shape) != shapes[name]:
            raise UserError(f"{where}: {name} is {_shape(tensor.shape)} where config.json (vocab_size "
                            f"{c['vocab_size']}, d_model {c['d_model']}, ffn_dim {c['encoder_ffn_dim']}) makes it "
                            f"{_shape(shapes[name])}: the config is not this model's")
        if not tensor.is_floating_point():
            raise UserError(f"{where}: {name} holds {tensor.dtype}, not floating-point weights")


def _shape(shape) -> str:
    return " x ".join(map(str, shape))


def read_weights(folder: Path) -> tuple[dict[str, Tensor], str]:
    """(the MarianMTModel state dict saved in `folder`, the file it came from): model.safetensors, its shards, or
    pytorch_model.bin, read without transformers (a user who only imports needs no HF install, and no second copy of
    the model is built). A damaged file is one error line naming it; no pickled code is ever run."""
    folder = Path(folder)
    if (folder / "model.safetensors").is_file():
        return _read_safetensors(folder / "model.safetensors"), str(folder / "model.safetensors")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"cannot read {index}: not a safetensors index ({type(e).__name__}: {e})") from None
        return {k: v for shard in shards for k, v in _read_safetensors(folder / shard).items()}, str(index)
    if (folder / "pytorch_model.bin").is_file():
        return _read_pickled(folder / "pytorch_model.bin"), str(folder / "pytorch_model.bin")
    raise UserError(f"{folder} holds no weights aiayn reads (model.safetensors, its shards, or pytorch_model.bin)")


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except Exception as e:  # safetensors' own error (truncated, empty, not safetensors), or OSError
        raise UserError(f"cannot read {path}: {_first_line(e)} (damaged or incomplete: download it again)") from None


def _read_pickled(path: Path) -> dict[str, Tensor]:
    """A pytorch_model.bin's tensors by torch.load(weights_only=True): an object other than tensors is refused, its
    code never run."""
    import warnings

    try:
        with warnings.catch_warnings():  # torch warns of pickle protocols it may not know: the error says enough
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # junk, a damaged zip, a truncated pickle, an object refused: torch raises many kinds
        found = re.search(r"GLOBAL ([\w.]+)", str(e))  # a class or function to import: what code in a pickle needs
        if found:
            raise UserError(f"{path} holds pickled objects other than tensors ({found[1]}), which aiayn never loads; "
                            "convert it to model.safetensors with tools you trust") from None
        reason = re.search(r"Unsupported operand \d+", str(e)) or re.search(r"WeightsUnpickler error: (.+)", str(e))
        raise UserError(f"cannot read {path}: not PyTorch weights, or damaged ({type(e).__name__}: "
                        f"{reason[reason.lastindex or 0] if reason else _first_line(e)})") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()):
        raise UserError(f"{path} holds a {type(state).__name__}, not a state dict of named tensors")
    return state


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def spm_files(vocab) -> tuple[bytes, bytes]:
    """The SentencePiece models (source, target) of a vocabulary: its one model twice, or a MarianVocab's two."""
    if hasattr(vocab, "spm_bytes"):
        return vocab.spm_bytes
    model = Path(vocab.model_path).read_bytes()
    return model, model


def save_tokenizer(vocab, folder: Path, max_length: int = 1024, languages: tuple[str, str] | None = None) -> None:
    """MarianTokenizer files giving aiayn's ids: the SentencePiece model of each side (one for both but for an
    imported OPUS-MT model's MarianVocab), the pieces in id order, and the language pair as HF's Marian converter
    records it (tokenizer_config.json's source_lang and target_lang; `aiayn import` reads them back)."""
    from transformers import MarianTokenizer

    source, target = spm_files(vocab)
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    pieces = {vocab.piece(i): i for i in range(len(vocab))}
    (folder / "vocab.json").write_text(json.dumps(pieces, ensure_ascii=False, indent=1), encoding="utf-8")
    tok = MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"),
                          unk_token=vocab.piece(UNK_ID), eos_token=vocab.piece(EOS_ID), pad_token=vocab.piece(PAD_ID),
                          model_max_length=max_length, source_lang=languages and languages[0],
                          target_lang=languages and languages[1])
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


def export_hf(model: Transformer, vocab, out: Path, prov: Provenance | None = None,
              languages: tuple[str, str] | None = None) -> Path:
    """Write `out`: an HF folder (weights, config, generation config, tokenizer with the language pair `languages`
    (source, target) where given, README). Returns `out`."""
    hf = to_marian(model)  # refuses what Marian cannot hold before anything is written
    with fresh_folder(out) as tmp:
        hf.save_pretrained(tmp)
        save_tokenizer(vocab, tmp, hf.config.max_position_embeddings, languages)
        write_card(tmp, model.cfg, prov or Provenance(), "hf", _USAGE.format(path=Path(out).name), _NOTES)
    return Path(out)


def import_hf(folder: Path):
    """(aiayn Transformer, Vocab) from an HF Marian folder of the paper's architecture with aiayn's special ids (what
    `export_hf` writes); read without transformers, every file checked before the model is built."""
    from aiayn.data import Vocab

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} is not an HF model folder (no config.json)")
    config = read_json(folder / "config.json")
    check_marian_config(config, folder / "config.json")
    spm, target_spm = folder / "source.spm", folder / "target.spm"
    if not spm.is_file() or not target_spm.is_file() or target_spm.read_bytes() != spm.read_bytes():
        raise UserError(f"{folder} needs one SentencePiece model for both sides (source.spm = target.spm)")
    check_sentencepiece(spm)
    vocab = Vocab(spm)  # refuses other special ids
    pieces = read_pieces(folder / "vocab.json", len(vocab))
    if any(vocab.piece(i) != p for p, i in pieces.items()):
        raise UserError(f"{folder}/vocab.json does not give source.spm's SentencePiece ids; aiayn needs them equal")
    return from_marian_state(config, *read_weights(folder), folder / "config.json"), vocab


def read_json(path: Path) -> dict:
    """A JSON object from `path`; one error line if it cannot be read or is not an object."""
    try:
        found = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    if not isinstance(found, dict):
        raise UserError(f"{path} holds {type(found).__name__}, not a JSON object")
    return found


def read_pieces(path: Path, size: int) -> dict[str, int]:
    """vocab.json's {piece: id}, refused with one line naming it unless its ids are exactly 0..size-1 (the model's
    embedding rows)."""
    pieces = read_json(path)
    ids = pieces.values()
    if not all(type(i) is int for i in ids) or sorted(ids) != list(range(size)):
        raise UserError(f"{path} does not give the ids 0..{size - 1} of the model's {size} embedding rows, each once")
    return pieces


def check_sentencepiece(path: Path) -> None:
    """Refuse, naming it, a file that is not a SentencePiece model (before anything is written from it)."""
    import sentencepiece

    try:
        sentencepiece.SentencePieceProcessor(model_proto=Path(path).read_bytes())
    except (OSError, RuntimeError) as e:
        raise UserError(f"{path} is not a SentencePiece model ({_first_line(e)})") from None
