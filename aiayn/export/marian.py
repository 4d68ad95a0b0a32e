"""OPUS-MT -> aiayn: an HF MarianMTModel folder (Helsinki-NLP's ~1,000 opus-mt-* pairs) as an aiayn run directory.

`aiayn import --from hf FOLDER --out RUN` (aiayn/cli/import_.py) runs `import_run`. RUN then holds one checkpoint and
the vocabulary, and is what translate, serve, export, shortlist and `train --init-from` take (docs/import.md).

What an OPUS-MT folder holds, and where it goes:

    config.json (MarianConfig)       -> ModelConfig: layers, d_model, heads, d_ff, activation (swish or relu),
                                        output_bias=True; the rest of Marian is the paper's layout (post-norm,
                                        sinusoids, LayerNorm eps 1e-5, embeddings x sqrt(d_model), tied)
    model.safetensors (or shards, or  -> names.py's rows, every d_model axis permuted back from Marian's [sin | cos]
    pytorch_model.bin), read without    sinusoid layout (hf.py: sinusoid_permutation), rows renumbered (below)
    transformers (`read_weights`)
    final_logits_bias (1, V)         -> Transformer.output_bias, renumbered likewise
    source.spm, target.spm,          -> RUN/vocab.model: a MarianVocab (aiayn.data.vocab), which tokenizes as
    vocab.json (one joint list)         MarianTokenizer: source text by source.spm, target text by target.spm

Special ids. OPUS-MT has </s> 0, <unk> 1 and <pad> last, and its decoder starts from <pad>; aiayn's ids are fixed
(PAD 0, UNK 1, BOS 2, EOS 3) in every search, loss and exporter. Making all of those read ids from the vocabulary
would touch a dozen modules; renumbering at import touches none, so the import renumbers: Marian's <pad> row becomes
aiayn's BOS (<s>, the decoder's start; neither engine ever generates it), </s> EOS, <unk> UNK, every other piece keeps
its order from id 4, and aiayn's PAD is one new row (V + 1 in all): a zero embedding (padding is never attended to)
and output bias NEVER, so that its probability is exactly 0 in float32 and the softmax over V + 1 rows is Marian's
over V. The renumbered model computes Marian's log-probs (tests/test_import_marian.py: HF generate's tokens and
scores).

Refused, with one line each (`check_opus_mt`): separate source and target vocabularies (untied embeddings), an
output layer not tied to the embedding, unscaled embeddings, an activation other than swish/relu, encoder and
decoder of different widths or heads, a decoder that starts from another token than <pad>, and an older config's
field that today's MarianMTModel ignores (normalize_before, ...) at another value than OPUS-MT's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from aiayn import checkpoint as ckpt
from aiayn import rundir
from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig
from aiayn.data.folder import IMPORT_RECORD
from aiayn.data.vocab import MODEL_FILE, SPECIAL_PIECES, MarianVocab
from aiayn.errors import CheckpointError, UserError
from aiayn.export.card import fresh_folder
from aiayn.export.hf import _permute_d, import_hf, sinusoid_permutation
from aiayn.export.names import parameter_map
from aiayn.extras import require
from aiayn.files import write_json
from aiayn.model import Transformer

NEVER = -1e4  # the output bias of the new PAD row: exp(-1e4 - max logit) is 0 in float32, float16 and bfloat16
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu"}  # Marian's activation_function -> aiayn's
MAX_POSITIONS = 1 << 16  # ModelConfig's bound; OPUS-MT's tables have 512 rows
_REQUIRED = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
             "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "pad_token_id", "eos_token_id",
             "decoder_start_token_id")
_CODE = re.compile(r"[a-z]{2,3}")  # one language's ISO 639 code, as OPUS-MT names its pairs (groups: ROMANCE, ...)
_PAIR_NAME = re.compile(r"(?:opus-mt-(?:tc-big-)?)?([a-z]{2,3})-([a-z]{2,3})")  # a folder named by its pair
_IGNORED_BY_MARIAN = {"normalize_before": False, "normalize_embedding": False, "add_final_layer_norm": False,
                      "static_position_embeddings": True, "add_bias_logits": False}


def read_json(path: Path) -> dict:
    """A JSON object from `path`; one error line if it cannot be read or is not an object."""
    try:
        found = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    if not isinstance(found, dict):
        raise UserError(f"{path} holds {type(found).__name__}, not a JSON object")
    return found


def is_opus_mt(config: dict) -> bool:
    """Whether an HF Marian config.json is OPUS-MT's kind (its decoder starts from <pad>), not an aiayn export."""
    return "aiayn" not in config and config.get("decoder_start_token_id") == config.get("pad_token_id")


