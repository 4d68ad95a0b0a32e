"""export: HF transformers (MarianMTModel) and CTranslate2 compute what aiayn computes.

Two independent implementations of the Transformer run aiayn's weights: logits and per-token log-probs must agree
to float rounding, and greedy and beam search must give aiayn's tokens where the search rules are the same
(aiayn's lp="power" = HF's and CTranslate2's |Y|^alpha; aiayn/decoding/ct2.py lists what differs and why).

The models are tiny and trained for 100 steps on the reversed-copy task: a random model would repeat its input to
the length limit, whereas these stop by themselves at varied lengths, give PAD and BOS almost no probability (as
any trained model) and still leave beam search choices that differ from greedy search.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from helpers import REPO, save_run, tiny_model

from aiayn.cli import main
from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data import Vocab, load_split
from aiayn.decoding.search import SearchConfig, beam_search, greedy_search, max_output_lengths
from aiayn.decoding.shortlist import build_from_prepared, vmap_lines
from aiayn.decoding.translator import Translator
from aiayn.errors import UsageError, UserError
from aiayn.export.names import parameter_map
from aiayn.model import Transformer

transformers = pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")

from aiayn.decoding.batches import own_limits  # noqa: E402
from aiayn.decoding.ct2 import CT2Translator, translate_ct2  # noqa: E402
from aiayn.export.ct2 import QUANTIZATIONS, export_ct2  # noqa: E402
from aiayn.export.hf import export_hf, from_marian, import_hf, to_marian  # noqa: E402

# Word limit. The trained models' beam outputs stay below it: at the limit the engines score hypotheses differently
# (DECODING_NOTES in ct2.py). Greedy outputs may reach it; their words still agree.
LIMIT = 60
POWER = dict(lp="power", alpha=0.6, max_len_a=0.0, max_len_b=LIMIT)  # the search rules the three engines share


def pad(rows: list[list[int]]) -> torch.Tensor:
    x = torch.full((len(rows), max(map(len, rows))), PAD_ID)
    for i, r in enumerate(rows):
        x[i, : len(r)] = torch.tensor(r)
    return x


def train_tiny(data_dir, vocab_size: int, steps: int = 100, **overrides) -> Transformer:
    """The tiny preset trained for `steps` Adam steps of 32 pairs (teacher forcing, plain cross-entropy)."""
    model = tiny_model(vocab_size, dropout=0.0, **overrides).train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    train, g = load_split(data_dir, "train"), torch.Generator().manual_seed(0)
    for _ in range(steps):
        pairs = [train[i] for i in torch.randint(len(train), (32,), generator=g).tolist()]
        src = pad([[*map(int, s), EOS_ID] for s, _ in pairs])
        tgt_in = pad([[BOS_ID, *map(int, t)] for _, t in pairs])
        tgt_out = pad([[*map(int, t), EOS_ID] for _, t in pairs])
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


class MaskedBeforeSoftmax:
    """`model` with PAD and BOS given logit -inf, so that aiayn's search renormalizes over the other tokens, as
    CTranslate2 does when it suppresses them (aiayn itself masks after the log-softmax: ct2.py)."""

    def __init__(self, model: Transformer):
        self.model = model
        self.encode, self.new_cache = model.encode, model.new_cache

    def decode(self, *args, **kwargs) -> torch.Tensor:
        logits = self.model.decode(*args, **kwargs)
        logits[..., [PAD_ID, BOS_ID]] = float("-inf")
        return logits


def best_tokens(model, src: torch.Tensor, search: SearchConfig) -> list[list[int]]:
    hyps = (greedy_search if search.beam == 1 else beam_search)(model, src, search)
    return [h[0].tokens for h in hyps]


@pytest.fixture(scope="module")
def vocab(copy_data) -> Vocab:
    return Vocab.load(copy_data)


@pytest.fixture(scope="module")
def lines(copy_data) -> list[str]:
    return ((copy_data / "test.src.txt").read_text().splitlines() + (copy_data / "valid.src.txt").read_text()
            .splitlines())[:48]


@pytest.fixture(scope="module")
def src(vocab, lines) -> torch.Tensor:
    return pad([vocab.encode(line) + [EOS_ID] for line in lines])


@pytest.fixture(scope="module")
def model(copy_data, vocab) -> Transformer:
    """Post-norm, h * d_k = d_model: what both targets can hold."""
    return train_tiny(copy_data, len(vocab))


@pytest.fixture(scope="module")
def row_b(copy_data, vocab) -> Transformer:
    """Table 3 row B's idea on the tiny preset: d_k = 4, d_v = 8, so h * d_k = 16 != d_model = 32."""
    return train_tiny(copy_data, len(vocab), d_k=4)


