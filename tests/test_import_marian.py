"""aiayn import: an OPUS-MT MarianMTModel folder becomes an aiayn run that computes what HF transformers computes.

No OPUS-MT model can be downloaded here, so each test builds one as Helsinki-NLP's are built, at a small size with
random weights: two SentencePiece models trained on real text (Multi30k English for the source, German for the
target; unigram, as Marian's spm_train makes them), one joint vocab.json as OPUS-MT's (</s> 0, <unk> 1, the source
pieces then the target ones, <pad> last), and a MarianConfig carrying each published variant's fields (VARIANTS).
HF `generate` on the folder, loaded as a user loads it, is the independent implementation: aiayn's greedy and beam-4
tokens (and beam scores) on real sentences must be its own.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import torch
from helpers import SHARED_DATA

from aiayn.cli import main
from aiayn.config import EOS_ID, PAD_ID
from aiayn.data.folder import run_languages
from aiayn.data.vocab import MarianVocab, Vocab
from aiayn.decoding.search import SearchConfig, beam_search, greedy_search
from aiayn.errors import UserError

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")
MULTI30K = SHARED_DATA / "multi30k"
pytestmark = pytest.mark.skipif(not (MULTI30K / "train.en").is_file(), reason="needs ../shared/data/multi30k")

from aiayn.export.marian import NEVER, import_run  # noqa: E402
from aiayn.rundir import load_for_inference  # noqa: E402

# The published OPUS-MT configurations (config.json on the HF hub), and the small sizes built here. Fields every
# variant shares: post-norm, static sinusoid positions, scale_embedding true, share_encoder_decoder_embeddings and
# tie_word_embeddings true, eos 0, pad = decoder start = last id, a final_logits_bias, max_position_embeddings 512,
# dropout 0.1, attention and activation dropout 0, and the fields older config.json files carry that today's
# MarianMTModel ignores: normalize_before, normalize_embedding, add_final_layer_norm false, static_position_embeddings
# true.
VARIANTS = {
    # opus-mt-* (the ~1,000 original pairs, e.g. opus-mt-en-de): 6+6 layers, d_model 512, 8 heads, d_ff 2048, swish.
    "opus-mt": dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="swish"),
    # opus-mt-tc-big-* (Tatoeba Challenge big): 6+6 layers, d_model 1024, 16 heads, d_ff 4096, relu.
    "tc-big": dict(d_model=48, encoder_layers=2, decoder_layers=2, encoder_attention_heads=6,
                   decoder_attention_heads=6, encoder_ffn_dim=96, decoder_ffn_dim=96, activation_function="relu"),
    # Encoder and decoder of different depths (Marian's students are built so; aiayn holds any pair of depths).
    "deep-encoder": dict(d_model=32, encoder_layers=3, decoder_layers=1, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                         activation_function="swish"),
}
LIMIT = 40  # word limit of both engines; outputs that reach it are compared as far as both rank them alike
# Added to EOS's output bias, per variant: a random model otherwise never stops (it loops); with these some lines stop
# at once, some later, some never (tokens still compared to the limit). Chosen once by looking at aiayn's lengths.
EOS_BOOST = {"opus-mt": 1.5, "tc-big": 6.0, "deep-encoder": 3.0}


def train_spm(path, size: int) -> bytes:
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(path.read_text(encoding="utf-8").splitlines()[:3000]),
                                   model_writer=out, vocab_size=size, model_type="unigram", minloglevel=2)
    return out.getvalue()


@pytest.fixture(scope="module")
def spm_models() -> tuple[bytes, bytes]:
    return train_spm(MULTI30K / "train.en", 300), train_spm(MULTI30K / "train.de", 320)


def opus_vocab(models: tuple[bytes, bytes]) -> list[str]:
    """OPUS-MT's joint vocabulary: </s>, <unk>, every normal piece of the source then the target model, <pad>."""
    pieces = ["</s>", "<unk>"]
    for model in models:
        sp = spm.SentencePieceProcessor(model_proto=model)
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    return [*dict.fromkeys(pieces), "<pad>"]


