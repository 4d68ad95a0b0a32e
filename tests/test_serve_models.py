"""serve, many pairs in one server (aiayn.serve.models, aiayn.serve.pivot): GET /languages, routing, the pivot,
models loaded when asked for and unloaded under a budget, a broken model, per-model reloads, "auto" detection among
the sources; through the HTTP API, LibreTranslate's Python client, and the command line."""

import asyncio
import json
import os
import subprocess
import sys
import urllib.error

import httpx
import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("lingua", reason="the serve extra installs lingua-language-detector")
from serving import REPO, SEARCH, ServerThread, browser, free_port, save_run, tiny_model, wait_until_listening  # noqa: E402

from aiayn.data import Vocab  # noqa: E402
from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.serve import LanguagePair, create_app  # noqa: E402
from aiayn.serve.engines import ModelSource  # noqa: E402
from aiayn.serve.models import Models  # noqa: E402

# six direct pairs: every language to and from English; the others go through English
PAIRS = [("en", "de"), ("en", "es"), ("en", "fr"), ("de", "en"), ("es", "en"), ("fr", "en")]
TEXT = {"en": "The children are playing in the garden with their dog.",
        "de": "Die Kinder spielen mit ihrem Hund im Garten.",
        "es": "Los niños juegan en el jardín con su perro."}


@pytest.fixture(scope="module")
def runs(copy_data, tmp_path_factory):
    """A run per pair (tiny random models over the copy task's vocabulary, each its own seed), a broken one
    (en -> it: a checkpoint file that is not one), and the copy task's test lines."""
    root = tmp_path_factory.mktemp("models")
    vocab = Vocab.load(copy_data / "vocab.model")
    made = {}
    for seed, (src, tgt) in enumerate(PAIRS):
        model = tiny_model(len(vocab), seed=seed, eos_bias=1.0)
        made[src, tgt] = save_run(model, copy_data / "vocab.model", root / f"{src}-{tgt}")
    broken = root / "en-it"
    (broken / "checkpoints").mkdir(parents=True)
    (broken / "checkpoints" / "step_00000010.safetensors").write_bytes(b"not a checkpoint")
    (broken / "vocab.model").write_bytes((copy_data / "vocab.model").read_bytes())
    made["en", "it"] = broken
    return root, made, (copy_data / "test.src.txt").read_text().splitlines()


def models_of(made: dict, **budget) -> Models:
    return Models.from_sources([(LanguagePair(*pair), ModelSource(str(run), SEARCH)) for pair, run in made.items()],
                               **budget)


def offline(run, lines: list[str]) -> list[str]:
    return Translator.load(run, SEARCH).translate(lines)


def in_order(app, requests: list[tuple[str, str, object]]) -> list[httpx.Response]:
    """Send (method, path, json) requests one after the other in one event loop; then stop every batcher."""
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            out = [await client.request(method, path, json=body) for method, path, body in requests]
        await app.state.server.models.close()
        return out
    return asyncio.run(go())


