"""The lexical shortlist: the builder on a corpus whose answer is worked out by hand, the file, and decoding with it
(a shortlist of every piece decodes exactly as the full vocabulary; a real one never leaves the batch's pieces, forces
prefix pieces outside it, and works in every precision and for ensembles)."""

import numpy as np
import pytest
import torch
from conftest import write_copy_corpus
from helpers import labelled_run, tiny_model

from aiayn.cli import main
from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data import Vocab, prepare
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.shortlist import Shortlist, Shortlisted, build, build_from_prepared, coverage, load, vmap_lines
from aiayn.decoding.translator import Translator, padded
from aiayn.errors import CheckpointError, DataError, UsageError


def flat(rows):
    """Pairs' ids as the prepared format holds them: concatenated, with offsets."""
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    return np.array([i for r in rows for i in r], dtype=np.int64), offsets


# source: 4 the, 5 house, 6 cat, 7 small; target: 10 das, 11 Haus, 12 die, 13 Katze, 14 klein, 15 kleine
CORPUS = [([4, 5], [10, 11]), ([4, 5], [10, 11]), ([4, 6], [12, 13]), ([7, 6], [15, 13]), ([4, 7, 5], [10, 14, 11]),
          ([UNK_ID, 7], [14])]


def tiny_shortlist(per_source=2, frequent=1, vocab_size=16):
    (src, so), (tgt, to) = flat([s for s, _ in CORPUS]), flat([t for _, t in CORPUS])
    return build(src, so, tgt, to, vocab_size, per_source, frequent)


def test_the_builder_keeps_the_best_dice_pieces_and_the_most_frequent():
    # c(house) = 3 pairs, c(Haus) = 3, c(das) = 3, c(house, Haus) = 3, c(house, das) = 3, c(house, klein) = 1:
    # Dice 1, 1 (tie: Haus and das co-occur 3 times each, the lower id first), 2/(3+2)
    # c(the) = 4; the: das 2*3/(4+3), Haus 6/7, die 2/(4+1), Katze 2/(4+2): das and Haus (ids break the tie)
    # c(small) = 3 (the UNK source piece is not counted); small: klein 2*2/(3+2) = 0.8, kleine 2/4, Katze 2/5, ...
    # cat: Katze 2*2/(2+2) = 1, then die and kleine 2/(2+1), the lower id first
    shortlist = tiny_shortlist()
    rows = shortlist.per_source.tolist()
    assert rows[5] == [10, 11] and rows[4] == [10, 11] and rows[7] == [14, 15] and rows[6] == [13, 12]
    assert rows[0] == rows[UNK_ID] == rows[8] == [-1, -1]  # specials, and pieces never seen, keep nothing
    assert shortlist.frequent.tolist() == [10]  # das and Haus: 3 tokens each, the lower id; Katze and klein 2
    assert tiny_shortlist(per_source=1, frequent=3).frequent.tolist() == [10, 11, 13]
    assert tiny_shortlist(per_source=0).per_source.shape == (16, 0)
    # the same answer whatever the chunking of the pairs (counted 2 pairs at a time)
    import aiayn.decoding.shortlist as module
    chunk, module._CHUNK_PAIRS = module._CHUNK_PAIRS, 2
    try:
        assert torch.equal(tiny_shortlist().per_source, shortlist.per_source)
    finally:
        module._CHUNK_PAIRS = chunk


def test_a_batch_allows_its_pieces_lists_the_frequent_the_specials_and_its_prefixes():
    shortlist = tiny_shortlist()
    src = padded([[5, EOS_ID], [6, 7, EOS_ID]])
    assert shortlist.allowed(src).tolist() == [PAD_ID, UNK_ID, BOS_ID, EOS_ID, 10, 11, 12, 13, 14, 15]
    assert shortlist.allowed(padded([[5, EOS_ID]]), [[9, 8]]).tolist() == [0, 1, 2, 3, 8, 9, 10, 11]
    assert coverage(shortlist, [[5], [6]], [[10, 11, 14], [13, EOS_ID]]) == 3 / 4  # klein is not cat's or house's


