"""export --to argos: argostranslate itself installs the package and translates as aiayn's CTranslate2 export does.

argostranslate runs in a fresh Python where `import aiayn` fails, with its home, data, config, cache and packages
folders under tmp_path (it reads them from the environment when it is first imported, and creates them). Offline,
its sentence splitter is the package's spaCy pipeline (ARGOS_CHUNK_TYPE=SPACY); its multilingual spaCy model, which
it would try to download when imported, is marked as cached so that the test uses no network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import spacy
from helpers import labelled_run, save_run, tiny_model
from test_export import train_tiny

from aiayn.cli import main
from aiayn.data import Vocab
from aiayn.data.folder import run_languages
from aiayn.decoding.ct2 import CT2Translator
from aiayn.decoding.search import SearchConfig
from aiayn.errors import UsageError, UserError
from aiayn.export.argos import ARGOS_DECODING, export_argos, language_name
from aiayn.export.ct2 import export_ct2

NAME = "translate-en_de-1_0"


def argos_search(beam: int = ARGOS_DECODING["beam_size"], alpha: float = ARGOS_DECODING["length_penalty"]):
    """aiayn's search settings that are argostranslate's (ARGOS_DECODING), optionally with another beam or alpha."""
    return SearchConfig(beam=beam, lp="power", alpha=alpha, max_len_a=0.0,
                        max_len_b=ARGOS_DECODING["max_decoding_length"], min_len=ARGOS_DECODING["min_decoding_length"])


@pytest.fixture(scope="module")
def vocab(copy_data) -> Vocab:
    return Vocab.load(copy_data)


@pytest.fixture(scope="module")
def model(copy_data, vocab):
    return train_tiny(copy_data, len(vocab))


@pytest.fixture(scope="module")
def lines(copy_data) -> list[str]:
    return ((copy_data / "test.src.txt").read_text().splitlines()
            + (copy_data / "valid.src.txt").read_text().splitlines())


@pytest.fixture(scope="module")
def package(model, vocab, tmp_path_factory):
    return export_argos(model, vocab, tmp_path_factory.mktemp("argos") / f"{NAME}.argosmodel", "en", "de")


ARGOS_SCRIPT = """
import json, sys
sys.modules["aiayn"] = None  # any import of aiayn now raises ImportError
import argostranslate.package, argostranslate.translate
argostranslate.package.install_from_path(sys.argv[1])
languages = argostranslate.translate.get_installed_languages()
texts = json.loads(sys.stdin.read())
print(json.dumps({"languages": [[lang.code, lang.name] for lang in languages],
                  "translations": [argostranslate.translate.translate(t, "en", "de") for t in texts]}))