@pytest.fixture(scope="module")
def hf_dir(model, vocab, tmp_path_factory):
    return export_hf(model, vocab, tmp_path_factory.mktemp("export") / "hf")


@pytest.fixture(scope="module")
def ct2_dirs(model, row_b, vocab, tmp_path_factory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("export")
    return {"tiny": export_ct2(model, vocab, root / "tiny"), "row_b": export_ct2(row_b, vocab, root / "row_b")}


# ---------------------------------------------------------------------------------------------------------
# The one name map.


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"positional": "learned"}, {"d_k": 4}])
def test_name_map_covers_every_parameter(overrides):
    cfg = tiny_model(40, **overrides).cfg
    assert [p.aiayn for p in parameter_map(cfg)] == list(Transformer(cfg).state_dict())
    if not overrides:  # every HF name is a MarianMTModel tensor, each used once
        from aiayn.export.hf import marian_config

        hf_names = [n for p in parameter_map(cfg) for n in p.hf]
        assert len(set(hf_names)) == len(hf_names)
        assert set(hf_names) <= set(transformers.MarianMTModel(marian_config(cfg)).state_dict())


# ---------------------------------------------------------------------------------------------------------
# HF transformers.


def test_hf_logits_equal(model, hf_dir, src):
    tgt_in = pad([[BOS_ID] + list(range(4, 4 + n)) for n in range(3, 3 + src.size(0))])  # varied lengths, padded
    with torch.no_grad():
        ours = model(src, tgt_in)
        for hf in (to_marian(model), transformers.MarianMTModel.from_pretrained(hf_dir)):
            theirs = hf.eval()(input_ids=src, attention_mask=src.ne(PAD_ID), decoder_input_ids=tgt_in).logits
            assert (theirs - ours).abs().max() < 1e-5


def test_hf_generate_gives_aiayn_tokens(model, hf_dir, src):
    hf = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
    outputs = {}
    for beam in (1, 4):
        search = greedy_search if beam == 1 else beam_search
        ours = [h[0] for h in search(model, src, SearchConfig(beam=beam, **POWER))]
        assert len({len(h.tokens) for h in ours}) > 5  # lengths vary
        generated = hf.generate(input_ids=src, attention_mask=src.ne(PAD_ID), num_beams=beam, max_length=LIMIT + 2,
                                output_scores=True, return_dict_in_generate=True)  # max_length: + start + EOS
        theirs = [[t for t in row.tolist()[1:] if t not in (PAD_ID, EOS_ID)] for row in generated.sequences]
        assert theirs == [h.tokens for h in ours]
        if beam > 1:  # the same normalized scores: HF's |Y| counts the EOS too (below the limit, see LIMIT)
            assert max(len(h.tokens) for h in ours) < LIMIT
            assert torch.allclose(generated.sequences_scores, torch.tensor([h.score for h in ours]), atol=1e-4)
        outputs[beam] = theirs
    assert outputs[1] != outputs[4]  # the beams did matter


def test_hf_tokenizer_gives_aiayn_ids(vocab, lines, hf_dir):
    tok = transformers.MarianTokenizer.from_pretrained(hf_dir)
    texts = lines[:5] + ['"Quoted" -- and UNKNOWN chars: café, naïve, 3.5 %!', "  spaces   inside ", "x"]
    for text in texts:
        ids = vocab.encode(text)
        assert tok(text).input_ids == ids + [EOS_ID]
        if UNK_ID not in ids:  # skip_special_tokens drops <unk>, which SentencePiece writes as " ⁇ "
            assert tok.decode(ids + [EOS_ID], skip_special_tokens=True) == vocab.decode(ids)
    assert UNK_ID in vocab.encode(texts[5])  # the unknown characters were unknown