def check_opus_mt(config: dict) -> None:
    """Raise UserError naming every feature of an OPUS-MT config.json that an aiayn Transformer cannot hold."""
    c, problems = config, []
    missing = [k for k in _REQUIRED if not isinstance(c.get(k), int) or isinstance(c.get(k), bool)]
    if missing:
        raise UserError(f"config.json lacks {', '.join(missing)} (integers every MarianMTModel config has); is it one?")
    if c.get("model_type") != "marian":
        problems.append(f"model_type is {c.get('model_type')!r}, not 'marian'")
    if not c.get("share_encoder_decoder_embeddings", True) or c.get("decoder_vocab_size") not in (
            None, c.get("vocab_size")):
        problems.append("separate source and target vocabularies (share_encoder_decoder_embeddings false): aiayn "
                        "shares one embedding")
    if not c.get("tie_word_embeddings", True):
        problems.append("an output layer not tied to the embedding (tie_word_embeddings false)")
    if not c.get("scale_embedding", False):
        problems.append("unscaled embeddings (scale_embedding false): aiayn multiplies them by sqrt(d_model)")
    if c.get("activation_function", "gelu") not in ACTIVATIONS:
        problems.append(f"activation {c.get('activation_function', 'gelu')!r} (aiayn has {', '.join(ACTIVATIONS)})")
    enc = (c.get("encoder_attention_heads"), c.get("encoder_ffn_dim"))
    if enc != (c.get("decoder_attention_heads"), c.get("decoder_ffn_dim")):
        problems.append("encoder and decoder of different heads or d_ff (aiayn's share them)")
    if c.get("d_model", 0) % max(1, c.get("encoder_attention_heads") or 1):
        problems.append("d_model not divisible by the heads")
    if c.get("decoder_start_token_id") != c.get("pad_token_id"):
        problems.append("a decoder that starts from another token than <pad>")
    # Fields of older configs that today's MarianMTModel ignores (it is post-norm, with static sinusoids): OPUS-MT's
    # are all at these values; another value would mean weights that MarianMTModel itself does not compute with.
    for field, value in _IGNORED_BY_MARIAN.items():
        if c.get(field, value) != value:
            problems.append(f"{field}={json.dumps(c[field])} (MarianMTModel computes as if {json.dumps(value)})")
    if problems:
        raise UserError("aiayn cannot hold this Marian model: " + "; ".join(problems))


def renumbering(config: dict, pieces: dict[str, int]) -> tuple[list[int | None], list[str]]:
    """(for each aiayn id, the Marian id whose row it takes (None: the new PAD row); the pieces in aiayn's id order)."""
    size = config["vocab_size"]
    if sorted(pieces.values()) != list(range(size)):
        raise UserError(f"vocab.json does not give the ids 0..{size - 1} of the model's {size} embedding rows")
    if "<unk>" not in pieces:
        raise UserError("vocab.json has no <unk> piece")
    special = {UNK_ID: pieces["<unk>"], BOS_ID: config["pad_token_id"], EOS_ID: config["eos_token_id"]}
    clash = sorted(set(pieces) & set(SPECIAL_PIECES.values()) - {"<unk>", "</s>", "<pad>"})
    if clash or len(set(special.values())) < 3:
        raise UserError(f"vocab.json's special pieces are not OPUS-MT's (<unk>, </s>, <pad>: {clash or special})")
    by_id = sorted(pieces, key=pieces.get)
    rest = [i for i in range(size) if i not in special.values()]
    rows = [None, special[UNK_ID], special[BOS_ID], special[EOS_ID], *rest]
    return rows, [SPECIAL_PIECES[i] for i in range(4)] + [by_id[i] for i in rest]


