"""OPUS-MT -> aiayn: an HF MarianMTModel folder (Helsinki-NLP's ~1,000 opus-mt-* pairs) as an aiayn run directory.

`aiayn import --from hf FOLDER --out RUN` (aiayn/cli/import_.py) runs `import_run`. RUN then holds one checkpoint and
the vocabulary, and is what translate, serve, export, shortlist and `train --init-from` take (docs/import.md).

What an OPUS-MT folder holds, and where it goes:

    config.json (MarianConfig)       -> ModelConfig: layers, d_model, heads, d_ff, activation (swish or relu),
                                        output_bias=True; the rest of Marian is the paper's layout (post-norm,
                                        sinusoids, LayerNorm eps 1e-5, embeddings x sqrt(d_model), tied)
    model.safetensors (or shards, or  -> names.py's rows, every d_model axis permuted back from Marian's [sin | cos]
    pytorch_model.bin), read without    sinusoid layout (hf.py: sinusoid_permutation), rows renumbered (below);
    transformers (hf.py: `read_weights`, every name and shape checked against config.json first
    torch.load(weights_only=True))      (hf.py: `check_weights`)
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

Every file is read and checked before anything is written (`import_run`), and the run is written under a temporary
name and renamed into place whole: a model_type other than marian, weights that are not the model config.json
describes, a damaged weights file, a pickle of anything but tensors, a junk SentencePiece model are each one line
naming the file (hf.py: `check_marian_config`, `check_weights`, `read_weights`, `check_sentencepiece`).

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

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig
from aiayn.data.folder import IMPORT_RECORD
from aiayn.data.vocab import MODEL_FILE, SPECIAL_PIECES, MarianVocab
from aiayn.errors import CheckpointError, UserError
from aiayn.export.card import check_fresh, fresh_folder
from aiayn.export.hf import (
    _permute_d,
    check_marian_config,
    check_sentencepiece,
    check_weights,
    from_marian_state,
    import_hf,
    read_json,
    read_pieces,
    read_weights,
    sinusoid_permutation,
    tied_tensor,
)
from aiayn.export.names import parameter_map
from aiayn.files import write_json
from aiayn.languages import CODE
from aiayn.model import Transformer
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt

NEVER = -1e4  # the output bias of the new PAD row: exp(-1e4 - max logit) is 0 in float32, float16 and bfloat16
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu"}  # Marian's activation_function -> aiayn's
MAX_POSITIONS = 1 << 16  # ModelConfig's bound; OPUS-MT's tables have 512 rows
_IDS = ("pad_token_id", "eos_token_id", "decoder_start_token_id")
_PAIR_NAME = re.compile(r"(?:opus-mt-(?:tc-big-)?)?([a-z]{2,3})-([a-z]{2,3})")  # a folder named by its pair
_IGNORED_BY_MARIAN = {"normalize_before": False, "normalize_embedding": False, "add_final_layer_norm": False,
                      "static_position_embeddings": True, "add_bias_logits": False}


def is_opus_mt(config: dict) -> bool:
    """Whether an HF Marian config.json is OPUS-MT's kind (its decoder starts from <pad>), not an aiayn export."""
    return "aiayn" not in config and config.get("decoder_start_token_id") == config.get("pad_token_id")


def check_opus_mt(config: dict, path: Path | str = "config.json") -> None:
    """Raise UserError naming every feature of an OPUS-MT config.json (`path`, which `check_marian_config` passed)
    that an aiayn Transformer cannot hold."""
    c, problems = config, []
    missing = [k for k in _IDS if not isinstance(c.get(k), int) or isinstance(c.get(k), bool)]
    if missing:
        raise UserError(f"{path} lacks {', '.join(missing)} (integers every MarianMTModel config has)")
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
    if c.get("decoder_start_token_id") != c.get("pad_token_id"):
        problems.append("a decoder that starts from another token than <pad>")
    # Fields of older configs that today's MarianMTModel ignores (it is post-norm, with static sinusoids): OPUS-MT's
    # are all at these values; another value would mean weights that MarianMTModel itself does not compute with.
    for field, value in _IGNORED_BY_MARIAN.items():
        if c.get(field, value) != value:
            problems.append(f"{field}={json.dumps(c[field])} (MarianMTModel computes as if {json.dumps(value)})")
    if problems:
        raise UserError(f"{path}: aiayn cannot hold this Marian model: " + "; ".join(problems))


def renumbering(config: dict, pieces: dict[str, int], path: Path | str = "vocab.json"
                ) -> tuple[list[int | None], list[str]]:
    """(for each aiayn id, the Marian id whose row it takes (None: the new PAD row); the pieces in aiayn's id order),
    of vocab.json's pieces (`read_pieces` checked their ids)."""
    size = config["vocab_size"]
    if "<unk>" not in pieces:
        raise UserError(f"{path} has no <unk> piece")
    special = {UNK_ID: pieces["<unk>"], BOS_ID: config["pad_token_id"], EOS_ID: config["eos_token_id"]}
    clash = sorted(set(pieces) & set(SPECIAL_PIECES.values()) - {"<unk>", "</s>", "<pad>"})
    if clash or len(set(special.values())) < 3:
        raise UserError(f"{path}: its special pieces are not OPUS-MT's (<unk>, </s>, <pad>: {clash or special})")
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