def opus_folder(folder, models, variant: str, seed: int = 0, **overrides):
    """An OPUS-MT folder: tokenizer files, config of `variant`, random weights (a random <pad> row too: aiayn's BOS
    takes it), saved by save_pretrained."""
    folder.mkdir(parents=True)
    (folder / "source.spm").write_bytes(models[0])
    (folder / "target.spm").write_bytes(models[1])
    pieces = opus_vocab(models)
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}), encoding="utf-8")
    v = len(pieces)
    config = transformers.MarianConfig(
        vocab_size=v, decoder_vocab_size=v, max_position_embeddings=512, scale_embedding=True,
        share_encoder_decoder_embeddings=True, pad_token_id=v - 1, eos_token_id=0, decoder_start_token_id=v - 1,
        forced_eos_token_id=0, dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        # the fields of older config.json files that today's MarianMTModel ignores, at OPUS-MT's values
        normalize_before=False, normalize_embedding=False, add_final_layer_norm=False, static_position_embeddings=True,
        **{**VARIANTS[variant], **overrides})
    torch.manual_seed(seed)
    hf = transformers.MarianMTModel(config)
    with torch.no_grad():  # wide random weights: the logits of different tokens are far apart (no near-ties)
        for name, p in hf.named_parameters():
            if "layer_norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1))
        hf.final_logits_bias.copy_(torch.randn_like(hf.final_logits_bias))
        hf.final_logits_bias[0, 0] += EOS_BOOST[variant]
    hf.save_pretrained(folder)
    transformers.MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"),
                                 str(folder / "vocab.json")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return (MULTI30K / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:32]


@pytest.fixture(scope="module", params=list(VARIANTS))
def imported(request, spm_models, tmp_path_factory):
    """(variant, OPUS-MT folder, the aiayn run imported from it)."""
    root = tmp_path_factory.mktemp(request.param)
    folder = opus_folder(root / "opus", spm_models, request.param)
    import_run(folder, root / "run")
    return request.param, folder, root / "run"


def padded(rows: list[list[int]], pad: int) -> torch.Tensor:
    x = torch.full((len(rows), max(map(len, rows))), pad)
    for i, r in enumerate(rows):
        x[i, : len(r)] = torch.tensor(r)
    return x