def test_the_file_round_trips_and_is_checked(tmp_path, copy_data):
    shortlist = build_from_prepared(copy_data, per_source=5, frequent=7)
    path = shortlist.save(tmp_path / "s.safetensors")
    vocab = Vocab.load(copy_data)
    again = load(path, vocab)
    assert torch.equal(again.per_source, shortlist.per_source) and torch.equal(again.frequent, shortlist.frequent)
    assert again.describe() == {"per_source": 5, "frequent": 7, "score": "dice"}
    assert build_from_prepared(copy_data, per_source=5, frequent=7).per_source.equal(shortlist.per_source)
    # the same data, the same file: bytes too (safetensors' header keys come in a random order unless sorted)
    copies = [build_from_prepared(copy_data, per_source=5, frequent=7).save(tmp_path / f"s{i}.st") for i in range(4)]
    assert all(p.read_bytes() == path.read_bytes() for p in copies)
    with pytest.raises(UsageError, match="no shortlist at .*aiayn shortlist"):
        load(tmp_path / "none.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="not a shortlist file"):
        load(tmp_path / "junk.safetensors")
    Shortlist(shortlist.per_source[:50], shortlist.frequent, shortlist.vocab_sha256).save(tmp_path / "small.st")
    with pytest.raises(DataError, match="another vocabulary"):
        load(tmp_path / "small.st", vocab)
    with pytest.raises(DataError, match="another vocabulary"):  # the same size, another SentencePiece model
        Shortlist(shortlist.per_source, shortlist.frequent, "0" * 64).save(tmp_path / "other.st")
        load(tmp_path / "other.st", vocab)


@pytest.fixture(scope="module")
def setup(copy_data):
    vocab = Vocab.load(copy_data / "vocab.model")
    lines = (copy_data / "test.src.txt").read_text().splitlines()[:12]
    return tiny_model(len(vocab), eos_bias=2.0), vocab, lines


def everything(vocab_size: int) -> Shortlist:
    """A shortlist that allows every piece."""
    return Shortlist(torch.arange(vocab_size).repeat(vocab_size, 1), torch.zeros(0, dtype=torch.long))


SEARCHES = [SearchConfig(max_len_b=8, nbest=2), SearchConfig(beam=1, max_len_b=8),
            SearchConfig(beam=3, max_len_b=8, no_repeat_ngram_size=2, lp="power"),
            SearchConfig(sampling=True, nbest=2, top_k=5, temperature=0.8, max_len_b=8)]


@pytest.mark.parametrize("precision, prepack", [("fp32", None), ("fp32", False), ("bf16", False), ("int8", None)])
@pytest.mark.parametrize("search", SEARCHES, ids=["beam", "greedy", "no-repeat", "sampling"])
def test_a_shortlist_of_every_piece_decodes_as_the_full_vocabulary(setup, precision, prepack, search):
    model, vocab, lines = setup
    prefixes = ["", "ALPHA", "", "BRAVO CHARLIE"] * 3
    out = []
    for shortlist in (None, everything(len(vocab))):
        t = Translator(model, vocab, search, precision, batch_size=5, prepack=prepack, shortlist=shortlist)
        out.append([[(h.text, h.score, h.positional_scores) for h in hs]
                    for hs in t.translate_nbest(lines, prefixes=prefixes)])
    assert out[0] == out[1]


def outputs_and_allowed(t: Translator, lines, prefixes=None):
    """Every hypothesis's tokens, and what its batch (of one line: batch_size 1) allowed."""
    sources = t.encode(lines)
    prefix_ids = None if prefixes is None else [vocab_ids(t.vocab, p) for p in prefixes]
    hyps = t.search_ids(sources, prefixes=prefix_ids)
    allowed = [set(t.shortlist.allowed(padded([s]), prefix_ids and [prefix_ids[i]]).tolist())
               for i, s in enumerate(sources)]
    return hyps, allowed, prefix_ids


def vocab_ids(vocab, text):
    return vocab.encode(text) if text else []


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_no_output_piece_lies_outside_its_batch_allowed_pieces(setup, copy_data, precision):
    model, vocab, lines = setup
    shortlist = build_from_prepared(copy_data, per_source=3, frequent=2)
    for search in SEARCHES:
        t = Translator(model, vocab, search, precision, batch_size=1, shortlist=shortlist)
        hyps, allowed, _ = outputs_and_allowed(t, lines)
        assert all(len(a) < len(vocab) / 2 for a in allowed)  # a real restriction
        assert all(set(h.tokens) <= a for hs, a in zip(hyps, allowed) for h in hs)
        full = Translator(model, vocab, search, precision, batch_size=1).search_ids(t.encode(lines))
        assert any(not set(h.tokens) <= a for hs, a in zip(full, allowed) for h in hs)  # the model would leave it
    # a batch of many lines allows the union of their pieces
    t = Translator(model, vocab, SEARCHES[0], precision, batch_size=64, shortlist=shortlist)
    union = set(shortlist.allowed(padded([s for s in t.encode(lines)])).tolist())
    assert all(set(h.tokens) <= union for hs in t.search_ids(t.encode(lines)) for h in hs)


class WholeVocabulary(torch.nn.Module):
    """A shortlisted model seen through its `decode` alone: logits over the whole vocabulary, -inf outside the
    shortlist (how the searches ran it before they ranked its pieces alone)."""

    def __init__(self, shortlisted):
        super().__init__()
        self.inner, self.cfg = shortlisted, shortlisted.cfg

    def encode(self, src):
        return self.inner.encode(src)

    def new_cache(self):
        return self.inner.new_cache()

    def decode(self, *args, **kw):
        return self.inner.decode(*args, **kw)


def test_the_search_ranks_the_shortlists_pieces_alone_as_the_whole_vocabulary_would(setup, copy_data, monkeypatch):
    """Every search over the shortlist's columns (V', what decode_pieces gives) finds what it finds over the whole
    vocabulary with -inf outside them: the same pieces, the same scores up to the log-softmax's rounding; prefixes and
    n-gram bans (masks over the vocabulary) cut to those columns. The wide logits are never made. (fp32: in int8 a
    tie broken otherwise changes the batch's rows, and so every row's activation scale; the other precisions are
    held to the shortlist by the test below.)"""
    model, vocab, lines = setup
    shortlist = build_from_prepared(copy_data, per_source=3, frequent=2)
    prefixes = ["", "ALPHA", "", "BRAVO CHARLIE"] * 3
    for search in SEARCHES:
        t = Translator(model, vocab, search, "fp32", batch_size=5, shortlist=shortlist)
        sources, prefix_ids = t.encode(lines), [vocab_ids(vocab, p) for p in prefixes]
        with monkeypatch.context() as m:
            m.setattr(Shortlist, "restrict", lambda self, *args, real=Shortlist.restrict: WholeVocabulary(
                real(self, *args)))
            before = t.search_ids(sources, prefixes=prefix_ids)
        with monkeypatch.context() as m:
            m.setattr(Shortlisted, "decode", lambda *a, **k: pytest.fail("the search made the wide logits"))
            after = t.search_ids(sources, prefixes=prefix_ids)
        assert [[h.tokens for h in hs] for hs in after] == [[h.tokens for h in hs] for hs in before]
        for hs, gs in zip(after, before):
            for h, g in zip(hs, gs):
                assert h.score == pytest.approx(g.score, abs=1e-5)
                assert h.positional_scores == pytest.approx(g.positional_scores, abs=1e-5)


def test_prefix_pieces_outside_the_shortlist_are_still_forced(setup, copy_data):
    model, vocab, lines = setup
    shortlist = build_from_prepared(copy_data, per_source=1, frequent=0)
    t = Translator(model, vocab, SearchConfig(max_len_b=8), batch_size=1, shortlist=shortlist)
    before = [set(shortlist.allowed(padded([s])).tolist()) for s in t.encode(lines)]
    outside = next(w for w in ("GOLF", "HOTEL", "INDIA", "JULIET") if not set(vocab.encode(w)) <= before[0])
    prefixes = [outside] + [""] * (len(lines) - 1)
    hyps, allowed, prefix_ids = outputs_and_allowed(t, lines, prefixes)
    assert hyps[0][0].tokens[: len(prefix_ids[0])] == prefix_ids[0]
    assert set(prefix_ids[0]) <= allowed[0] and all(set(h.tokens) <= a for hs, a in zip(hyps, allowed) for h in hs)


def test_an_ensemble_with_a_shortlist_of_every_piece_decodes_as_without(setup):
    model, vocab, lines = setup
    members = [model, tiny_model(len(vocab), seed=1, eos_bias=2.0)]
    out = [Translator(members, vocab, SearchConfig(max_len_b=8), shortlist=s).translate_nbest(lines)
           for s in (None, everything(len(vocab)))]
    assert [[(h.text, h.score) for h in hs] for hs in out[0]] == [[(h.text, h.score) for h in hs] for hs in out[1]]


def test_a_shortlist_of_another_size_is_refused(setup):
    model, vocab, _ = setup
    with pytest.raises(UsageError, match="covers 50 pieces but the model has"):
        Translator(model, vocab, shortlist=everything(50))


def test_the_vocabulary_map_lists_each_source_piece_and_the_frequent_ones(copy_data):
    vocab = Vocab.load(copy_data)
    lines = vmap_lines(tiny_shortlist(vocab_size=len(vocab)), vocab)
    piece = vocab.piece
    assert lines[0] == "\t" + piece(10)
    assert lines[1:] == [f"{piece(s)}\t{piece(a)} {piece(b)}" for s, (a, b) in
                         ((4, (10, 11)), (5, (10, 11)), (6, (13, 12)), (7, (14, 15)))]


def test_the_commands_build_use_and_refuse_shortlists(copy_data, tmp_path, capsys):
    """`aiayn shortlist --out RUN` counts the run's own data; `translate --shortlist` decodes with it (or with FILE);
    a run without one, and a shortlist of another vocabulary, are one clear error line each."""
    vocab = Vocab.load(copy_data)
    model = tiny_model(len(vocab), eos_bias=2.0)
    run = labelled_run(model, copy_data, tmp_path, ("en", "de"))  # its data: tmp_path / "data"
    lines = (copy_data / "test.src.txt").read_text().splitlines()[:8]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    translate = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "out.txt"), "--max-len-b", "8", "--shortlist"]

    def one_error(argv, code, says):
        assert main(argv) == code
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err

    one_error(translate, 2, f"has no shortlist ({run / 'shortlist.safetensors'}); build it with `aiayn shortlist "
                            f"--out {run}`")
    assert main(["shortlist", "--out", str(run), "--per-source", "3", "--frequent", "2"]) == 0
    assert f"wrote {run / 'shortlist.safetensors'}" in capsys.readouterr().out
    expected = build_from_prepared(tmp_path / "data", per_source=3, frequent=2)
    assert load(run / "shortlist.safetensors", vocab).per_source.equal(expected.per_source)
    assert main(translate) == 0
    search = SearchConfig(max_len_b=8)
    with_it = Translator(model, vocab, search, shortlist=expected).translate(lines)
    assert (tmp_path / "out.txt").read_text().splitlines() == with_it != Translator(model, vocab, search).translate(
        lines)

    assert main(["shortlist", "--data", str(copy_data), "--output", str(tmp_path / "s.st"), "--per-source", "1",
                 "--frequent", "0"]) == 0
    assert main([*translate, str(tmp_path / "s.st")]) == 0
    with_file = Translator(model, vocab, search, shortlist=load(tmp_path / "s.st")).translate(lines)
    assert (tmp_path / "out.txt").read_text().splitlines() == with_file != with_it
    # --out names a run directory; a file is --output
    one_error(["shortlist", "--data", str(copy_data), "--out", str(tmp_path / "old.st")], 2, "is not a run directory")

    one_error(["shortlist", "--output", str(tmp_path / "nothing.st")], 2, "--output FILE needs --data")
    one_error(["shortlist", "--out", str(tmp_path / "nothing")], 2, "is not a run directory")
    one_error(["shortlist", "--out", str(copy_data)], 1, "is a prepared-data directory, not a run directory")
    one_error(["shortlist", "--out", str(run), "--per-source", "-1"], 2, "--per-source: must be an integer >= 0")
    src, tgt = write_copy_corpus(tmp_path / "raw", 100, seed=5)
    prepare(src, tgt, tmp_path / "other", vocab_size=90)
    one_error(["shortlist", "--data", str(tmp_path / "other"), "--out", str(run)], 1, "has another vocabulary")
    build_from_prepared(tmp_path / "other").save(tmp_path / "other.st")
    one_error([*translate, str(tmp_path / "other.st")], 1, "was built for another vocabulary")