@pytest.mark.slow  # a fresh Python importing transformers
def test_hf_folder_loads_without_aiayn(hf_dir, tmp_path, lines):
    """MarianMTModel/MarianTokenizer.from_pretrained in a Python where `import aiayn` fails."""
    script = f"""
import sys; sys.modules["aiayn"] = None  # any import of aiayn now raises ImportError
from transformers import MarianMTModel, MarianTokenizer
tok = MarianTokenizer.from_pretrained({str(hf_dir)!r})
model = MarianMTModel.from_pretrained({str(hf_dir)!r})
out = model.generate(**tok({lines[:3]!r}, return_tensors="pt", padding=True))
print(tok.batch_decode(out, skip_special_tokens=True))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(eval(done.stdout.strip().splitlines()[-1])) == 3


def test_hf_round_trip_is_exact(model, vocab, hf_dir):
    back, back_vocab = import_hf(hf_dir)
    assert back.cfg == model.cfg
    ours = model.state_dict()
    assert all(torch.equal(v, ours[k]) for k, v in back.state_dict().items())
    assert back_vocab.sp.serialized_model_proto() == vocab.sp.serialized_model_proto()

    other = to_marian(model)  # a Marian model that is not the paper's architecture is refused, not mis-read
    other.config.activation_function = "gelu"  # (swish is OPUS-MT's, which aiayn holds: test_import_marian.py)
    with pytest.raises(UserError, match="gelu"):
        from_marian(other)


def test_hf_import_checks_every_tensor_against_the_config_without_transformers(model, hf_dir, tmp_path, monkeypatch):
    """import_hf reads the files itself (MarianMTModel.from_pretrained would fill a layer the weights lack with random
    weights, and drop one the config does not name); the folder records no pair when none was given."""
    import shutil

    assert json.loads((hf_dir / "tokenizer_config.json").read_text())["source_lang"] is None
    monkeypatch.setitem(sys.modules, "transformers", None)  # any import of transformers now fails
    back, _ = import_hf(hf_dir)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in back.state_dict().items())
    folder = shutil.copytree(hf_dir, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    n = config["encoder_layers"]
    config["aiayn"]["n_enc_layers"] = n + 1
    (folder / "config.json").write_text(json.dumps({**config, "encoder_layers": n + 1}))
    with pytest.raises(UserError, match=f"model.safetensors holds {n} encoder layers where config.json says "
                                        f"encoder_layers={n + 1}"):
        import_hf(folder)


@pytest.mark.parametrize("overrides, reason", [({"norm_first": True}, "pre-norm"),
                                                ({"positional": "learned"}, "learned positions"),
                                                ({"d_k": 4}, "h * d_k = 16")])
def test_hf_refuses_what_marian_cannot_hold(vocab, tmp_path, overrides, reason):
    with pytest.raises(UserError, match=re.escape(reason)):
        export_hf(tiny_model(len(vocab), **overrides), vocab, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------
# CTranslate2.


def aiayn_log_probs(model, src_ids: list[int], tgt_ids: list[int]) -> torch.Tensor:
    """log p(y_t | y_<t, x) of each target token and the final EOS, teacher-forced."""
    with torch.no_grad():
        logits = model(torch.tensor([src_ids]), torch.tensor([[BOS_ID] + tgt_ids]))[0]
    return logits.log_softmax(-1).gather(1, torch.tensor(tgt_ids + [EOS_ID])[:, None]).squeeze(1)


@pytest.mark.parametrize("which", ["tiny", "row_b", "pre-norm", "learned"])
def test_ct2_scores_equal_aiayn_log_probs(which, model, row_b, ct2_dirs, vocab, copy_data, tmp_path):
    if which in ct2_dirs:
        m, folder = {"tiny": model, "row_b": row_b}[which], ct2_dirs[which]
    else:  # random weights are enough to compare scores
        m = tiny_model(len(vocab), **({"norm_first": True} if which == "pre-norm" else {"positional": "learned"}))
        folder = export_ct2(m, vocab, tmp_path / which)
    translator = CT2Translator(folder).translator
    sources = (copy_data / "test.src.txt").read_text().splitlines()[:16]
    targets = (copy_data / "test.tgt.txt").read_text().splitlines()[:16]
    src_ids, tgt_ids = [vocab.encode(s) for s in sources], [vocab.encode(t) for t in targets]
    results = translator.score_batch([[vocab.piece(i) for i in s] for s in src_ids],
                                     [[vocab.piece(i) for i in t] for t in tgt_ids])
    for s, t, res in zip(src_ids, tgt_ids, results):
        ours = aiayn_log_probs(m, s + [EOS_ID], t)
        assert (torch.tensor(res.log_probs) - ours).abs().max() < 1e-4


@pytest.mark.parametrize("which", ["tiny", "row_b"])
def test_ct2_search_gives_aiayn_tokens(which, model, row_b, ct2_dirs, src, lines):
    m, folder = {"tiny": model, "row_b": row_b}[which], ct2_dirs[which]
    greedy = SearchConfig(beam=1, **POWER)  # argmax: identical whatever is masked when
    ct2 = CT2Translator(folder)
    assert [t.tokens for t, in ct2.using(greedy).translate_nbest(lines)] == best_tokens(m, src, greedy)
    unscored = [t for t, in ct2.using(dataclasses.replace(greedy, scores=False)).translate_nbest(lines)]
    assert [t.tokens for t in unscored] == best_tokens(m, src, greedy) and all(math.isnan(t.score) for t in unscored)

    # Beam: the same masking rule on both sides (min_len 0: no EOS mask), and a patience that lets CTranslate2
    # search as long as aiayn does.
    beam = SearchConfig(beam=4, min_len=0, **POWER)
    ours = [h[0] for h in beam_search(MaskedBeforeSoftmax(m), src, beam)]
    assert max(len(h.tokens) for h in ours) < LIMIT and min(len(h.tokens) for h in ours) > 0
    theirs = [t for t, in ct2.using(beam, patience=1000).translate_nbest(lines)]
    assert [t.tokens for t in theirs] == [h.tokens for h in ours]
    assert torch.allclose(torch.tensor([t.score for t in theirs]), torch.tensor([h.score for h in ours]), atol=1e-4)
    assert [h.tokens for h in ours] != best_tokens(m, src, greedy)  # the beams did matter

    # --beam-patience is CTranslate2's patience: stop once beam * patience hypotheses have finished.
    exhaustive = [h.tokens for h in ours]
    stopped_sooner = 0
    for patience in (1.0, 0.5):
        early = dataclasses.replace(beam, beam_patience=patience)
        ours = [h[0] for h in beam_search(MaskedBeforeSoftmax(m), src, early)]
        stopped_sooner += [h.tokens for h in ours] != exhaustive
        theirs = [t for t, in ct2.using(early).translate_nbest(lines)]
        assert [t.tokens for t in theirs] == [h.tokens for h in ours]
        assert torch.allclose(torch.tensor([t.score for t in theirs]), torch.tensor([h.score for h in ours]),
                              atol=1e-4)
    assert stopped_sooner  # the rule mattered


def test_ct2_prefix_and_ngram_blocking_give_aiayn_tokens(model, ct2_dirs, src, lines, vocab):
    """A target prefix maps to CTranslate2's target_prefix, no_repeat_ngram_size to its own: greedy search gives the
    same tokens. Beam search ranks differently with a prefix (CTranslate2 leaves the prefix's log-probs out of its
    scores: DECODING_NOTES), so there only the prefix and the sentences without one are compared."""
    ct2 = CT2Translator(ct2_dirs["tiny"])
    free = best_tokens(model, src, SearchConfig(beam=1, **POWER))
    texts = [vocab.decode(free[(i + 1) % len(free)][:2]) if i % 3 else "" for i in range(len(lines))]  # others' starts
    ids = [vocab.encode(text) for text in texts]
    for search in (SearchConfig(beam=1, **POWER), SearchConfig(beam=1, no_repeat_ngram_size=2, **POWER),
                   SearchConfig(beam=4, min_len=0, **POWER)):
        ours = [h[0].tokens for h in (greedy_search if search.beam == 1 else beam_search)(
            MaskedBeforeSoftmax(model), src, search, prefixes=ids)]
        theirs = [t.tokens for t, in ct2.using(search, patience=1000).translate_nbest(lines, prefixes=texts)]
        assert all(h[: len(p)] == p for hyps in (ours, theirs) for h, p in zip(hyps, ids))
        assert ours != free  # the prefixes (and the n-gram ban) did matter
        if search.beam == 1:
            assert theirs == ours
        else:
            assert [t for t, p in zip(theirs, ids) if not p] == [h for h, p in zip(ours, ids) if not p]
    with pytest.raises(UsageError, match="does not sample"):
        ct2.using(SearchConfig(sampling=True, **POWER)).translate_nbest(lines)


def test_ct2_translate_keeps_order_and_blank_lines(ct2_dirs, model, vocab, lines):
    text = ["", lines[0], "   ", lines[1], lines[2]]
    search = SearchConfig(beam=2, **POWER)
    out = translate_ct2(ct2_dirs["tiny"], text, search, batch_size=2)
    alone = [translate_ct2(ct2_dirs["tiny"], [line], search)[0] for line in lines[:3]]
    assert out[0] == "" and out[2] == "" and [out[1], out[3], out[4]] == alone
    with pytest.raises(UsageError, match="lp power"):
        translate_ct2(ct2_dirs["tiny"], lines, SearchConfig(beam=2))  # the paper's GNMT penalty


def test_ct2_batches_are_full_and_each_sentence_keeps_its_own_limit(ct2_dirs, src, lines):
    """translate_ct2 sends length-sorted batches of batch_size sentences (one CTranslate2 call each) at the batch's
    largest limit, and decodes a sentence whose output reached its own limit again alone: outputs equal each
    sentence decoded alone at its own limit, here with limits short enough that many outputs reach them."""
    search = SearchConfig(beam=1, lp="power", max_len_a=0.5, max_len_b=1)
    sources = [[t for t in row.tolist() if t != PAD_ID] for row in src]
    limits = own_limits(sources, search, None)
    assert list(limits.values()) == max_output_lengths(src, 0.5, 1, search.min_len).tolist()
    assert own_limits([[5, 6, 2], None], search, 1) == {0: 1}  # the blank skipped, the cap applied

    ct2 = CT2Translator(ct2_dirs["tiny"])
    calls = []
    real = ct2.translator.translate_batch
    ct2.translator = types.SimpleNamespace(
        translate_batch=lambda batch, **kw: calls.append((len(batch), kw)) or real(batch, **kw))
    together = ct2.using(search, batch_size=16).translate_nbest(lines)
    batches = -(-len(lines) // 16)
    assert [n for n, _ in calls[:batches]] == [16] * (batches - 1) + [len(lines) % 16 or 16]
    first = [kw["max_decoding_length"] for _, kw in calls[:batches]]
    assert first == sorted(first)  # shortest sentences first
    redone = len(calls) - batches
    assert 0 < redone < len(lines)  # some outputs reached their own, smaller limit and were decoded again
    alone = [ct2.using(search, batch_size=1).translate_nbest([line])[0] for line in lines]
    assert len(calls) == batches + redone + len(lines)  # alone, a sentence's batch limit is its own: no second call
    assert [[t.tokens for t in h] for h in together] == [[t.tokens for t in h] for h in alone]
    assert any(len(h[0].tokens) == limits[i] for i, h in enumerate(together))


def test_ct2_batches_side_by_side_on_a_cpu(ct2_dirs, lines):
    """parallel_batches is CTranslate2's inter_threads, at most the threads, each batch on its share of them: two
    batches at once by default on two threads (one thread each), the translations of one thread; on one thread, one.
    Below one, or more than one on a GPU: an error, before the model loads."""
    search = SearchConfig(beam=2, **POWER)
    two = CT2Translator(ct2_dirs["tiny"], threads=2, search=search, batch_size=3)
    alone = CT2Translator(ct2_dirs["tiny"], threads=1, search=search, batch_size=3)
    assert two.translator.num_translators == 2 and alone.translator.num_translators == 1
    assert CT2Translator(ct2_dirs["tiny"], threads=2, parallel_batches=1).translator.num_translators == 1
    assert two.translate_nbest(lines) == alone.translate_nbest(lines)
    with pytest.raises(UsageError, match="parallel batches must be at least 1"):
        CT2Translator(ct2_dirs["tiny"], parallel_batches=0)
    with pytest.raises(UsageError, match="a GPU .* decodes one batch at a time"):
        CT2Translator(ct2_dirs["tiny"], device="cuda", parallel_batches=2)


@pytest.mark.parametrize("quantization", QUANTIZATIONS)
def test_ct2_quantizations(quantization, model, vocab, lines, ct2_dirs, tmp_path):
    folder = export_ct2(model, vocab, tmp_path / quantization, quantization)
    assert json.loads((folder / "aiayn.json").read_text())["quantization"] == quantization
    weights, full = (folder / "model.bin").stat().st_size, (ct2_dirs["tiny"] / "model.bin").stat().st_size
    assert weights < full  # 8 or 16 bits instead of 32 (position tables, biases and norms stay float)
    out = translate_ct2(folder, lines[:8], SearchConfig(beam=1, **POWER))
    assert len(out) == 8 and any(out)


def test_ct2_vocabulary_map_decodes_as_aiayn_shortlist(model, vocab, copy_data, lines, tmp_path):
    """A run's shortlist exported as vmap.txt: CTranslate2 with use_vmap gives the tokens aiayn gives with the
    shortlist (each sentence alone: both take the union over a batch, and their batches differ), never a piece
    outside the sentence's allowed ones."""
    shortlist = build_from_prepared(copy_data, per_source=1, frequent=0)
    folder = export_ct2(model, vocab, tmp_path / "vmap", shortlist=shortlist)
    assert (folder / "vmap.txt").read_text().splitlines() == vmap_lines(shortlist, vocab)
    greedy = SearchConfig(beam=1, **POWER)
    ours = Translator(model, vocab, greedy, batch_size=1, shortlist=shortlist).translate_nbest(lines)
    theirs = CT2Translator(folder, use_vmap=True, search=greedy, batch_size=1).translate_nbest(lines)
    assert [t.tokens for t, in theirs] == [h.tokens for h, in ours]
    full = CT2Translator(folder, search=greedy, batch_size=1).translate_nbest(lines)
    assert [t.tokens for t, in full] != [t.tokens for t, in theirs]  # the map did restrict CTranslate2
    for (t,), line in zip(theirs, lines):
        assert set(t.tokens) <= set(shortlist.allowed(pad([vocab.encode(line) + [EOS_ID]])).tolist())
    with pytest.raises(UsageError, match="has no vocabulary map"):
        CT2Translator(export_ct2(model, vocab, tmp_path / "plain"), use_vmap=True)