def model_config(config: dict) -> ModelConfig:
    """The aiayn ModelConfig of an OPUS-MT config.json (one vocabulary row more: aiayn's PAD)."""
    c = config
    h = c["encoder_attention_heads"]
    return ModelConfig(vocab_size=c["vocab_size"] + 1, n_enc_layers=c["encoder_layers"],
                       n_dec_layers=c["decoder_layers"], d_model=c["d_model"], d_ff=c["encoder_ffn_dim"], n_heads=h,
                       d_k=c["d_model"] // h, d_v=c["d_model"] // h, dropout=c.get("dropout", 0.1),
                       max_positions=min(c.get("max_position_embeddings", 512), MAX_POSITIONS),
                       activation=ACTIVATIONS[c["activation_function"]], output_bias=True)


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The MarianMTModel state dict saved in `folder` (model.safetensors, its shards, or pytorch_model.bin), read
    without transformers: a user who only imports needs no HF install, and no second copy of the model is built."""
    from safetensors.torch import load_file

    if (folder / "model.safetensors").is_file():
        return load_file(folder / "model.safetensors")
    if (folder / "model.safetensors.index.json").is_file():
        shards = sorted(set(read_json(folder / "model.safetensors.index.json")["weight_map"].values()))
        return {k: v for shard in shards for k, v in load_file(folder / shard).items()}
    if (folder / "pytorch_model.bin").is_file():
        return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise UserError(f"{folder} holds no weights aiayn reads (model.safetensors, its shards, or pytorch_model.bin)")


def from_opus_mt(config: dict, hf_state: dict[str, torch.Tensor], rows: list[int | None]) -> Transformer:
    """The aiayn Transformer computing what the MarianMTModel of `config` and `hf_state` computes, its vocabulary
    rows renumbered (`rows`: for each aiayn id its Marian id, None for the new PAD row). hf_state is consumed."""
    cfg = model_config(config)
    inverse = torch.argsort(sinusoid_permutation(cfg.d_model))
    state = {}
    for p in parameter_map(cfg):
        # a file keeps one of tied tensors, or all; each is dropped as it is read (two copies of the model at most)
        tied = [hf_state.pop(name) for name in p.hf if name in hf_state]
        if not tied:
            raise UserError(f"the weights lack {p.hf[0]}; is this a MarianMTModel of the config's shape?")
        if any(not torch.equal(t, tied[0]) for t in tied[1:]):
            raise UserError(f"this Marian model's {', '.join(p.hf)} differ; aiayn shares one embedding for all")
        state[p.aiayn] = _permute_d(tied[0].float(), p.axes, inverse)
    taken = torch.tensor([0 if r is None else r for r in rows])
    state["embedding.weight"] = state["embedding.weight"].index_select(0, taken)
    state["embedding.weight"][PAD_ID] = 0.0
    bias = hf_state.get("final_logits_bias", torch.zeros(config["vocab_size"]))
    state["output_bias"] = bias.float().reshape(-1).index_select(0, taken)
    state["output_bias"][PAD_ID] = NEVER
    model = Transformer(cfg)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # a tensor of another shape than the config says
        raise UserError(f"the weights do not fit the model config.json describes: {str(e).splitlines()[-1]}") from None
    return model.eval()


def read_opus_mt(folder: Path) -> tuple[Transformer, list[str]]:
    """(the aiayn Transformer, its pieces in id order) of an OPUS-MT folder; refused with one line where aiayn cannot
    hold it."""
    config = read_json(folder / "config.json")
    check_opus_mt(config)
    rows, pieces = renumbering(config, read_json(folder / "vocab.json"))
    return from_opus_mt(config, read_weights(folder), rows), pieces


def folder_languages(folder: Path) -> dict[str, str] | None:
    """{"source", "target"} an OPUS-MT folder names: its tokenizer_config.json's source_lang and target_lang (HF's
    converter wrote the model name's last parts there: opus-mt-en-de -> "en", "de"), else the folder's own name
    (opus-mt-en-de, opus-mt-tc-big-en-pt, en-de); None where neither names two language codes (a group of languages
    such as ROMANCE is not one)."""
    config = Path(folder) / "tokenizer_config.json"
    found = read_json(config) if config.is_file() else {}
    named = [found.get("source_lang"), found.get("target_lang")]
    if all(isinstance(code, str) for code in named):
        named = [named[0].rsplit("-", 1)[-1], named[1]]  # "opus-mt-en" (the converter's split) -> "en"
        if all(_CODE.fullmatch(code) for code in named) and named[0] != named[1]:
            return {"source": named[0], "target": named[1]}
    by_name = _PAIR_NAME.fullmatch(Path(folder).resolve().name)
    return {"source": by_name[1], "target": by_name[2]} if by_name and by_name[1] != by_name[2] else None


def import_run(folder: Path, out: Path, languages: dict[str, str] | None = None) -> tuple[Path, ModelConfig]:
    """Write the run directory `out` (new or empty; all or nothing) of the HF Marian folder `folder`: an OPUS-MT
    model, or one `aiayn export --to hf` wrote, with its IMPORT_RECORD: where it came from and its languages
    (`languages`, else the ones the folder names, `folder_languages`). Returns (its checkpoint, its model config)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} is not an HF model folder (no config.json)")
    missing = [name for name in ("vocab.json", "source.spm", "target.spm") if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder} lacks {', '.join(missing)}: a MarianMTModel folder holds its tokenizer's files "
                        "(source.spm, target.spm, vocab.json) beside its weights")
    config = read_json(folder / "config.json")
    with fresh_folder(out) as tmp:
        if is_opus_mt(config):
            model, pieces = read_opus_mt(folder)
            MarianVocab.write(tmp / MODEL_FILE, (folder / "source.spm").read_bytes(),
                              (folder / "target.spm").read_bytes(), pieces)
        elif (folder / "source.spm").read_bytes() == (folder / "target.spm").read_bytes():
            require("aiayn import of an aiayn HF export", "export", ("transformers",))
            model, vocab = import_hf(folder)  # aiayn's own export, one SentencePiece model
            vocab.copy_to(tmp)
        else:  # aiayn's export of an imported model: the pieces are already in aiayn's order
            require("aiayn import of an aiayn HF export", "export", ("transformers",))
            from transformers import MarianMTModel

            from aiayn.export.hf import from_marian

            ids = read_json(folder / "vocab.json")
            MarianVocab.write(tmp / MODEL_FILE, (folder / "source.spm").read_bytes(),
                              (folder / "target.spm").read_bytes(), sorted(ids, key=ids.get))
            model = from_marian(MarianMTModel.from_pretrained(folder).float())
        checkpoint = rundir.step_checkpoint_path(tmp, 0)
        ckpt.save_weights(checkpoint, model.state_dict(), model.cfg, 0)
        write_json(tmp / IMPORT_RECORD, {"from": str(folder.resolve()),
                                         "languages": languages or folder_languages(folder)})
    return rundir.step_checkpoint_path(out, 0), model.cfg