def test_languages_routes_pivots_and_errors(runs):
    root, made, lines = runs
    app = create_app(models=models_of(made))
    got = in_order(app, [
        ("GET", "/languages", None),
        ("POST", "/translate", {"q": lines[0], "source": "en", "target": "de"}),
        ("POST", "/translate", {"q": lines[:2], "source": "es", "target": "en"}),
        ("POST", "/translate", {"q": lines[0], "source": "de", "target": "fr", "alternatives": 1}),  # via en
        ("POST", "/translate", {"q": lines[0], "source": "it", "target": "en"}),
        ("POST", "/translate", {"q": lines[0], "source": "de", "target": "zh"}),
        ("POST", "/translate", {"q": lines[0], "source": "en"}),
        ("POST", "/translate", {"q": lines[0], "source": "en", "target": "it"}),  # the broken model
        ("POST", "/translate", {"q": lines[1], "source": "fr", "target": "en"}),  # the others go on
    ])
    languages, direct, listed, pivot, no_source, no_target, no_choice, broken, after = got
    assert languages.json() == [
        {"code": "de", "name": "German", "targets": ["en", "es", "fr", "it"]},
        {"code": "en", "name": "English", "targets": ["de", "es", "fr", "it"]},
        {"code": "es", "name": "Spanish", "targets": ["de", "en", "fr", "it"]},
        {"code": "fr", "name": "French", "targets": ["de", "en", "es", "it"]},
        {"code": "it", "name": "Italian", "targets": []}]
    assert direct.json()["translatedText"] == offline(made["en", "de"], lines[:1])[0] and "pivot" not in direct.json()
    assert listed.json()["translatedText"] == offline(made["es", "en"], lines[:2])
    via = offline(made["de", "en"], lines[:1])
    nbest = Translator.load(made["en", "fr"], SearchConfig(beam=4, nbest=2, max_len_b=10)).translate_nbest(via)[0]
    assert pivot.status_code == 200 and pivot.json()["pivot"] == "en", pivot.text
    assert [pivot.json()["translatedText"], *pivot.json()["alternatives"]] == [h.text for h in nbest]
    assert no_source.status_code == 400 and no_source.json()["error"].startswith(
        "source 'it' is not served: this server translates 7 pairs: en->de, en->es")
    assert no_target.status_code == 400 and 'send target "en", "es", "fr", "it"' in no_target.json()["error"]
    assert no_choice.status_code == 400 and "target is missing" in no_choice.json()["error"]
    assert broken.status_code == 500 and "the en->it model" in broken.json()["error"] and \
        "other pairs are served" in broken.json()["error"]
    assert after.status_code == 200 and after.json()["translatedText"] == offline(made["fr", "en"], lines[1:2])[0]
    info = {m["source"] + m["target"]: m for m in in_order(create_app(models=models_of(made)),
                                                           [("GET", "/info", None)])[0].json()["models"]}
    assert info["enit"]["loaded"] is False and info["enit"]["error"] is None


def test_auto_detects_each_text_and_routes_it(runs):
    """A list q in three languages, source auto, target fr: each text detected, translated by its route (en
    directly, de and es through en); nothing to detect: the fallback, confidence 0; /detect answers the same."""
    root, made, _ = runs
    app = create_app(models=models_of(made))
    texts = [TEXT["en"], TEXT["de"], TEXT["es"], "12345 !!"]
    translated, detect_de, detect_none = in_order(app, [
        ("POST", "/translate", {"q": texts, "source": "auto", "target": "fr"}),
        ("POST", "/detect", {"q": TEXT["de"]}),
        ("POST", "/detect", {"q": "12345 !!"}),
    ])
    body = translated.json()
    assert [d["language"] for d in body["detectedLanguage"]] == ["en", "de", "es", "en"]
    assert all(d["confidence"] > 50 for d in body["detectedLanguage"][:3])
    assert body["detectedLanguage"][3]["confidence"] == 0
    assert body["pivot"] == [None, "en", "en", None]
    fr = Translator.load(made["en", "fr"], SEARCH)
    assert body["translatedText"][0] == fr.translate(texts[:1])[0]
    assert body["translatedText"][1] == fr.translate(offline(made["de", "en"], texts[1:2]))[0]
    assert detect_de.json()[0]["language"] == "de" and detect_de.json()[0]["confidence"] > 50
    assert detect_none.json() == [{"confidence": 0.0, "language": "en"}]