def test_import_writes_a_run_with_the_variant_config(imported):
    variant, folder, run = imported
    model, vocab, cfg = load_for_inference(run)
    spec = VARIANTS[variant]
    assert isinstance(vocab, MarianVocab) and len(vocab) == cfg.vocab_size == len(opus_vocab_of(folder)) + 1
    assert (cfg.d_model, cfg.n_enc_layers, cfg.n_dec_layers, cfg.n_heads, cfg.d_ff) == (
        spec["d_model"], spec["encoder_layers"], spec["decoder_layers"], spec["encoder_attention_heads"],
        spec["encoder_ffn_dim"])
    assert cfg.activation == {"swish": "swish", "relu": "relu"}[spec["activation_function"]] and cfg.output_bias
    assert [vocab.piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert model.output_bias[PAD_ID] == NEVER and not model.embedding.weight[PAD_ID].any()


def opus_vocab_of(folder) -> dict[str, int]:
    return json.loads((folder / "vocab.json").read_text(encoding="utf-8"))


def aiayn_ids(folder, vocab) -> dict[int, int]:
    """{Marian id: aiayn id}: the pieces by name, Marian's <pad> (its decoder start) as aiayn's <s>."""
    marian = opus_vocab_of(folder)
    return {marian["<pad>" if vocab.piece(i) == "<s>" else vocab.piece(i)]: i for i in range(1, len(vocab))}


def test_tokenizer_gives_marian_tokenizer_ids_renumbered(imported, lines):
    _, folder, run = imported
    vocab = Vocab.load(run)
    tok = transformers.MarianTokenizer.from_pretrained(folder)
    to_aiayn = aiayn_ids(folder, vocab)
    texts = lines[:8] + ["Ünïcödé ✓ and ~~ odd ~~ characters", ">>deu<< a target-language token first"]
    unknown = 0
    for text in texts:
        ids = vocab.encode(text)
        assert [to_aiayn[t] for t in tok(text).input_ids] == ids + [EOS_ID]
        unknown += vocab.unk_id in ids
    assert unknown  # the odd characters were unknown, as MarianTokenizer found
    assert vocab.encode_batch(texts) == [vocab.encode(text) for text in texts]  # what `aiayn prepare` calls
    targets = (MULTI30K / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[:8]
    for text in targets:  # target text: target.spm's pieces (what `aiayn prepare` writes for the targets)
        ids = vocab.target.encode(text)
        assert [to_aiayn[t] for t in tok(text_target=text).input_ids] == ids + [EOS_ID]
        assert vocab.decode(ids) == tok.decode(tok(text_target=text).input_ids, skip_special_tokens=True)
    assert vocab.target.encode_batch(targets) == [vocab.target.encode(text) for text in targets]


@pytest.mark.parametrize("beam", [1, 4])
def test_search_gives_hf_generate_tokens_and_scores(imported, lines, beam):
    _, folder, run = imported
    model, vocab, _ = load_for_inference(run)
    hf = transformers.MarianMTModel.from_pretrained(folder).eval()
    tok = transformers.MarianTokenizer.from_pretrained(folder)
    from_hf = aiayn_ids(folder, vocab)
    src = padded([vocab.encode(line) + [EOS_ID] for line in lines], PAD_ID)
    search = SearchConfig(beam=beam, lp="power", alpha=0.6, max_len_a=0.0, max_len_b=LIMIT)
    ours = [h[0] for h in (greedy_search if beam == 1 else beam_search)(model, src, search)]
    pad = hf.config.pad_token_id
    generated = hf.generate(**tok(lines, return_tensors="pt", padding=True), num_beams=beam, do_sample=False,
                            max_length=LIMIT + 1, min_new_tokens=1, length_penalty=0.6, early_stopping="never",
                            bad_words_ids=[[pad]], forced_eos_token_id=None, output_scores=True,
                            return_dict_in_generate=True)  # max_length: the start token + LIMIT words
    theirs = [[from_hf[t] for t in row.tolist()[1:] if t != pad] for row in generated.sequences]
    theirs = [t[: t.index(EOS_ID)] if EOS_ID in t else t for t in theirs]
    ended = [i for i, h in enumerate(ours) if len(h.tokens) < LIMIT]
    assert len({len(ours[i].tokens) for i in ended}) >= 2  # outputs of several lengths ended by themselves
    if beam == 1:  # greedy: the same words, to the limit
        assert theirs == [h.tokens for h in ours]
    else:  # beam: the same best hypothesis and the same normalized score where it ended before the limit
        assert [theirs[i] for i in ended] == [ours[i].tokens for i in ended]
        scores = generated.sequences_scores[ended]
        assert torch.allclose(scores, torch.tensor([ours[i].score for i in ended]), atol=1e-4)


def test_forced_decoding_scores_are_hf_log_probs(imported, lines):
    """aiayn score's log-probs of given targets (tokenized by target.spm) are HF's teacher-forced ones."""
    from aiayn.scoring import score_pairs

    _, folder, run = imported
    model, vocab, _ = load_for_inference(run)
    hf = transformers.MarianMTModel.from_pretrained(folder).eval()
    tok = transformers.MarianTokenizer.from_pretrained(folder)
    targets = (MULTI30K / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[:8]
    ours = score_pairs(model, vocab, lines[:8], targets)
    batch = tok(lines[:8], text_target=targets, return_tensors="pt", padding=True)
    labels = batch.pop("labels")
    with torch.no_grad():  # HF shifts the labels right behind its decoder start, <pad>
        lprobs = hf(**batch, labels=labels).logits.log_softmax(-1)
    real = labels.ne(hf.config.pad_token_id)
    theirs = (lprobs.gather(-1, labels.unsqueeze(-1)).squeeze(-1) * real).sum(-1)
    assert [s.tokens for s in ours] == real.sum(-1).tolist()
    assert torch.allclose(torch.tensor([s.total for s in ours]), theirs, atol=1e-3)


@pytest.mark.parametrize("precision, prepack", [("fp32", False), ("fp32", None), ("bf16", None), ("int8", None)])
def test_every_decoding_format_adds_the_output_bias(precision, prepack):
    """fp32, bf16 and int8 decoding copies (their own output projections) and a shortlist's rows add the bias."""
    from aiayn.config import ModelConfig
    from aiayn.decoding.inference import decoding_copy
    from aiayn.model import Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=60, activation="swish", output_bias=True)).eval()
    with torch.no_grad():
        model.output_bias.copy_(torch.randn(60) * 5)
    q = decoding_copy(model, precision, prepack)
    hidden = torch.randn(2, 3, 32)
    ids = torch.tensor([0, 3, 7, 8, 41, 59])
    tol = dict(rtol=0.05, atol=0.1) if precision != "fp32" else dict(rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        expect = model.output_logits(hidden)
        logits = q.output_logits(hidden.to(q.embedding.weight.dtype)).float()
        torch.testing.assert_close(logits, expect, **tol)
        rows = q.output_rows(ids)(hidden.to(q.embedding.weight.dtype)).float()
        torch.testing.assert_close(rows, expect[..., ids], **tol)


def test_refusals_are_one_line(spm_models, tmp_path):
    folder = opus_folder(tmp_path / "gelu", spm_models, "opus-mt", activation_function="gelu")
    with pytest.raises(UserError, match="activation 'gelu'"):
        import_run(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    config = json.loads((folder / "config.json").read_text())
    for field, value, reason in [("share_encoder_decoder_embeddings", False, "separate source and target"),
                                 ("scale_embedding", False, "unscaled embeddings"),
                                 ("tie_word_embeddings", False, "not tied"),
                                 ("decoder_ffn_dim", 128, "different heads or d_ff"),
                                 ("normalize_before", True, "normalize_before=true"),  # pre-norm: not MarianMTModel's
                                 ("static_position_embeddings", False, "static_position_embeddings=false")]:
        (folder / "config.json").write_text(json.dumps({**config, "activation_function": "swish", field: value}))
        with pytest.raises(UserError, match=reason):
            import_run(folder, tmp_path / "run")
    (folder / "config.json").write_text(json.dumps({**config, "activation_function": "swish", "d_model": None}))
    with pytest.raises(UserError, match="config.json lacks d_model"):
        import_run(folder, tmp_path / "run")
    (folder / "config.json").write_text("[]")
    with pytest.raises(UserError, match="not a JSON object"):
        import_run(folder, tmp_path / "run")
    (folder / "config.json").write_text(json.dumps({**config, "activation_function": "swish"}))
    (folder / "vocab.json").unlink()
    with pytest.raises(UserError, match="lacks vocab.json"):
        import_run(folder, tmp_path / "run")


class RunsCode:
    """Unpickled, this calls open(path, "w"): the kind of pickle that runs code when a .bin file is loaded."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def edit_config(**fields):
    def edit(folder):
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **fields}))
    return edit


def cut_weights(keep: float):
    def edit(folder):
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: int(len(data) * keep)])
    return edit


def bin_weights(write):
    def edit(folder):
        (folder / "model.safetensors").unlink()
        write(folder / "pytorch_model.bin")
    return edit


def edit_tensors(edit_state):
    def edit(folder):
        from safetensors.torch import load_file, save_file

        state = load_file(folder / "model.safetensors")
        edit_state(state)
        save_file(state, folder / "model.safetensors")
    return edit


def one_shard_lost(folder):
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names = sorted(state)
    first = "model-00001-of-00002.safetensors"
    parts = {first: names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    save_file({k: state[k] for k in parts[first]}, folder / first)  # the second is never written
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: file for file, keys in parts.items() for k in keys}}))


# Folders that are not the model their config.json describes, or hold a damaged file: (edit, file named, message).
BROKEN = {
    "one encoder layer, two in the weights": (edit_config(encoder_layers=1), "model.safetensors",
                                              "holds 2 encoder layers where config.json says encoder_layers=1"),
    "three encoder layers, two in the weights": (edit_config(encoder_layers=3), "model.safetensors",
                                                 "holds 2 encoder layers where config.json says encoder_layers=3"),
    "one decoder layer, two in the weights": (edit_config(decoder_layers=1), "model.safetensors",
                                              "holds 2 decoder layers where config.json says decoder_layers=1"),
    "d_model not the weights'": (edit_config(d_model=64), "model.safetensors",
                                 "model.shared.weight is 554 x 32 where config.json .* makes it 554 x 64"),
    "d_ff not the weights'": (edit_config(encoder_ffn_dim=128, decoder_ffn_dim=128), "model.safetensors",
                              "fc1.weight is 64 x 32 where config.json .* makes it 128 x 32"),
    "a tensor missing": (edit_tensors(lambda state: state.pop("model.encoder.layers.1.fc1.weight")),
                         "model.safetensors", "lacks model.encoder.layers.1.fc1.weight"),
    "a tensor no MarianMTModel has": (edit_tensors(lambda state: state.update(extra=torch.zeros(2))),
                                      "model.safetensors", "holds tensors a MarianMTModel has not: extra"),
    "a t5 model": (edit_config(model_type="t5"), "config.json", "model_type 't5' is not 'marian'"),
    "a shard lost": (one_shard_lost, "model-00002-of-00002.safetensors", "cannot read .*No such file"),
    "truncated model.safetensors": (cut_weights(0.5), "model.safetensors", "cannot read .*damaged or incomplete"),
    "empty model.safetensors": (cut_weights(0.0), "model.safetensors", "cannot read .*damaged or incomplete"),
    "junk pytorch_model.bin": (bin_weights(lambda path: path.write_bytes(b"not weights" * 100)), "pytorch_model.bin",
                               "cannot read .*not PyTorch weights"),
    "pickled code in pytorch_model.bin": (bin_weights(lambda path: torch.save({"x": RunsCode(path.parent / "ran")},
                                                                              path)),
                                          "pytorch_model.bin", "holds pickled objects other than tensors"),
    "vocab.json ids not numbers": (lambda folder: (folder / "vocab.json").write_text('{"a": "x", "b": 1}'),
                                   "vocab.json", "does not give the ids 0..553 of the model's 554 embedding rows"),
    "junk source.spm": (lambda folder: (folder / "source.spm").write_bytes(b"junk"), "source.spm",
                        "is not a SentencePiece model"),
    "junk target.spm": (lambda folder: (folder / "target.spm").write_bytes(b"junk"), "target.spm",
                        "is not a SentencePiece model"),
}


@pytest.fixture(scope="module")
def opus_base(spm_models, tmp_path_factory):
    return opus_folder(tmp_path_factory.mktemp("base") / "opus", spm_models, "opus-mt")


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_folder_that_is_not_its_config_or_is_damaged_is_one_line_naming_the_file(case, opus_base, tmp_path,
                                                                                   capsys):
    """Every tensor's name and shape is checked against config.json before anything is written: a layer more or less,
    another width, another model type, a damaged or pickled weights file, a junk tokenizer model. The error names the
    user's file (not a temporary one), pickled code never runs, and nothing is left where RUN would be."""
    import re
    import shutil

    edit, file, message = BROKEN[case]
    folder = shutil.copytree(opus_base, tmp_path / "opus")
    edit(folder)
    capsys.readouterr()
    assert main(["import", "--from", "hf", str(folder), "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{folder / file}" in err and re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opus"]  # no run, no temporary folder
    assert not (folder / "ran").exists()  # the pickled code did not run


def test_a_full_output_folder_is_refused_before_the_weights_are_read(opus_base, tmp_path, capsys, monkeypatch):
    import aiayn.export.marian as marian

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "mine.txt").write_text("keep me")
    monkeypatch.setattr(marian, "read_weights", lambda folder: pytest.fail("the weights were read"))
    assert main(["import", "--from", "hf", str(opus_base), "--out", str(tmp_path / "run")]) == 1
    assert "already exists and is not an empty folder" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["mine.txt"]


def test_weights_are_read_from_every_file_layout_without_transformers(spm_models, tmp_path, monkeypatch):
    """model.safetensors, shards with their index, or an older pytorch_model.bin: the same model, and transformers
    is not needed to import (only to build the folders here)."""
    import shutil
    import sys

    from safetensors.torch import load_file, save_file

    folder = opus_folder(tmp_path / "opus", spm_models, "opus-mt")
    state = load_file(folder / "model.safetensors")
    layouts = {"bin": tmp_path / "bin", "shards": tmp_path / "shards"}
    for layout in layouts.values():
        shutil.copytree(folder, layout)
        (layout / "model.safetensors").unlink()
    torch.save(state, layouts["bin"] / "pytorch_model.bin")
    names = sorted(state)
    parts = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in parts.items():
        save_file({k: state[k] for k in keys}, layouts["shards"] / file)
    (layouts["shards"] / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: file for file, keys in parts.items() for k in keys}}))
    monkeypatch.setitem(sys.modules, "transformers", None)  # any import of transformers now fails
    import_run(folder, tmp_path / "run")
    expect = load_for_inference(tmp_path / "run")[0].state_dict()
    for name, layout in layouts.items():
        import_run(layout, tmp_path / f"run-{name}")
        got = load_for_inference(tmp_path / f"run-{name}")[0].state_dict()
        assert all(torch.equal(got[k], v) for k, v in expect.items())
    (layouts["bin"] / "pytorch_model.bin").unlink()
    with pytest.raises(UserError, match="holds no weights"):
        import_run(layouts["bin"], tmp_path / "none")


def test_a_damaged_paired_vocabulary_is_refused(opus_run, tmp_path):
    import zipfile

    from aiayn.errors import DataError

    with zipfile.ZipFile(tmp_path / "vocab.model", "w") as zf:
        zf.writestr("source.spm", (opus_run / "vocab.model").read_bytes())
    with pytest.raises(DataError, match="not a paired vocabulary"):
        Vocab.load(tmp_path)


def test_cli_import_then_translate(spm_models, lines, tmp_path, capsys):
    folder = opus_folder(tmp_path / "opus", spm_models, "opus-mt")
    assert main(["import", "--from", "hf", str(folder), "--out", str(tmp_path / "run")]) == 0
    assert "imported" in capsys.readouterr().out
    (tmp_path / "in.txt").write_text("\n".join(lines[:4]) + "\n")
    assert main(["translate", "--checkpoint", str(tmp_path / "run"), "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "out.txt"), "--device", "cpu"]) == 0
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 4
    for impl, precision in (("fixed", "fp32"), ("eager", "bf16")):  # the fixed-shape search; bf16 weights
        assert main(["translate", "--checkpoint", str(tmp_path / "run"), "--input", str(tmp_path / "in.txt"),
                     "--output", str(tmp_path / f"{impl}.txt"), "--device", "cpu", "--search-impl", impl,
                     "--precision", precision]) == 0
    assert (tmp_path / "fixed.txt").read_text() == (tmp_path / "out.txt").read_text()
    assert len((tmp_path / "eager.txt").read_text().splitlines()) == 4
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--to", "ct2", str(tmp_path / "ct2")]) == 0
    assert main(["translate", "--engine", "ct2", "--checkpoint", str(tmp_path / "ct2"), "--lp", "power", "--beam",
                 "1", "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "ct2.txt")]) == 0
    assert main(["translate", "--checkpoint", str(tmp_path / "run"), "--lp", "power", "--beam", "1", "--input",
                 str(tmp_path / "in.txt"), "--output", str(tmp_path / "greedy.txt"), "--device", "cpu"]) == 0
    assert (tmp_path / "ct2.txt").read_text() == (tmp_path / "greedy.txt").read_text()
    assert main(["import", "--from", "hf", str(tmp_path / "nothing"), "--out", str(tmp_path / "run2")]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_import_records_the_language_pair(spm_models, tmp_path, capsys):
    """--source-lang/--target-lang, else tokenizer_config.json (HF's converter writes "opus-mt-en" there), else a
    folder named by its pair; serve and export --to argos read the record (data.run_languages)."""
    folder = opus_folder(tmp_path / "opus", spm_models, "opus-mt")
    assert main(["import", "--from", "hf", str(folder), "--out", str(tmp_path / "none")]) == 0
    assert "none recorded" in capsys.readouterr().out and run_languages(tmp_path / "none") is None
    assert main(["import", "--from", "hf", str(folder), "--out", str(tmp_path / "given"), "--source-lang", "en",
                 "--target-lang", "de"]) == 0
    assert "languages en -> de" in capsys.readouterr().out
    assert run_languages(tmp_path / "given") == ("en", "de")
    assert run_languages(tmp_path / "given" / "checkpoints" / "step_00000000.safetensors") == ("en", "de")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "source_lang": "opus-mt-fr",
                                                               "target_lang": "es"}))
    assert main(["import", "--from", "hf", str(folder), "--out", str(tmp_path / "named")]) == 0
    assert "languages fr -> es (as the folder names them)" in capsys.readouterr().out
    assert run_languages(tmp_path / "named") == ("fr", "es")
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "source_lang": "en",
                                                               "target_lang": "ROMANCE"}))  # a group: not one
    renamed = folder.rename(tmp_path / "opus-mt-tc-big-en-pt")
    assert main(["import", "--from", "hf", str(renamed), "--out", str(tmp_path / "by-name")]) == 0
    assert run_languages(tmp_path / "by-name") == ("en", "pt")
    assert main(["export", "--checkpoint", str(tmp_path / "by-name"), "--to", "ct2", str(tmp_path / "ct2")]) == 0
    assert run_languages(tmp_path / "ct2") == ("en", "pt")
    capsys.readouterr()
    assert main(["import", "--from", "hf", str(renamed), "--out", str(tmp_path / "bad"), "--source-lang", "en"]) == 2
    assert "give both --source-lang and --target-lang" in capsys.readouterr().err
    assert main(["import", "--from", "hf", str(renamed), "--out", str(tmp_path / "bad"), "--source-lang", "en",
                 "--target-lang", "auto"]) == 2
    assert "not a language code" in capsys.readouterr().err and not (tmp_path / "bad").exists()