# ---------------------------------------------------------------------------------------------------------
# The command line.


def test_cli_export_and_translate_with_ct2(model, row_b, vocab, copy_data, lines, tmp_path, capsys):
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    assert main(["export", "--checkpoint", str(run), "--to", "ct2", str(tmp_path / "ct2")]) == 0
    assert main(["export", "--checkpoint", str(run), "--to", "hf", str(tmp_path / "hf"), "--bleu", "12.3"]) == 0
    assert "BLEU: 12.3" in (tmp_path / "hf" / "README.md").read_text()
    assert "step_00000010" in (tmp_path / "ct2" / "README.md").read_text()

    (tmp_path / "in.txt").write_text("\n".join(lines[:6]) + "\n")
    translate = ["translate", "--engine", "ct2", "--checkpoint", str(tmp_path / "ct2"), "--input",
                 str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt"), "--beam", "2"]
    assert main([*translate, "--lp", "power"]) == 0
    expect = translate_ct2(tmp_path / "ct2", lines[:6], SearchConfig(beam=2, lp="power"))
    assert (tmp_path / "out.txt").read_text().splitlines() == expect
    assert main(translate) == 2  # the default GNMT penalty does not map
    assert "--lp power" in capsys.readouterr().err
    if not ctranslate2.get_cuda_device_count():  # --device read without torch, as CTranslate2 sees the GPUs
        for device, says in (("cuda", "sees no CUDA GPU"), ("mps", "runs on cpu or cuda")):
            assert main([*translate, "--lp", "power", "--device", device]) == 2
            err = capsys.readouterr().err.strip()
            assert says in err and len(err.splitlines()) == 1
    if "bfloat16" not in ctranslate2.get_supported_compute_types("cpu"):  # CTranslate2 has no CPU bf16 (4.8)
        assert main([*translate, "--lp", "power", "--precision", "bf16"]) == 2
        err = capsys.readouterr().err.strip()
        assert "cannot compute in bfloat16 on this cpu" in err and len(err.splitlines()) == 1

    # As a process, --engine ct2 never imports torch (it starts as CTranslate2 does); the same output
    code = ("import sys\nfrom aiayn.cli import main\ncode = main(sys.argv[1:])\n"
            "print('torch' in sys.modules, file=sys.stderr)\nsys.exit(code)")
    out = tmp_path / "process.txt"
    done = subprocess.run([sys.executable, "-c", code, *translate[:-4], "--beam", "2", "--lp", "power", "--output",
                           str(out), "--device", "auto"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and done.stderr.strip().splitlines()[-1] == "False", done.stderr
    assert out.read_text().splitlines() == expect

    run_b = save_run(row_b, copy_data / "vocab.model", tmp_path / "run_b")
    assert main(["export", "--checkpoint", str(run_b), "--to", "hf", str(tmp_path / "hf_b")]) == 1
    assert "MarianMTModel cannot represent" in capsys.readouterr().err
    assert main(["export", "--checkpoint", str(run_b), "--to", "ct2", str(tmp_path / "ct2"), "--quantization",
                 "int8"]) == 1  # the folder exists
    assert "already exists" in capsys.readouterr().err


def test_cli_exports_the_run_shortlist_and_translates_with_it(model, vocab, copy_data, lines, tmp_path, capsys):
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    build_from_prepared(copy_data, per_source=1, frequent=0).save(run / "shortlist.safetensors")
    assert main(["export", "--checkpoint", str(run), "--to", "ct2", str(tmp_path / "ct2")]) == 0
    assert "its shortlist as vmap.txt" in capsys.readouterr().out and (tmp_path / "ct2" / "vmap.txt").is_file()
    (tmp_path / "in.txt").write_text("\n".join(lines[:8]) + "\n")
    translate = ["translate", "--engine", "ct2", "--checkpoint", str(tmp_path / "ct2"), "--input",
                 str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt"), "--beam", "1", "--lp", "power",
                 "--batch-size", "1", "--shortlist"]
    assert main(translate) == 0
    expect = CT2Translator(tmp_path / "ct2", use_vmap=True).translate(lines[:8], SearchConfig(beam=1, lp="power"),
                                                                       batch_size=1)
    assert (tmp_path / "out.txt").read_text().splitlines() == expect
    assert expect != translate_ct2(tmp_path / "ct2", lines[:8], SearchConfig(beam=1, lp="power"), batch_size=1)
    assert main([*translate, str(run / "shortlist.safetensors")]) == 2
    assert "--shortlist takes no FILE" in capsys.readouterr().err


def test_ct2_word_alignments_are_aiayns(model, vocab, ct2_dirs, lines):
    """alignments=True: CTranslate2's attention (the export asks for the top layer's heads averaged) gives the links
    aiayn's cross-attention gives, by the one recipe (aiayn.decoding.alignment); a blank line gets none."""
    greedy = SearchConfig(beam=1, **POWER)
    ours = Translator(model, vocab, greedy).translate_nbest(lines + [""], alignments=True)
    theirs = CT2Translator(ct2_dirs["tiny"], search=greedy).translate_nbest(lines + [""], alignments=True)
    same = [n for n, (a, b) in enumerate(zip(ours, theirs)) if a[0].text == b[0].text]
    assert len(same) > len(lines) * 0.9
    assert all(len(theirs[n][0].alignment) == len(theirs[n][0].text.split()) for n in same)
    agree = sum(ours[n][0].alignment == theirs[n][0].alignment for n in same)
    assert agree >= len(same) * 0.9, (agree, len(same))
    assert theirs[-1][0].alignment == []
    assert CT2Translator(ct2_dirs["tiny"], search=greedy).translate_nbest(lines[:1])[0][0].alignment is None
    flags = [n % 2 == 1 for n in range(len(lines) + 1)]  # one flag a line: those lines' links alone, the same ones
    some = CT2Translator(ct2_dirs["tiny"], search=greedy).translate_nbest(lines + [""], alignments=flags)
    assert [h[0].alignment for h in some] == [t[0].alignment if f else None for t, f in zip(theirs, flags)]