def test_models_load_when_asked_and_the_least_recently_used_go(runs):
    """max_models 2: after en->de, es->en, en->de, fr->en, the loaded ones are en->de and fr->en (es->en, least
    recently used, went); every answer equals its model's offline one; a budget of weights does the same."""
    root, made, lines = runs
    models = models_of(made, max_models=2)
    app = create_app(models=models)
    order = [("en", "de"), ("es", "en"), ("en", "de"), ("fr", "en"), ("es", "en")]
    got = in_order(app, [("POST", "/translate", {"q": lines[0], "source": s, "target": t}) for s, t in order])
    assert [r.json()["translatedText"] for r in got] == [offline(made[p], lines[:1])[0] for p in order]
    assert (models.loads, models.unloads) == (4, 2)  # es->en loaded twice; es->en then en->de unloaded
    assert sorted((e.pair.source, e.pair.target) for e in models.loaded()) == [("es", "en"), ("fr", "en")]
    assert models.stats["requests"] == 5  # unloaded models' counters kept

    one_model = models_of(made)
    asyncio.run(one_model.batcher(LanguagePair("en", "de")))
    size = one_model.entry(LanguagePair("en", "de")).bytes
    asyncio.run(one_model.close())
    by_weights = models_of(made, max_bytes=int(size * 2.5))
    in_order(create_app(models=by_weights), [("POST", "/translate", {"q": lines[0], "source": s, "target": t})
                                             for s, t in order[:4]])
    assert len(by_weights.loaded()) == 2 and by_weights.unloads == 1


def test_weights_are_counted_in_every_decoding_format(runs, monkeypatch):
    """What --max-model-memory counts: fp32 as stored; prepacked fp32 adds the output projection's packed copy of
    the embedding; bf16 half of fp32's; int8 (on torch's fbgemm here; aiayn's kernel: tests/test_int8_rows.py) one
    byte per projection weight (packed by oneDNN or fbgemm, not seen as tensors), the embedding kept in fp32 and its
    int8 copy for the output projection, and the decoder self-attentions' W^Q, W^K, W^V stacked once more for the
    decoder step (their biases in fp32)."""
    _, made, _ = runs
    monkeypatch.setenv("AIAYN_INT8_ENGINE", "fbgemm")
    plain = Translator.load(made["en", "de"], SEARCH, "fp32", prepack=False)
    stored = sum(t.numel() * 4 for t in [*plain.model.parameters(), *plain.model.buffers()])
    assert plain.weight_bytes() == stored
    embedding = plain.model.embedding.weight.numel() * 4
    assert Translator.load(made["en", "de"], SEARCH, "fp32", prepack=True).weight_bytes() == stored + embedding
    assert Translator.load(made["en", "de"], SEARCH, "bf16", prepack=False).weight_bytes() == stored // 2
    linears = [m for m in plain.model.modules() if isinstance(m, torch.nn.Linear)]
    projections = sum(m.weight.numel() for m in linears)
    stacked = [m for layer in plain.model.decoder.layers for m in (layer.self_attn.w_q, layer.self_attn.w_k,
                                                                    layer.self_attn.w_v)]
    int8 = stored - 3 * projections + embedding // 4 + sum(m.weight.numel() + 4 * m.bias.numel() for m in stacked)
    assert Translator.load(made["en", "de"], SEARCH, "int8").weight_bytes() == int8


def test_a_reload_reads_each_loaded_model_again(runs, copy_data, tmp_path):
    """A reload (SIGHUP, POST /admin/reload: aiayn.serve.reload.Reloader) of a server of several models: a loaded
    model whose run has a newer checkpoint serves it from then on; a model whose run became unreadable keeps the one
    it has (the error names it, the worker's failed generation is marked); then a reload that works."""
    import multiprocessing

    from aiayn.serve.board import WorkerBoard
    from aiayn.serve.reload import Reloader

    root, made, lines = runs
    vocab = Vocab.load(copy_data / "vocab.model")
    a = save_run(tiny_model(len(vocab), seed=20, eos_bias=1.0), copy_data / "vocab.model", tmp_path / "a")
    b = save_run(tiny_model(len(vocab), seed=21, eos_bias=1.0), copy_data / "vocab.model", tmp_path / "b")
    models = models_of({("en", "de"): a, ("en", "es"): b})
    board = WorkerBoard(multiprocessing.get_context("spawn"), 1)
    app = create_app(models=models, reloader=Reloader(board))
    reloader = Reloader(board)

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            async def ask(target):
                r = await client.post("/translate", json={"q": lines[0], "source": "en", "target": target})
                return r.json()["translatedText"]
            before = [await ask("de"), await ask("es")]
            save_run(tiny_model(len(vocab), seed=22, eos_bias=1.0), copy_data / "vocab.model", a, step=20)
            (b / "checkpoints" / "step_00000010.safetensors").write_bytes(b"broken")
            with pytest.raises(RuntimeError, match="en->es"):
                await reloader.reload(app, board.request())
            assert board.failed(0) == 1
            after = [await ask("de"), await ask("es")]
            save_run(tiny_model(len(vocab), seed=21, eos_bias=1.0), copy_data / "vocab.model", b, step=30)
            read = await reloader.reload(app, board.request())
            assert str(a) in read and str(b) in read and board.served(0) == 2
        await models.close()
        return before, after
    before, after = asyncio.run(go())
    assert after[0] == offline(a, lines[:1])[0] != before[0]  # the newer checkpoint
    assert after[1] == before[1]  # kept