# ---------------------------------------------------------------------------------------------------------
# What an imported run goes on to: CTranslate2 (and int8), an HF export back, fine-tuning, a shortlist.


@pytest.fixture(scope="module")
def opus_run(spm_models, tmp_path_factory):
    """The opus-mt variant imported (swish, output bias: what the paper's model lacks)."""
    root = tmp_path_factory.mktemp("opus-run")
    import_run(opus_folder(root / "opus", spm_models, "opus-mt"), root / "run")
    return root / "run"


def test_ct2_export_gives_aiayn_tokens(opus_run, lines, tmp_path):
    pytest.importorskip("ctranslate2")
    from aiayn.config import BOS_ID
    from aiayn.decoding.ct2 import CT2Translator
    from aiayn.export.ct2 import export_ct2

    model, vocab, _ = load_for_inference(opus_run)
    export_ct2(model, vocab, tmp_path / "ct2")
    ct2 = CT2Translator(tmp_path / "ct2")
    # CTranslate2 suppresses <s> (here Marian's <pad> row) before its softmax: the same model with <s>'s bias NEVER
    masked, _, _ = load_for_inference(opus_run)
    with torch.no_grad():
        masked.output_bias[BOS_ID] = NEVER
    src = padded([vocab.encode(line) + [EOS_ID] for line in lines], PAD_ID)
    for beam in (1, 4):
        search = SearchConfig(beam=beam, lp="power", alpha=0.6, max_len_a=0.0, max_len_b=LIMIT, beam_patience=1)
        ours = [h[0].tokens for h in (greedy_search if beam == 1 else beam_search)(masked, src, search)]
        theirs = [hyps[0].tokens for hyps in ct2.using(search).translate_nbest(lines)]
        if beam == 1:
            assert theirs == [t[: LIMIT] for t in ours]
        else:
            ended = [i for i, t in enumerate(ours) if len(t) < LIMIT]
            assert len(ended) > 5 and [theirs[i] for i in ended] == [ours[i] for i in ended]
    # The folder's README shows CTranslate2 alone with the two SentencePiece models written beside it: it runs
    snippet = (tmp_path / "ct2" / "README.md").read_text().split("```python\n")[1].split("```")[0]
    assert "source.spm" in snippet and "target.spm" in snippet
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    export_ct2(model, vocab, tmp_path / "ct2-int8", quantization="int8")
    int8 = CT2Translator(tmp_path / "ct2-int8").translate(lines[:4], SearchConfig(beam=4, lp="power"))
    assert len(int8) == 4


