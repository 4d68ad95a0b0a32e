"""Tests of aiayn.data / aiayn.vocab: text -> prepared directory -> batches, on real and planted text."""

from __future__ import annotations

import itertools
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import SHARED_DATA

from aiayn.cli import main as cli_main
from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data import TokenBatchSampler, Vocab, builtin_corpus, collate, load_split, load_wmt14, prepare
from aiayn.data.corpora import BUILTIN_HELD_OUT
from aiayn.errors import DataError

needs_shared = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(), reason=f"real corpora not found at {SHARED_DATA} (../shared)"
)


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def bible(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    return builtin_corpus(tmp_path_factory.mktemp("bible"))


@pytest.fixture(scope="module")
def prepared(bible, tmp_path_factory) -> Path:
    """The first 4,000 training verses and the real valid split, with a 1,000-piece vocabulary."""
    tmp = tmp_path_factory.mktemp("prepared")
    src = write(tmp / "train.en", read(bible["train"][0])[:4000])
    tgt = write(tmp / "train.es", read(bible["train"][1])[:4000])
    prepare(src, tgt, tmp / "data", vocab_size=1000, valid=bible["valid"], seed=1)
    return tmp / "data"


# --- built-in corpus ---------------------------------------------------------------------------------


def test_builtin_corpus_holds_out_whole_books(bible, tmp_path):
    counts = {split: len(read(en)) for split, (en, _) in bible.items()}
    assert counts == {"train": 29_195, "valid": 1_003, "test": 879}
    for en, es in bible.values():  # still verse-aligned
        assert len(read(en)) == len(read(es))
    assert read(bible["test"][0])[0].startswith("In the beginning was the Word")  # John 1:1
    assert "Theophilus" in read(bible["valid"][0])[0]  # Acts 1:1
    assert set(BUILTIN_HELD_OUT) == {"Acts", "John"}
    assert builtin_corpus(bible["train"][0].parent) == bible  # second call: already extracted


# --- vocabulary and round trip -------------------------------------------------------------------------


def test_vocab_special_ids_and_round_trip(prepared, bible):
    vocab = Vocab.load(prepared)
    assert len(vocab) == 1000
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    assert [vocab.piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert Vocab.load(vocab.model_path).model_path == vocab.model_path
    lines = read(bible["valid"][0])[:200] + read(bible["valid"][1])[:200]
    for line in lines:
        ids = vocab.encode(line)
        assert ids and BOS_ID not in ids and EOS_ID not in ids
        if UNK_ID not in ids:
            assert vocab.decode(ids) == line
        # decode skips BOS/PAD and stops at the first EOS, whatever the container
        assert vocab.decode(torch.tensor([BOS_ID, *ids, EOS_ID, 5, PAD_ID])) == vocab.decode(ids)
        assert vocab.decode(np.array(ids + [EOS_ID])) == vocab.decode(ids)
    assert sum(UNK_ID in vocab.encode(line) for line in lines) <= 2


def test_ids_cache_matches_text(prepared):
    vocab, valid = Vocab.load(prepared), load_split(prepared, "valid")
    src_text, tgt_text = (read(p) for p in valid.text_paths)
    assert len(valid) == len(src_text) == len(tgt_text) == 1003
    for i in (0, 1, 500, 1002):
        src, tgt = valid[i]
        assert src.tolist() == vocab.encode(src_text[i]) and tgt.tolist() == vocab.encode(tgt_text[i])
        assert valid.src_lengths[i] == len(src) + 1 and valid.tgt_lengths[i] == len(tgt) + 1
    assert load_split(prepared, "train")[0][0].dtype == np.uint16  # 1,000 pieces fit in 16 bits
    all_src, all_tgt = valid.ids()  # the whole split at once: pair i at its offsets
    (s0, t0), (s1, t1) = valid.offsets[:, 500], valid.offsets[:, 501]
    assert all_src[s0:s1].tolist() == valid[500][0].tolist() and all_tgt[t0:t1].tolist() == valid[500][1].tolist()
    copy = pickle.loads(pickle.dumps(valid))  # as DataLoader workers get it: the maps are reopened
    assert copy._ids is None and copy[500][1].tolist() == valid[500][1].tolist()
    with pytest.raises(IndexError):
        valid[len(valid)]


def test_vocabulary_is_deterministic_for_a_seed(bible, tmp_path):
    lines = [read(path)[:3000] for path in bible["train"]]
    src, tgt = write(tmp_path / "s", lines[0]), write(tmp_path / "t", lines[1])

    def pieces(name: str, seed: int) -> list[str]:  # the vocabulary trains on a 1,000-sentence sample
        prepare(src, tgt, tmp_path / name, vocab_size=500, seed=seed, vocab_sample=1000)
        vocab = Vocab.load(tmp_path / name)
        return [vocab.piece(i) for i in range(len(vocab))]

    assert pieces("a", seed=1) == pieces("b", seed=1)
    assert pieces("a", seed=1) != pieces("c", seed=2)


# --- prepare: filtering, errors, reuse ------------------------------------------------------------------


def test_filter_counts_on_planted_bad_lines(prepared, tmp_path, capsys):
    good = [("In the beginning.", "En el principio."), ("God said.", "Dijo Dios."), ("So.", "Y fué así.")]
    long = " ".join(["word"] * 21)
    planted = [  # (source, target, why it is dropped from train, or None)
        (*good[0], None),
        ("", "Y dijo Dios.", "empty"),
        ("And God said.", "", "empty"),
        ("   ", "Y dijo.", "empty"),
        (long, "Palabra.", "too_long"),
        ("Light.", "Y dijo Dios: Sea la luz: y fué la luz y fué la luz.", "ratio"),  # 1 word vs 14
        (*good[1], None),
        ("Be light, and there was light and it was good and God saw", "Luz.", "ratio"),
        (*good[2], None),
    ]
    src, tgt = write(tmp_path / "s", [p[0] for p in planted]), write(tmp_path / "t", [p[1] for p in planted])
    summary = prepare(src, tgt, tmp_path / "out", valid=(src, tgt), max_len=20, max_ratio=9, vocab=prepared)
    train, valid = summary["splits"]["train"], summary["splits"]["valid"]
    assert (train["read"], train["kept"]) == (9, 3)
    assert train["dropped"] == {"empty": 3, "too_long": 1, "ratio": 2}
    assert train["dropped_lines"] == {"empty": [2, 3, 4], "too_long": [5], "ratio": [6, 8]}
    out = capsys.readouterr().out
    assert "9 pairs read, 3 kept, 6 dropped: 3 empty" in out and "1 longer than 20 words" in out
    # valid/test keep every non-empty pair, and their text exactly
    assert (valid["kept"], valid["dropped"]) == (6, {"empty": 3, "too_long": 0, "ratio": 0})
    kept = [p for p in planted if p[0].strip() and p[1].strip()]
    assert (tmp_path / "out/valid.src.txt").read_text(encoding="utf-8") == "".join(p[0] + "\n" for p in kept)
    # the kept training pairs are exactly the good ones, in order
    vocab, ds = Vocab.load(tmp_path / "out"), load_split(tmp_path / "out", "train")
    assert [(vocab.decode(s), vocab.decode(t)) for s, t in (ds[i] for i in range(len(ds)))] == good
    assert Path(vocab.model_path).read_bytes() == Vocab.load(prepared).model_path.read_bytes()


def test_mismatched_line_counts_name_both_files(tmp_path, prepared):
    src, tgt = write(tmp_path / "a.en", ["one", "two", "three"]), write(tmp_path / "a.es", ["uno", "dos"])
    with pytest.raises(DataError, match=r"a\.en has 3 lines, .*a\.es has 2"):
        prepare(src, tgt, tmp_path / "out", vocab=prepared)


def test_broken_utf8_names_file_and_line(tmp_path, prepared):
    src = tmp_path / "bad.en"
    src.write_bytes(b"fine\nalso fine\ncaf\xe9 latin-1\n")
    tgt = write(tmp_path / "ok.es", ["bien", "bien", "cafe"])
    with pytest.raises(DataError, match=r"bad\.en, line 3: not valid UTF-8"):
        prepare(src, tgt, tmp_path / "out", vocab=prepared)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()  # nothing half-written


def test_tsv_input_and_its_errors(tmp_path, prepared):
    tsv = write(tmp_path / "pairs.tsv", ["Hello.\tHola.", "Yes.\tSí."])
    summary = prepare(None, None, tmp_path / "out", tsv=tsv, vocab=prepared)
    assert summary["splits"]["train"]["kept"] == 2
    bad = write(tmp_path / "bad.tsv", ["Hello.\tHola.", "no tab here"])
    with pytest.raises(DataError, match=r"bad\.tsv, line 2: expected 2 tab-separated fields"):
        prepare(None, None, tmp_path / "out2", tsv=bad, vocab=prepared)
    with pytest.raises(DataError, match="either as --src and --tgt"):
        prepare(tsv, None, tmp_path / "out3", tsv=tsv, vocab=prepared)


def test_other_input_errors(tmp_path, prepared):
    src, tgt = write(tmp_path / "s", ["a b c"] * 5), write(tmp_path / "t", ["x y z"] * 5)
    with pytest.raises(DataError, match="Small corpora need a smaller --vocab-size"):
        prepare(src, tgt, tmp_path / "big", vocab_size=37000)
    with pytest.raises(DataError, match="no such file"):
        prepare(tmp_path / "missing", tgt, tmp_path / "out", vocab=prepared)
    with pytest.raises(DataError, match="no 'test' split"):
        load_split(prepared, "test")
    with pytest.raises(DataError, match="not a prepared-data directory"):
        load_split(tmp_path, "train")
    with pytest.raises(DataError, match="no vocabulary"):
        Vocab.load(tmp_path)


def test_prepare_again_reuses_and_refuses_other_inputs(tmp_path, prepared, capsys):
    src, tgt = write(tmp_path / "s", ["Hello.", "Yes."]), write(tmp_path / "t", ["Hola.", "Sí."])
    first = prepare(src, tgt, tmp_path / "out", vocab=prepared)
    mtime = (tmp_path / "out/train.src.bin").stat().st_mtime_ns
    again = prepare(src, tgt, tmp_path / "out", vocab=prepared)
    assert again["reused"] and not first["reused"] and again["splits"] == first["splits"]
    assert "reusing it" in capsys.readouterr().out
    assert (tmp_path / "out/train.src.bin").stat().st_mtime_ns == mtime
    with pytest.raises(DataError, match=r"differs in: options\.max_len"):
        prepare(src, tgt, tmp_path / "out", vocab=prepared, max_len=10)


def test_two_prepares_of_one_folder_at_once_take_turns(tmp_path, prepared):
    """Two quickstarts into one --out prepare the same folder at once: the second waits, then reuses it."""
    import concurrent.futures

    src, tgt = write(tmp_path / "s", ["Hello.", "Yes."]), write(tmp_path / "t", ["Hola.", "Sí."])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: prepare(src, tgt, tmp_path / "out", vocab=prepared), range(2)))
    assert sorted(r["reused"] for r in results) == [False, True]
    assert not (tmp_path / "out.partial").exists()