def test_libretranslate_client_and_the_command_line(runs, tmp_path):
    """`aiayn serve --models FOLDER --checkpoint SRC:TGT=PATH --max-models 2` as a process, with libretranslatepy
    2.1.4 unchanged: languages, a direct pair, a pivot, auto, detect, a pair not served, the broken model."""
    from libretranslatepy import LibreTranslateAPI

    root, made, lines = runs
    folder = tmp_path / "models"
    folder.mkdir()
    for pair in [("en", "de"), ("de", "en"), ("en", "it")]:
        (folder / "-".join(pair)).symlink_to(made[pair])
    (folder / "notes").mkdir()  # no languages: skipped with a warning
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "aiayn", "serve", "--models", str(folder), "--checkpoint", f"es:en={made['es', 'en']}",
           "--max-models", "2", "--port", str(port), "--beam", "4", "--max-len-b", "10", "--log-level", "warning",
           "--workers", "1"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_listening(proc, base)
        client = LibreTranslateAPI(base + "/")
        assert [(lang["code"], lang["targets"]) for lang in client.languages()] == [
            ("de", ["en", "it"]), ("en", ["de", "it"]), ("es", ["de", "en", "it"]), ("it", [])]
        assert client.translate(lines[0], "en", "de") == offline(made["en", "de"], lines[:1])[0]
        assert client.translate(lines[0], "es", "de") == offline(made["en", "de"], offline(made["es", "en"],
                                                                                          lines[:1]))[0]
        assert client.detect(TEXT["es"])[0]["language"] == "es"
        assert client.translate(TEXT["de"], "auto", "en") == offline(made["de", "en"], [TEXT["de"]])[0]
        for source, target, status in [("en", "fr", 400), ("en", "it", 500)]:
            with pytest.raises(urllib.error.HTTPError) as refused:
                client.translate(lines[0], source, target)
            assert refused.value.code == status, json.load(refused.value)
        info = httpx.get(base + "/info").json()
        assert info["loaded_models"] <= 2 and info["budget"]["max_models"] == 2
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    assert "notes is skipped" in err