def test_int8_decoding_and_hf_export_back(opus_run, lines, tmp_path):
    from aiayn.decoding.translator import Translator
    from aiayn.export.hf import export_hf

    model, vocab, _ = load_for_inference(opus_run)
    search = SearchConfig(beam=1, max_len_a=0.0, max_len_b=LIMIT)
    fp32 = Translator.load(opus_run, search, precision="fp32").translate(lines)
    int8 = Translator.load(opus_run, search, precision="int8").translate(lines)
    assert len(int8) == len(lines) and sum(a == b for a, b in zip(fp32, int8)) >= len(lines) // 2
    export_hf(model, vocab, tmp_path / "hf")  # swish, the output bias, both SentencePiece models
    import_run(tmp_path / "hf", tmp_path / "back")
    back, back_vocab, cfg = load_for_inference(tmp_path / "back")
    assert cfg == model.cfg and isinstance(back_vocab, MarianVocab) and back_vocab.pieces == vocab.pieces
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in back.state_dict().items())


@pytest.fixture(scope="module")
def exported(opus_run, tmp_path_factory):
    """An imported model exported back by `aiayn export --to hf` (config.json carries its aiayn record)."""
    from aiayn.export.hf import export_hf

    model, vocab, _ = load_for_inference(opus_run)
    return export_hf(model, vocab, tmp_path_factory.mktemp("exported") / "hf")