def test_prepare_records_every_file_and_data_without_the_record_are_refused(tmp_path, prepared):
    import hashlib

    src, tgt = write(tmp_path / "s", ["Hello.", "Yes."]), write(tmp_path / "t", ["Hola.", "Sí."])
    prepare(src, tgt, tmp_path / "out", vocab=prepared)
    meta = json.loads((tmp_path / "out/meta.json").read_text())
    names = {"vocab.model", "vocab.vocab", "train.src.bin", "train.tgt.bin", "train.idx.npy"}
    assert meta["format"] == 2 and set(meta["files"]) == names
    for name, record in meta["files"].items():
        raw = (tmp_path / "out" / name).read_bytes()
        assert record == {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    digest = meta["content_sha256"]
    assert prepare(src, tgt, tmp_path / "out", vocab=prepared)["reused"]
    assert json.loads((tmp_path / "out/meta.json").read_text())["content_sha256"] == digest
    del meta["files"], meta["content_sha256"]
    (tmp_path / "out/meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="prepare the data again"):
        prepare(src, tgt, tmp_path / "out", vocab=prepared)


def test_cli_prints_error_without_traceback(tmp_path, capsys):
    src, tgt = write(tmp_path / "a.en", ["one", "two"]), write(tmp_path / "a.es", ["uno"])
    assert cli_main(["prepare", "--src", str(src), "--tgt", str(tgt), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: line counts differ") and "Traceback" not in err


def test_cli_prepare(tmp_path, prepared, capsys):
    src, tgt = write(tmp_path / "a.en", ["Hello.", "Yes."]), write(tmp_path / "a.es", ["Hola.", "Sí."])
    args = ["prepare", "--src", str(src), "--tgt", str(tgt), "--test-src", str(src), "--test-tgt", str(tgt),
            "--out", str(tmp_path / "o"), "--vocab", str(prepared)]
    assert cli_main(args) == 0
    meta = json.loads((tmp_path / "o/meta.json").read_text())
    assert set(meta["splits"]) == {"train", "test"} and meta["vocab_size"] == 1000


# --- batching ------------------------------------------------------------------------------------------


def random_lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(2, 60, n)
    return src, np.clip(src + rng.integers(-8, 9, n), 2, None)


def padded(batch: list[int], lengths: np.ndarray) -> int:
    return len(batch) * int(lengths[batch].max())


def test_batches_respect_the_token_limit_and_cover_each_pair_once():
    src, tgt = random_lengths(3000)
    sampler = TokenBatchSampler(src, tgt, max_tokens=500, seed=7)
    for epoch in range(2):
        batches = list(sampler)
        assert len(batches) == len(sampler) and sampler.epoch == epoch + 1
        assert all(padded(b, src) <= 500 and padded(b, tgt) <= 500 for b in batches)
        assert sorted(itertools.chain(*batches)) == list(range(3000))


def test_batch_order_is_a_function_of_seed_and_epoch():
    src, tgt = random_lengths(2000)
    a, b, c = (TokenBatchSampler(src, tgt, 400, seed=s) for s in (1, 1, 2))
    epoch0 = list(a)
    assert epoch0 == list(b) and epoch0 != list(c)
    assert list(a) != epoch0  # epoch 1 differs
    fixed = TokenBatchSampler(src, tgt, 400, shuffle=False)
    assert list(fixed) == list(fixed)


def test_resume_mid_epoch_yields_the_remaining_batches():
    src, tgt = random_lengths(2000)
    full = TokenBatchSampler(src, tgt, 400, seed=3)
    list(full)  # epoch 0
    expected = list(full)  # epoch 1
    run = TokenBatchSampler(src, tgt, 400, seed=3)
    list(run)
    seen = list(itertools.islice(run, 10))  # stop after 10 batches of epoch 1
    state = run.state_dict()
    assert state == {"epoch": 1, "position": 10, "world_size": 1}
    resumed = TokenBatchSampler(src, tgt, 400, seed=3)
    resumed.load_state_dict(json.loads(json.dumps(state)))  # as saved in a checkpoint
    assert seen + list(resumed) == expected
    assert resumed.state_dict() == {"epoch": 2, "position": 0, "world_size": 1}


@pytest.mark.parametrize("world_size", [2, 3, 8])
def test_rank_split_covers_every_pair_once_with_equal_counts(world_size):
    src, tgt = random_lengths(1500, seed=world_size)
    ranks = [TokenBatchSampler(src, tgt, 700, seed=5, rank=r, world_size=world_size)
             for r in range(world_size)]
    batches = [list(s) for s in ranks]
    assert len({len(b) for b in batches}) == 1 and len(batches[0]) == len(ranks[0])
    assert sorted(itertools.chain(*itertools.chain(*batches))) == list(range(1500))
    assert all(padded(b, src) <= 700 and padded(b, tgt) <= 700 for b in itertools.chain(*batches))
    with pytest.raises(DataError, match="same number of ranks"):
        TokenBatchSampler(src, tgt, 700).load_state_dict(ranks[0].state_dict())


def test_rank_split_with_fewer_batches_than_ranks():
    ranks = [TokenBatchSampler([3] * 10, [4] * 10, 1000, rank=r, world_size=4) for r in range(4)]
    batches = [list(s) for s in ranks]
    assert all(len(b) == 1 for b in batches)
    assert sorted(itertools.chain(*itertools.chain(*batches))) == list(range(10))


def test_rank_split_refuses_what_cannot_be_shared_equally():
    with pytest.raises(DataError, match="3 single-pair batches cannot be shared equally by 2 ranks"):
        len(TokenBatchSampler([50, 60, 70], [5, 6, 7], max_tokens=100, world_size=2))


def test_pair_longer_than_max_tokens_is_an_error():
    with pytest.raises(DataError, match="pair 1 has 90 tokens .* raise max_tokens"):
        TokenBatchSampler([5, 90, 7], [5, 6, 7], max_tokens=64)


def test_collate_layout():
    pairs = [(np.array([7, 8, 9], np.uint16), np.array([10, 11], np.uint16)),
             (np.array([5]), np.array([6, 4, 4, 4]))]
    batch = collate(pairs)
    E, B = EOS_ID, BOS_ID
    assert batch.src.tolist() == [[7, 8, 9, E], [5, E, 0, 0]]
    assert batch.tgt_in.tolist() == [[B, 10, 11, 0, 0], [B, 6, 4, 4, 4]]
    assert batch.tgt_out.tolist() == [[10, 11, E, 0, 0], [6, 4, 4, 4, E]]
    assert batch.src.dtype == torch.long and len(batch) == 2
    assert (batch.n_src_tokens, batch.n_tgt_tokens) == (6, 8)
    assert batch.to("cpu").src.tolist() == batch.src.tolist()


def test_prepared_split_through_sampler_and_collate(prepared):
    ds = load_split(prepared, "train")
    sampler = TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, max_tokens=2000, seed=1)
    for indices in itertools.islice(sampler, 5):
        batch = collate([ds[i] for i in indices])
        assert batch.src.numel() <= 2000 and batch.tgt_in.numel() <= 2000
        assert batch.n_src_tokens == ds.src_lengths[indices].sum() == (batch.src != PAD_ID).sum()
        assert batch.n_tgt_tokens == ds.tgt_lengths[indices].sum() == (batch.tgt_out != PAD_ID).sum()


@needs_shared
def test_padding_share_on_multi30k(tmp_path):
    """Length grouping keeps >= 95% real tokens per side on Multi30k train at 4,096 tokens per batch."""
    m30k = SHARED_DATA / "multi30k"
    prepare(m30k / "train.en", m30k / "train.de", tmp_path / "m30k", vocab_size=8000, vocab_sample=20_000)
    ds = load_split(tmp_path / "m30k", "train")
    batches = list(TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, max_tokens=4096, seed=1))
    for lengths in (ds.src_lengths, ds.tgt_lengths):
        real = sum(int(lengths[b].sum()) for b in batches)
        assert real / sum(padded(b, lengths) for b in batches) >= 0.95


# --- WMT14 loader ----------------------------------------------------------------------------------------


def test_load_wmt14_from_a_local_dataset(tmp_path):
    datasets = pytest.importorskip("datasets", reason="load_wmt14 needs the `datasets` package")
    rows = {
        "train": [{"de": "Hallo Welt.", "en": "Hello world."},
                  {"de": "Zwei\nZeilen.", "en": "Two\r\nlines."}],
        "validation": [{"de": "Ja.", "en": "Yes."}],
        "test": [{"de": "Nein.", "en": "No."}],
    }
    dataset = datasets.DatasetDict({split: datasets.Dataset.from_dict({"translation": translations})
                                    for split, translations in rows.items()})
    paths = load_wmt14("de-en", src_lang="en", tgt_lang="de", out_dir=tmp_path, dataset=dataset)
    assert paths["train"] == (tmp_path / "train.en", tmp_path / "train.de")
    assert paths["train"][0].read_text(encoding="utf-8") == "Hello world.\nTwo  lines.\n"
    assert paths["train"][1].read_text(encoding="utf-8") == "Hallo Welt.\nZwei Zeilen.\n"
    assert paths["valid"][1].read_text(encoding="utf-8") == "Ja.\n"
    assert paths["test"][0].read_text(encoding="utf-8") == "No.\n"
    with pytest.raises(DataError, match="do not match"):
        load_wmt14("de-en", src_lang="en", tgt_lang="fr", out_dir=tmp_path, dataset=dataset)