def test_page_offers_every_pair(runs):
    """In a real browser: the menus list the sources (and detect) and each source's targets; de -> fr is translated
    through en, and the page says so."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    root, made, lines = runs
    expect = offline(made["en", "fr"], offline(made["de", "en"], lines[:1]))[0]
    driver = browser()
    try:
        with ServerThread(create_app(models=models_of(made))) as base:
            driver.get(base + "/")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: len(Select(d.find_element(By.ID, "source-lang")).options) > 1)
            source = Select(driver.find_element(By.ID, "source-lang"))
            assert [o.get_attribute("value") for o in source.options] == ["auto", "de", "en", "es", "fr"]
            source.select_by_value("de")
            target = Select(driver.find_element(By.ID, "target-lang"))
            assert [o.get_attribute("value") for o in target.options] == ["en", "es", "fr", "it"]
            target.select_by_value("fr")
            driver.find_element(By.ID, "src").send_keys(lines[0])
            wait.until(lambda d: d.find_element(By.ID, "translation").get_attribute("data-src") == lines[0])
            assert driver.find_element(By.ID, "translation").text == expect
            assert "through en" in driver.find_element(By.ID, "status").text
    finally:
        driver.quit()


def test_command_line_says_what_is_wrong(runs, tmp_path, capsys):
    """Each misuse of the flags of several models: exit status 2 and one line saying what to do."""
    from aiayn.cli import main

    root, made, _ = runs
    a, b = str(made["en", "de"]), str(made["de", "en"])
    (tmp_path / "empty").mkdir()
    cases = [
        (["--checkpoint", a, "--checkpoint", b], "its run records no languages; name them: --checkpoint SRC:TGT="),
        (["--checkpoint", f"en:de={a}", "--checkpoint", f"en:de={b}"], "two models translate en (English) -> de"),
        (["--checkpoint", f"en:de={a}", "--checkpoint", f"de:en={b}", "--source-lang", "en"],
         "name each model's pair: --checkpoint SRC:TGT=PATH"),
        (["--checkpoint", f"en:de={a}", "--checkpoint", f"de:en={b}", "--shortlist", "x.tsv"],
         "--shortlist FILE belongs to one model's vocabulary"),
        (["--models", str(tmp_path / "empty")], "no model folder in it"),
        (["--models", str(tmp_path / "nowhere")], "no such folder"),
        (["--checkpoint", f"en:de={a}", "--checkpoint", f"en:e={b}"], "not a language code"),
        ([], "give the model to serve"),
    ]
    for flags, says in cases:
        assert main(["serve", *flags]) == 2, flags
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, (flags, err)
    # a model that is not there: exit status 1, as for every command given a path that does not exist
    assert main(["serve", "--checkpoint", f"en:de={a}", "--checkpoint", f"de:en={tmp_path / 'gone'}"]) == 1
    err = capsys.readouterr().err
    assert "no such file or folder" in err and err.count("\n") == 1


def test_glossary_field(runs, copy_data):
    """"glossary" on /translate: the term replaces the words aligned to its source term in the plain translation
    (aiayn.markup.lines, as `aiayn translate --glossary`), in a batch beside a request without one, whose answer stays
    the plain one; with a prefix too; through a pivot the alignments are composed (tests/test_serve_spans.py)."""
    from serving import app_of, call, copy_translator

    translator, lines = copy_translator(copy_data)
    line = next(line for line in lines if "alpha" in line.split())
    terms = [("alpha", "KILO LIMA")]
    with_terms, plain, prefixed = call(app_of(translator), [
        ("POST", "/translate", {"q": line, "glossary": [list(t) for t in terms]}),
        ("POST", "/translate", {"q": line}),
        ("POST", "/translate", {"q": line, "glossary": [list(t) for t in terms], "prefix": "KILO"}),
    ])
    assert with_terms.json()["translatedText"].count("KILO LIMA") == 1
    assert plain.json()["translatedText"] == translator.translate([line])[0]
    assert prefixed.status_code == 200 and "KILO LIMA" in prefixed.json()["translatedText"]
    root, made, _ = runs
    (pivoted,) = in_order(create_app(models=models_of(made)), [
        ("POST", "/translate", {"q": line, "source": "de", "target": "fr", "glossary": [["alpha", "KILO"]]})])
    assert pivoted.status_code == 200 and pivoted.json()["pivot"] == "en"


def test_ctranslate2_folders_are_served_beside_runs(runs, tmp_path, capsys):
    """A folder `aiayn export --to ct2` wrote is a model like a run: its languages from its aiayn.json, decoded by
    CTranslate2 (the answers are CT2Translator's offline ones, directly and as a pivot's second leg), its weights
    counted, in int8 too; attention asked of it is a 422 (a glossary is placed by alignment:
    tests/test_serve_spans.py); serving one needs --lp power."""
    pytest.importorskip("ctranslate2")
    from aiayn.cli import main
    from aiayn.decoding.ct2 import CT2Translator

    _, made, lines = runs
    ct2 = tmp_path / "en-de-ct2"
    assert main(["export", "--checkpoint", str(made["en", "de"]), "--to", "ct2", str(ct2), "--source-lang", "en",
                 "--target-lang", "de"]) == 0
    power = SearchConfig(beam=4, max_len_b=10, lp="power", alpha=1.0)
    catalogue = [(LanguagePair("en", "de"), ModelSource(str(ct2), power)),
                 (LanguagePair("es", "en"), ModelSource(str(made["es", "en"]), power)),
                 (LanguagePair("en", "fr"), ModelSource(str(ct2), power, "int8"))]
    models = Models.from_sources(catalogue)
    app = create_app(models=models)
    direct, pivoted, int8, glossary, sampled, attention, info = in_order(app, [
        ("POST", "/translate", {"q": lines[:3], "source": "en", "target": "de"}),
        ("POST", "/translate", {"q": lines[0], "source": "es", "target": "de"}),
        ("POST", "/translate", {"q": lines[0], "source": "en", "target": "fr"}),
        ("POST", "/translate", {"q": lines[0], "source": "en", "target": "de",
                                "glossary": [[lines[0].split()[0], "KILO"]]}),
        ("POST", "/translate", {"q": lines[0], "source": "en", "target": "de", "sampling": True}),
        ("POST", "/attention", {"q": lines[0], "source": "en", "target": "de"}),
        ("GET", "/info", None)])
    offline_ct2 = CT2Translator(ct2, search=power)
    assert direct.json()["translatedText"] == offline_ct2.translate(lines[:3], power)
    first_leg = Translator.load(made["es", "en"], power).translate(lines[:1])
    assert pivoted.json()["translatedText"] == offline_ct2.translate(first_leg, power)[0]
    assert pivoted.json()["pivot"] == "en"
    assert int8.json()["translatedText"] == CT2Translator(ct2, compute_type="int8").translate(lines[:1], power)[0]
    assert glossary.status_code == 200 and glossary.json()["translatedText"].count("KILO") == 1
    assert attention.status_code == 422 and "CTranslate2" in attention.json()["error"]
    assert sampled.status_code == 422 and "sample" in sampled.json()["error"]
    described = {(m["source"], m["target"]): m for m in info.json()["models"]}
    size = (ct2 / "model.bin").stat().st_size
    assert described["en", "de"]["weights_mb"] == round(size / 2**20, 1)
    assert described["en", "fr"]["weights_mb"] == round(size // 4 / 2**20, 1)  # int8 of a float32 export

    assert main(["serve", "--checkpoint", str(ct2)]) == 2
    assert "--lp power" in capsys.readouterr().err
    assert main(["serve", "--checkpoint", str(ct2), "--lp", "power", "--shortlist", str(ct2 / "vocab.model")]) == 2
    assert "vocabulary map" in capsys.readouterr().err


def test_command_line_builds_the_catalogue(runs, monkeypatch):
    """What `aiayn serve` hands its workers for several models: each pair with its path, the budgets in models and
    bytes (--max-model-memory is MB)."""
    from aiayn.cli import main

    root, made, _ = runs
    got = {}
    monkeypatch.setattr("aiayn.serve.workers.serve", lambda spec, workers, banner: got.update(spec=spec) or 0)
    assert main(["serve", "--checkpoint", f"en:pt={made['en', 'de']}", "--models", str(root), "--max-models", "3",
                 "--max-model-memory", "1.5", "--workers", "1", "--device", "cpu"]) == 0
    spec = got["spec"]
    assert spec.max_models == 3 and spec.max_bytes == int(1.5 * 2**20)
    pairs = [(pair.source, pair.target, path) for pair, path in ((p, s.checkpoint) for p, s in spec.catalog)]
    assert pairs[0] == ("en", "pt", str(made["en", "de"]))
    assert sorted(pairs[1:]) == sorted((*pair, str(run)) for pair, run in made.items())  # the folder's, by name