"""


def argos_translate(package, texts: list[str], home) -> dict:
    """Install `package` into a fresh argostranslate under `home` and translate `texts` en -> de with it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGOS_", "XDG_"))}
    env |= {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_CACHE_HOME": str(home / "cache"),
           "ARGOS_PACKAGES_DIR": str(home / "packages"), "ARGOS_CHUNK_TYPE": "SPACY",
           "ARGOS_COMPUTE_TYPE": "default",  # the exported float32 (argostranslate's default "auto" may pick int8)
           "ARGOS_INTRA_THREADS": "1", "OMP_NUM_THREADS": "1"}
    (home / "cache" / "argos-translate" / "spacy" / "senter" / "model").mkdir(parents=True)  # no download try
    done = subprocess.run([sys.executable, "-c", ARGOS_SCRIPT, str(package)], input=json.dumps(texts), env=env,
                          cwd=home, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (home / "packages" / NAME / "metadata.json").is_file()  # installed where it was told, nowhere else
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_package_is_one_folder_as_argostranslate_reads_it(package, vocab):
    with zipfile.ZipFile(package) as zf:
        names = zf.namelist()
        assert {n.split("/")[0] for n in names} == {NAME}
        for part in ("metadata.json", "sentencepiece.model", "model/model.bin", "model/config.json",
                     "model/shared_vocabulary.json", "spacy/config.cfg", "README.md"):
            assert f"{NAME}/{part}" in names
        meta = json.loads(zf.read(f"{NAME}/metadata.json"))
        assert zf.read(f"{NAME}/sentencepiece.model") == vocab.model_path.read_bytes()
    assert {k: meta[k] for k in ("type", "from_code", "from_name", "to_code", "to_name")} == {
        "type": "translate", "from_code": "en", "from_name": "English", "to_code": "de", "to_name": "German"}
    assert language_name("grc") == "Ancient Greek" and language_name("zz") == "zz"


def test_argostranslate_translates_as_aiayn_through_ctranslate2(package, model, vocab, lines, tmp_path):
    """Every line as aiayn's CTranslate2 export with argostranslate's settings: beam 4, |Y|^0.2, PAD/BOS never; a
    text of several sentences as the spaCy pipeline splits it; several lines one by one."""
    folder = tmp_path / NAME
    zipfile.ZipFile(package).extractall(tmp_path)
    nlp = spacy.load(folder / "spacy")
    nlp.add_pipe("sentencizer")  # as argostranslate does
    several = f"{lines[0]}. {lines[1]}! {lines[2]}?"
    sentences = [s.text for s in nlp(several).sents]
    assert len(sentences) == 3

    ct2 = CT2Translator(export_ct2(model, vocab, tmp_path / "ct2"))
    expect = ct2.translate(lines, argos_search())
    out = argos_translate(package, [*lines, several, "\n".join(lines[:3])], tmp_path / "home")
    assert out["languages"] == [["en", "English"], ["de", "German"]]
    assert out["translations"][: len(lines)] == expect
    assert out["translations"][len(lines)] == " ".join(ct2.translate(sentences, argos_search()))
    assert out["translations"][-1] == "\n".join(expect[:3])

    # The settings matter on these lines, so the equality above shows that they are argostranslate's.
    assert expect != ct2.translate(lines, argos_search(beam=1))
    assert expect != ct2.translate(lines, argos_search(alpha=0.6))
    assert CT2Translator(folder / "model").translate(lines, argos_search()) == expect  # aiayn reads the model too


def anyones_package(package, tmp_path):
    """The package as anyone's is: without aiayn's files in model/ (only CTranslate2's, metadata.json and
    sentencepiece.model), as a .argosmodel file and as the folder argostranslate installs."""
    zipfile.ZipFile(package).extractall(tmp_path / "unzipped")
    folder = tmp_path / "unzipped" / NAME
    for name in ("aiayn.json", "vocab.model"):
        (folder / "model" / name).unlink()
    zipped = shutil.make_archive(str(tmp_path / "plain"), "zip", tmp_path / "unzipped", NAME)
    return folder, Path(zipped).rename(tmp_path / f"{NAME}.argosmodel")


def test_aiayn_serves_an_argos_package_as_argostranslate_translates_it(package, lines, tmp_path):
    """An Argos package of anyone's, folder or .argosmodel file: CT2Translator with argostranslate's settings gives
    argostranslate's translations (its SentencePiece pieces, its replace_unknowns, no suppression), its languages come
    from metadata.json, and `aiayn serve` answers them, languages listed."""
    import asyncio

    import httpx

    pytest.importorskip("fastapi")
    from aiayn.serve import LanguagePair, create_app
    from aiayn.serve.engines import ModelSource
    from aiayn.serve.models import Models

    folder, zipped = anyones_package(package, tmp_path)
    expect = argos_translate(zipped, lines, tmp_path / "home")["translations"]
    for path in (folder, zipped):
        assert CT2Translator(path).translate(lines, argos_search()) == expect
        assert run_languages(path) == ("en", "de")
    meta = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps({**meta, "target_prefix": "__de__"}))
    assert CT2Translator(folder).target_token == "__de__"  # a multilingual package's: given as the target prefix
    (folder / "metadata.json").write_text(json.dumps(meta))

    models = Models.from_sources([(LanguagePair("en", "de"), ModelSource(str(zipped), argos_search()))])

    async def ask():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(create_app(models=models)),
                                     base_url="http://test") as client:
            languages = (await client.get("/languages")).json()
            answer = (await client.post("/translate", json={"q": lines[:4], "source": "en", "target": "de"})).json()
        await models.close()
        return languages, answer
    languages, answer = asyncio.run(ask())
    assert [(x["code"], x["targets"]) for x in languages] == [("de", []), ("en", ["de"])]
    assert answer["translatedText"] == expect[:4]
    with pytest.raises(UserError, match="neither a CTranslate2 folder"):
        CT2Translator(tmp_path / "unzipped")


def test_the_package_model_never_generates_pad_or_bos(vocab, lines, tmp_path):
    """argostranslate suppresses nothing: the package's model, called as argostranslate calls it, gives the tokens
    and scores of aiayn's CTranslate2 export called with PAD and BOS suppressed. A random model (with an EOS bias so
    that lengths vary) gives PAD and BOS real probability, so the plain export called so differs."""
    import ctranslate2

    model = tiny_model(len(vocab), eos_bias=2.0)
    zipfile.ZipFile(export_argos(model, vocab, tmp_path / "x.argosmodel", "en", "de")).extractall(tmp_path)
    ct2 = export_ct2(model, vocab, tmp_path / "ct2")
    pieces = [vocab.sp.encode(line, out_type=str) for line in lines]
    theirs = ctranslate2.Translator(str(tmp_path / "x" / "model")).translate_batch(pieces, **ARGOS_DECODING,
                                                                                  return_scores=True)
    ours = [hyps[0] for hyps in CT2Translator(ct2, search=argos_search()).translate_nbest(lines)]
    assert [[vocab.sp.piece_to_id(p) for p in t.hypotheses[0]] for t in theirs] == [h.tokens for h in ours]
    assert max(abs(t.scores[0] - h.score) for t, h in zip(theirs, ours)) < 1e-4  # sums of up to 256 log-probs
    assert len({len(h.tokens) for h in ours}) > 5

    plain = ctranslate2.Translator(str(ct2)).translate_batch(pieces, **ARGOS_DECODING, return_scores=True)
    assert [p.hypotheses[0] for p in plain] != [t.hypotheses[0] for t in theirs]