def edit_record(**fields):
    """Edit config.json's Marian fields and, under the same change, its aiayn record (n_enc_layers, ...)."""
    names = {"encoder_layers": "n_enc_layers", "decoder_layers": "n_dec_layers"}

    def edit(folder):
        config = json.loads((folder / "config.json").read_text())
        config["aiayn"].update({names[k]: v for k, v in fields.items() if k in names})
        (folder / "config.json").write_text(json.dumps({**config, **fields}))
    return edit


def swap_pieces(a: str, b: str):
    def edit(folder):
        ids = json.loads((folder / "vocab.json").read_text())
        ids[a], ids[b] = ids[b], ids[a]
        (folder / "vocab.json").write_text(json.dumps(ids))
    return edit


# aiayn's own exports were read by MarianMTModel.from_pretrained, which fills a layer the weights lack with random
# weights and drops one they have: the same checks hold for them.
EXPORTS_BROKEN = {
    "three encoder layers, two in the weights": (edit_record(encoder_layers=3), "model.safetensors",
                                                 "holds 2 encoder layers where config.json says encoder_layers=3"),
    "one decoder layer, two in the weights": (edit_record(decoder_layers=1), "model.safetensors",
                                              "holds 2 decoder layers where config.json says decoder_layers=1"),
    "config.json edited, not its record": (edit_config(encoder_layers=3), "config.json",
                                           "encoder_layers, .* \\(555, 3, 2, .* disagree with its aiayn record"),
    "a t5 model": (edit_config(model_type="t5"), "config.json", "model_type 't5' is not 'marian'"),
    "truncated model.safetensors": (cut_weights(0.9), "model.safetensors", "cannot read .*damaged or incomplete"),
    "special pieces moved": (swap_pieces("<pad>", "<unk>"), "vocab.json", "does not give aiayn's special pieces"),
}