def from_opus_mt(config: dict, hf_state: dict[str, torch.Tensor], rows: list[int | None], where: str) -> Transformer:
    """The aiayn Transformer computing what the MarianMTModel of `config` and `hf_state` (read from `where`) computes,
    its vocabulary rows renumbered (`rows`: for each aiayn id its Marian id, None for the new PAD row). Every tensor's
    name and shape is checked against the config first. hf_state is consumed."""
    check_weights(config, hf_state, where)
    cfg = model_config(config)
    inverse = torch.argsort(sinusoid_permutation(cfg.d_model))
    state = {}
    for p in parameter_map(cfg):  # each tensor is dropped as it is read: two copies of the model at most
        state[p.aiayn] = _permute_d(tied_tensor(hf_state, p.hf), p.axes, inverse)
        for name in p.hf:
            hf_state.pop(name, None)
    taken = torch.tensor([0 if r is None else r for r in rows])
    state["embedding.weight"] = state["embedding.weight"].index_select(0, taken)
    state["embedding.weight"][PAD_ID] = 0.0
    bias = hf_state.get("final_logits_bias", torch.zeros(config["vocab_size"]))
    state["output_bias"] = bias.float().reshape(-1).index_select(0, taken)
    state["output_bias"][PAD_ID] = NEVER
    model = Transformer(cfg)
    model.load_state_dict(state)
    return model.eval()


def read_opus_mt(folder: Path, config: dict) -> tuple[Transformer, list[str]]:
    """(the aiayn Transformer, its pieces in id order) of an OPUS-MT folder and its config.json; refused with one
    line where aiayn cannot hold it."""
    check_opus_mt(config, folder / "config.json")
    path = folder / "vocab.json"
    rows, pieces = renumbering(config, read_pieces(path, config["vocab_size"]), path)
    state, where = read_weights(folder)
    return from_opus_mt(config, state, rows, where), pieces


def folder_languages(folder: Path) -> dict[str, str] | None:
    """{"source", "target"} an OPUS-MT folder names: its tokenizer_config.json's source_lang and target_lang (HF's
    converter wrote the model name's last parts there: opus-mt-en-de -> "en", "de"), else the folder's own name
    (opus-mt-en-de, opus-mt-tc-big-en-pt, en-de); None where neither names two language codes (a group of languages
    such as ROMANCE is not one)."""
    config = Path(folder) / "tokenizer_config.json"
    found = read_json(config) if config.is_file() else {}
    named = [found.get("source_lang"), found.get("target_lang")]
    if all(isinstance(code, str) for code in named):  # "opus-mt-en" (the converter's split) -> "en"; "pt-BR" kept
        named = [code if CODE.fullmatch(code) else code.rsplit("-", 1)[-1] for code in named]
        if all(CODE.fullmatch(code) for code in named) and named[0] != named[1]:
            return {"source": named[0], "target": named[1]}
    by_name = _PAIR_NAME.fullmatch(Path(folder).resolve().name)
    return {"source": by_name[1], "target": by_name[2]} if by_name and by_name[1] != by_name[2] else None


def import_run(folder: Path, out: Path, languages: dict[str, str] | None = None) -> tuple[Path, ModelConfig]:
    """Write the run directory `out` (new or empty; all or nothing) of the HF Marian folder `folder`: an OPUS-MT
    model, or one `aiayn export --to hf` wrote, with its IMPORT_RECORD: where it came from and its languages
    (`languages`, else the ones the folder names, `folder_languages`). Returns (its checkpoint, its model config).
    Every file is read and checked (config, tokenizer, every tensor's name and shape) before anything is written."""
    folder = Path(folder)
    check_fresh(Path(out))
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} is not an HF model folder (no config.json)")
    config = read_json(folder / "config.json")
    check_marian_config(config, folder / "config.json")
    missing = [name for name in ("vocab.json", "source.spm", "target.spm") if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder} lacks {', '.join(missing)}: a MarianMTModel folder holds its tokenizer's files "
                        "(source.spm, target.spm, vocab.json) beside its weights")
    source, target = (folder / "source.spm").read_bytes(), (folder / "target.spm").read_bytes()
    for side in ("source.spm", "target.spm"):
        check_sentencepiece(folder / side)
    languages = languages or folder_languages(folder)
    vocab = None
    if is_opus_mt(config):
        model, pieces = read_opus_mt(folder, config)
    elif source == target:  # aiayn's own export, one SentencePiece model
        model, vocab = import_hf(folder)
    else:  # aiayn's export of an imported model: the pieces are already in aiayn's order
        ids = read_pieces(folder / "vocab.json", config["vocab_size"])
        if any(ids.get(piece) != i for i, piece in SPECIAL_PIECES.items()):
            raise UserError(f"{folder / 'vocab.json'} does not give aiayn's special pieces their ids {SPECIAL_PIECES}")
        model = from_marian_state(config, *read_weights(folder), folder / "config.json")
        pieces = sorted(ids, key=ids.get)
    with fresh_folder(out) as tmp:
        if vocab is None:
            MarianVocab.write(tmp / MODEL_FILE, source, target, pieces)
        else:
            vocab.copy_to(tmp)
        checkpoint = RunDir(tmp).step(0)
        ckpt.save_weights(checkpoint, model.state_dict(), model.cfg, 0)
        write_json(tmp / IMPORT_RECORD, {"from": str(folder.resolve()), "languages": languages})
    return RunDir(out).step(0), model.cfg
