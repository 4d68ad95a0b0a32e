"""Language pairs: prepare records them (flags or file suffixes), a run finds them through its data folder, and
byte fallback lets an unseen character through the vocabulary unchanged."""

from __future__ import annotations

import json

import pytest
from helpers import save_run, tiny_model

from aiayn.config import UNK_ID
from aiayn.data import Vocab, prepare
from aiayn.data.folder import META_FILE, read_meta, run_languages
from aiayn.errors import DataError
from aiayn.languages import check_code, pair_record


def test_pair_record():
    assert pair_record("en", "es") == {"source": "en", "target": "es"}
    assert pair_record(None, None, "train.en", "train.es") == {"source": "en", "target": "es"}
    assert pair_record("fr", "de", "train.en", "train.es") == {"source": "fr", "target": "de"}  # flags win
    for src, tgt in (("a.src", "a.tgt"), ("a.txt", "b.txt"), ("a.en", "a.en"), ("a", "b")):
        assert pair_record(None, None, src, tgt) is None
    with pytest.raises(ValueError, match="both --source-lang and --target-lang"):
        pair_record("en", None)
    with pytest.raises(ValueError, match="both 'en'"):
        pair_record("en", "en")
    with pytest.raises(ValueError, match="not a language code"):
        check_code("auto", "source")


def _corpus(folder, src_name, tgt_name, n=60):
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / src_name, folder / tgt_name
    src.write_text("".join(f"the cat {i} sat on the mat\n" for i in range(n)))
    tgt.write_text("".join(f"el gato {i} se sentó\n" for i in range(n)))
    return src, tgt


def test_prepare_records_languages_and_a_run_finds_them(tmp_path, capsys):
    src, tgt = _corpus(tmp_path / "raw", "train.en", "train.es")
    prepare(src, tgt, tmp_path / "data", vocab_size=60)
    assert read_meta(tmp_path / "data")["languages"] == {"source": "en", "target": "es"}
    assert "languages: en -> es" in capsys.readouterr().out
    # a run records its data folder in config.json (aiayn.training.run.run_record): the languages come from there
    vocab = Vocab.load(tmp_path / "data")
    run = save_run(tiny_model(len(vocab)), tmp_path / "data" / "vocab.model", tmp_path / "run")
    assert run_languages(run) is None  # no config.json
    (run / "config.json").write_text(json.dumps({"data": str(tmp_path / "data")}))
    assert run_languages(run) == ("en", "es")
    assert run_languages(next((run / "checkpoints").iterdir())) == ("en", "es")
    # given again with other codes: the same data, relabelled (no new content digest)
    digest = read_meta(tmp_path / "data")["content_sha256"]
    prepare(src, tgt, tmp_path / "data", vocab_size=60, languages=("en", "pt-BR"))
    assert run_languages(run) == ("en", "pt-BR") and read_meta(tmp_path / "data")["content_sha256"] == digest
    (tmp_path / "data" / META_FILE).unlink()
    assert run_languages(run) is None  # data moved away: nothing recorded, no error


def test_prepare_without_languages_says_so(tmp_path, capsys):
    src, tgt = _corpus(tmp_path / "raw", "a.src", "a.tgt")
    prepare(src, tgt, tmp_path / "data", vocab_size=60)
    assert read_meta(tmp_path / "data")["languages"] is None
    assert "languages: not recorded" in capsys.readouterr().out
    with pytest.raises(DataError, match="not a language code"):
        prepare(src, tgt, tmp_path / "data2", vocab_size=60, languages=("en", "e s"))


def test_prepare_cli_language_flags(tmp_path, capsys):
    from aiayn.cli import main

    src, tgt = _corpus(tmp_path / "raw", "a.src", "a.tgt")
    assert main(["prepare", "--src", str(src), "--tgt", str(tgt), "--out", str(tmp_path / "d"), "--vocab-size",
                 "60", "--source-lang", "en"]) == 1
    assert "give both --source-lang and --target-lang" in capsys.readouterr().err
    assert main(["prepare", "--src", str(src), "--tgt", str(tgt), "--out", str(tmp_path / "d"), "--vocab-size",
                 "60", "--source-lang", "en", "--target-lang", "es"]) == 0
    assert read_meta(tmp_path / "d")["languages"] == {"source": "en", "target": "es"}


RARE = "Rock 🎸 and Ξ-rays"  # an emoji and a Greek letter the training text never shows


@pytest.mark.parametrize("fallback, size", [(True, 300), (False, 100)])  # 256 byte pieces + the text's
def test_byte_fallback_round_trips_unseen_characters(tmp_path, fallback, size):
    src, tgt = _corpus(tmp_path / "raw", "train.en", "train.es")
    prepare(src, tgt, tmp_path / "data", vocab_size=size, byte_fallback=fallback)
    vocab = Vocab.load(tmp_path / "data")
    ids = vocab.encode(RARE)
    if fallback:
        assert UNK_ID not in ids and vocab.decode(ids) == RARE
        assert read_meta(tmp_path / "data")["options"]["byte_fallback"] is True
    else:
        assert UNK_ID in ids and vocab.decode(ids) != RARE