def test_cli_export_argos(model, vocab, copy_data, tmp_path, capsys):
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    out = tmp_path / "out" / "translate-en_fr-1_0.argosmodel"
    argv = ["export", "--checkpoint", str(run), "--to", "argos", str(out), "--source-lang", "en", "--target-lang",
            "fr", "--quantization", "int8"]
    assert main(argv) == 0
    with zipfile.ZipFile(out) as zf:
        record = json.loads(zf.read("translate-en_fr-1_0/model/aiayn.json"))
        assert record["quantization"] == "int8"
        assert record["languages"] == {"source": "en", "target": "fr"}  # what aiayn serve reads of model/
        assert json.loads(zf.read("translate-en_fr-1_0/metadata.json"))["to_name"] == "French"
        assert "step_00000010" in zf.read("translate-en_fr-1_0/README.md").decode()
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary files left beside it
    assert main(argv) == 1 and "already exists" in capsys.readouterr().err

    assert main(argv[:6]) == 2  # no languages
    assert "--source-lang and --target-lang" in capsys.readouterr().err
    assert main([*argv[:6], "--quantization", "int8", "--to", "hf"]) == 2  # (--to hf records the languages)
    assert "--to ct2 and argos only" in capsys.readouterr().err
    ct2 = tmp_path / "ct2"  # a CTranslate2 folder records the pair it is given (serve reads it: data.run_languages)
    assert main(["export", "--checkpoint", str(run), "--to", "ct2", str(ct2), "--source-lang", "en"]) == 2
    assert "give both" in capsys.readouterr().err
    assert main(["export", "--checkpoint", str(run), "--to", "ct2", str(ct2), "--source-lang", "en",
                 "--target-lang", "fr"]) == 0
    assert json.loads((ct2 / "aiayn.json").read_text())["languages"] == {"source": "en", "target": "fr"}
    assert run_languages(ct2) == ("en", "fr")


def test_cli_export_argos_takes_the_languages_recorded_by_prepare(model, copy_data, tmp_path):
    run = labelled_run(model, copy_data, tmp_path, ("en", "es"))
    out = tmp_path / "translate-en_es-1_0.argosmodel"
    assert main(["export", "--checkpoint", str(run), "--to", "argos", str(out)]) == 0
    assert main(["export", "--checkpoint", str(run), "--to", "ct2", str(tmp_path / "ct2")]) == 0
    assert run_languages(tmp_path / "ct2") == ("en", "es")  # the run's pair, recorded in the CTranslate2 folder
    with zipfile.ZipFile(out) as zf:
        meta = json.loads(zf.read("translate-en_es-1_0/metadata.json"))
    assert (meta["from_code"], meta["to_code"], meta["to_name"]) == ("en", "es", "Spanish")


@pytest.mark.parametrize("name, source, target, message", [
    ("en_de.zip", "en", "de", "is a .argosmodel file"),
    ("en_de.argosmodel", "English", "de", "not a language code"),
    ("en_de.argosmodel", "en", "en", "both 'en'"),
])
def test_export_argos_refuses(model, vocab, tmp_path, name, source, target, message):
    with pytest.raises(UsageError, match=message):
        export_argos(model, vocab, tmp_path / name, source, target)
    assert not list(tmp_path.iterdir())


def test_export_argos_refuses_an_existing_file(model, vocab, tmp_path):
    (tmp_path / "en_de.argosmodel").write_text("a file the user had")
    with pytest.raises(UserError, match="already exists"):
        export_argos(model, vocab, tmp_path / "en_de.argosmodel", "en", "de")
    assert (tmp_path / "en_de.argosmodel").read_text() == "a file the user had"


def test_export_argos_without_spacy_names_the_export_extra(model, copy_data, tmp_path, monkeypatch, capsys):
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    monkeypatch.setitem(sys.modules, "spacy", None)  # as if spacy were not installed
    out = tmp_path / "x.argosmodel"
    assert main(["export", "--checkpoint", str(run), "--to", "argos", str(out), "--source-lang", "en",
                 "--target-lang", "de"]) == 1
    assert capsys.readouterr().err.splitlines() == ["error: aiayn export --to argos needs the export extra (spacy not "
                                                    "installed): pip install -e \".[export]\""]
    assert not out.exists()