@pytest.mark.parametrize("case", list(EXPORTS_BROKEN))
def test_an_aiayn_export_that_is_not_its_config_is_refused(case, exported, tmp_path, capsys):
    import re
    import shutil

    edit, file, message = EXPORTS_BROKEN[case]
    folder = shutil.copytree(exported, tmp_path / "hf")
    edit(folder)
    capsys.readouterr()
    assert main(["import", "--from", "hf", str(folder), "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{folder / file}" in err and re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_hf_export_keeps_the_language_pair(opus_base, tmp_path, capsys):
    """export --to hf writes the pair where HF's Marian converter does (tokenizer_config.json's source_lang and
    target_lang: MarianTokenizer reads them), so export -> import keeps it."""
    run = tmp_path / "run"
    assert main(["import", "--from", "hf", str(opus_base), "--out", str(run), "--source-lang", "en", "--target-lang",
                 "de"]) == 0
    assert main(["export", "--checkpoint", str(run), "--to", "hf", str(tmp_path / "hf")]) == 0  # the run's pair
    tok = transformers.MarianTokenizer.from_pretrained(tmp_path / "hf")
    assert (tok.source_lang, tok.target_lang) == ("en", "de")
    assert main(["import", "--from", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "back")]) == 0
    assert run_languages(tmp_path / "back") == ("en", "de")
    assert main(["export", "--checkpoint", str(run), "--to", "hf", str(tmp_path / "hf-given"), "--source-lang",
                 "pt-BR", "--target-lang", "es"]) == 0  # the flags win
    assert main(["import", "--from", "hf", str(tmp_path / "hf-given"), "--out", str(tmp_path / "given")]) == 0
    assert run_languages(tmp_path / "given") == ("pt-BR", "es")
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(run), "--to", "hf", str(tmp_path / "bad"), "--source-lang",
                 "auto"]) == 2
    assert "not a language code" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_export_help_says_what_each_target_does_with_the_pair(capsys):
    assert main(["export", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for target, does in [("argos", "names it in the package's metadata.json (and needs one)"),
                         ("ct2", "writes it to the folder's aiayn.json"),
                         ("hf", "writes it as tokenizer_config.json's source_lang and target_lang")]:
        assert f"--to {target} {does}" in text, target


def test_fine_tuning_and_shortlist_on_a_corpus_prepared_with_its_vocabulary(opus_run, tmp_path, capsys):
    en, de = (MULTI30K / "train.en").read_text().splitlines(), (MULTI30K / "train.de").read_text().splitlines()
    (tmp_path / "src.txt").write_text("\n".join(en[5000:5200]) + "\n")
    (tmp_path / "tgt.txt").write_text("\n".join(de[5000:5200]) + "\n")
    data, child = tmp_path / "data", tmp_path / "child"
    assert main(["prepare", "--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "tgt.txt"), "--out",
                 str(data), "--vocab", str(opus_run), "--valid-src", str(tmp_path / "src.txt"), "--valid-tgt",
                 str(tmp_path / "tgt.txt")]) == 0
    vocab = Vocab.load(data)
    assert isinstance(vocab, MarianVocab)
    from aiayn.data import load_split

    pair = load_split(data, "train")[0]  # the target side was tokenized by target.spm
    assert list(map(int, pair[1])) == vocab.target.encode(de[5000]) != vocab.encode(de[5000])
    assert main(["train", "--data", str(data), "--out", str(child), "--init-from", str(opus_run), "--max-steps",
                 "3", "--max-tokens", "400", "--device", "cpu", "--no-progress"]) == 0
    model, child_vocab, _ = load_for_inference(child)
    parent, _, _ = load_for_inference(opus_run)
    assert isinstance(child_vocab, MarianVocab)
    assert not torch.equal(model.output_bias, parent.output_bias)  # the bias trains with the rest
    assert model.output_bias[PAD_ID] < NEVER / 2  # and PAD stays impossible
    assert main(["shortlist", "--out", str(child), "--data", str(data)]) == 0
    (tmp_path / "in.txt").write_text("A dog runs.\n")
    assert main(["translate", "--checkpoint", str(child), "--shortlist", "--input", str(tmp_path / "in.txt"),
                 "--device", "cpu"]) == 0


@pytest.mark.slow  # a fresh Python importing argostranslate
def test_argos_package_translates_as_the_ct2_export(opus_run, lines, tmp_path):
    """argostranslate decodes the target pieces with the package's one SentencePiece model (the source's): the
    same text as aiayn's target.spm gives, line for line."""
    pytest.importorskip("argostranslate")
    from test_export_argos import NAME, argos_search, argos_translate

    from aiayn.decoding.ct2 import CT2Translator
    from aiayn.export.argos import export_argos
    from aiayn.export.ct2 import export_ct2

    model, vocab, _ = load_for_inference(opus_run)
    one_sentence = [line for line in lines if line.count(".") == 1 and line.endswith(".")]
    expect = CT2Translator(export_ct2(model, vocab, tmp_path / "ct2")).translate(one_sentence, argos_search())
    package = export_argos(model, vocab, tmp_path / f"{NAME}.argosmodel", "en", "de")
    out = argos_translate(package, one_sentence, tmp_path / "home")["translations"]
    kept = [i for i, text in enumerate(expect) if "⁇" not in text]  # argostranslate rewrites a generated <unk>
    assert len(kept) > 10 and [out[i] for i in kept] == [expect[i] for i in kept]
