"""serve, LibreTranslate's API as its server speaks it: JSON and form bodies on every POST, "auto", /languages,
/detect, pairs not served; its unchanged Python client against a real `aiayn serve`; /docs with no CDN."""

from __future__ import annotations

import html
import json
import re
import urllib.error

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from helpers import labelled_run  # noqa: E402
from serving import Send, ServerThread, app_of, browser, call, copy_translator, serve_process  # noqa: E402

from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.serve import LanguagePair, Limits  # noqa: E402
from aiayn.serve.detect import Detector  # noqa: E402

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def setup(copy_data):
    return copy_translator(copy_data)


def test_form_and_json_bodies_translate_alike(setup):
    translator, lines = setup
    offline = translator.translate(lines[:3])
    nbest = Translator(translator.model, translator.vocab, SearchConfig(beam=4, nbest=3, max_len_b=10)).translate_nbest(
        lines[:1])[0]
    # "auto" chooses among every language served (en and de here), with lingua's confidence
    detected = [Detector(["de", "en"]).detect(line)[0] for line in lines[:3]]
    assert [d["language"] for d in detected] == ["en"] * 3 and all(0 < d["confidence"] < 100 for d in detected)
    got = call(app_of(translator), [
        ("POST", "/translate", Send(data={"q": lines[0], "source": "en", "target": "de", "api_key": "k"})),
        ("POST", "/translate", Send(data={"q": lines[:3], "source": "auto"})),  # a repeated field: a list
        ("POST", "/translate", Send(data={"q": lines[0], "alternatives": "2"}, files={"unused": (None, "x")})),
        ("POST", "/translate", {"q": lines[:2], "source": "auto", "target": "de"}),
        ("POST", "/translate", Send(content=json.dumps({"q": lines[0]}).encode(), headers=FORM)),  # curl -d '{...}'
        ("POST", "/translate", Send(data={"q": lines[0], "source": "auto"})),
    ])
    assert [r.status_code for r in got] == [200] * 6, [r.text for r in got]
    form, form_list, multipart, json_auto, curl, form_auto = (r.json() for r in got)
    assert form["translatedText"] == offline[0] and "detectedLanguage" not in form
    assert form_list["translatedText"] == offline and form_list["detectedLanguage"] == detected
    assert [multipart["translatedText"], *multipart["alternatives"]] == [h.text for h in nbest]
    assert json_auto["translatedText"] == offline[:2] and json_auto["detectedLanguage"] == detected[:2]
    assert curl["translatedText"] == offline[0]
    assert form_auto["detectedLanguage"] == detected[0] and form_auto["translatedText"] == offline[0]


ENGLISH = "The children are playing in the garden with their dog."


def test_languages_detect_and_pairs_not_served(setup):
    translator, lines = setup
    app = app_of(translator, pair=LanguagePair("en", "es"))
    languages, detect_json, detect_form, wrong_source, wrong_target, ok, no_q, blank = call(app, [
        ("GET", "/languages", None),
        ("POST", "/detect", {"q": ENGLISH}),
        ("POST", "/detect", Send(data={"q": ENGLISH, "api_key": "k"})),
        ("POST", "/translate", {"q": lines[0], "source": "fr", "target": "es"}),
        ("POST", "/translate", Send(data={"q": lines[0], "source": "en", "target": "de"})),
        ("POST", "/translate", {"q": lines[0], "source": "en", "target": "es"}),
        ("POST", "/detect", Send(data={"text": "x"})),
        ("POST", "/detect", {"q": "  "}),
    ])
    assert languages.json() == [{"code": "en", "name": "English", "targets": ["es"]},
                                {"code": "es", "name": "Spanish", "targets": []}]
    # among every language served, source or target, each with how sure lingua is
    assert detect_json.json() == detect_form.json() == Detector(["en", "es"]).detect(ENGLISH)
    assert detect_json.json()[0] == {"confidence": 100.0, "language": "en"}
    assert wrong_source.status_code == 400 and wrong_source.json() == {
        "error": "source 'fr' is not served: this server translates en (English) -> es (Spanish) only; send "
                 'source "en" or "auto"'}
    assert wrong_target.status_code == 400 and "target 'de' is not served" in wrong_target.json()["error"]
    assert ok.status_code == 200
    assert no_q.status_code == 422 and no_q.json()["error"] == "q: Field required"
    assert blank.status_code == 422 and blank.json()["error"] == "q is empty; give text to translate"


@pytest.mark.parametrize("send, status, says", [
    (Send(content=b"q=caf%E9", headers=FORM), 400, "not valid UTF-8"),  # a percent-encoded Latin-1 byte
    (Send(content=b"q=caf\xe9", headers=FORM), 400, "not valid UTF-8"),
    (Send(data={"q": "alpha", "alternatives": "two"}), 422, "alternatives: Input should be a valid integer"),
    (Send(data={"q": ["alpha", ""]}), 422, "q[1] is empty"),
    (Send(data={"q": "alpha", "source": ["en", "en"]}), 422, "source: Input should be a valid string"),
    (Send(data={"q": "alpha", "format": "xml"}), 422, "format"),
    (Send(data={"q": "a" * 21}), 413, "max_chars 20"),
    (Send(files={"q": ("q.txt", b"alpha")}), 400, "Too many files"),
    (Send(content=b"--nope\r\n", headers={"Content-Type": "multipart/form-data; boundary=x"}), 400, "multipart"),
    (Send(content=b"alpha", headers={"Content-Type": "text/plain"}), 415, "Content-Type text/plain"),
])
def test_form_errors_are_clear_json(setup, send, status, says):
    translator, _ = setup
    (r,) = call(app_of(translator, limits=Limits(max_chars=20, max_texts=3)), [("POST", "/translate", send)])
    assert r.status_code == status and says in r.json()["error"], r.text


def test_libretranslate_client_against_aiayn_serve(setup, copy_data, tmp_path):
    """libretranslatepy 2.1.4, unchanged, against a real `aiayn serve`: languages, translate (a fixed source and
    "auto"), detect, and a pair the model does not translate."""
    from libretranslatepy import LibreTranslateAPI

    translator, lines = setup
    offline = translator.translate(lines[:2])
    flags = ["--beam", "4", "--max-len-b", "10", "--source-lang", "en", "--target-lang", "fr"]
    with serve_process(translator, copy_data / "vocab.model", tmp_path, *flags) as (_, base):
        client = LibreTranslateAPI(base, api_key="any")
        assert client.languages() == [{"code": "en", "name": "English", "targets": ["fr"]},
                                      {"code": "fr", "name": "French", "targets": []}]
        assert client.translate(lines[0], "en", "fr") == offline[0]
        assert client.translate(lines[1], "auto", "fr") == offline[1]
        assert client.detect(ENGLISH) == [{"confidence": 100.0, "language": "en"}]
        with pytest.raises(urllib.error.HTTPError) as refused:
            client.translate(lines[0], "en", "de")
        assert refused.value.code == 400 and "target 'de' is not served" in json.load(refused.value)["error"]
        # spans carried through the alignments (tests/test_serve_spans.py), in the real process too
        assert [client.translate(s, "en", "fr") for s in ("2020", "©", "😀")] == ["2020", "©", "😀"]
        assert client.translate("Price: 15 €", "en", "fr").count("15 €") == 1
        line = next(line for line in lines if "alpha" in line.split())
        termed, conflict = (httpx.post(base + "/translate", json={"q": line, "glossary": g}, timeout=60) for g in
                            ([["alpha", "KILO"]], [["alpha", "KILO"], ["alpha", "LIMA"]]))
        assert termed.json()["translatedText"].count("KILO") == 1
        assert conflict.status_code == 422 and "two target terms" in conflict.json()["error"]
        tagged = httpx.post(base + "/translate", json={"q": "<p>Go <b>home</b> now. Come <a href='x'>back</a>.</p>",
                                                       "format": "html"}, timeout=60).json()["translatedText"]
        assert [tagged.count(t) for t in ("<p>", "</p>", "<b>", "</b>", "<a href='x'>", "</a>")] == [1] * 6


def test_libretranslate_client_gets_the_languages_of_the_prepared_data(setup, copy_data, tmp_path):
    """A run whose data were prepared as en -> es is served as en -> es without flags (the pair `aiayn serve` picks:
    aiayn.serve.catalog; LibreTranslate's clients ask for en -> es); a text of several lines comes back line for line;
    format=html keeps its tags. In a uvicorn thread: a process start takes over a minute on a busy machine."""
    from libretranslatepy import LibreTranslateAPI

    from aiayn.serve.catalog import build_catalog

    translator, lines = setup
    a, b = translator.translate(lines[:2])
    run = labelled_run(translator.model, copy_data, tmp_path, ("en", "es"))
    (listed,) = build_catalog([str(run)])
    pair = listed.pair
    with ServerThread(app_of(translator, pair=pair)) as base:
        client = LibreTranslateAPI(base + "/")
        assert client.languages() == [{"code": "en", "name": "English", "targets": ["es"]},
                                      {"code": "es", "name": "Spanish", "targets": []}]
        assert client.translate(f"{lines[0]}\n\n{lines[1]}", "en", "es") == f"{a}\n\n{b}"
        tagged = httpx.post(base + "/translate", data={"q": f"<p>{lines[0]}</p>", "source": "en", "target": "es",
                                                       "format": "html"})
        assert tagged.json()["translatedText"] == f"<p>{html.escape(a, quote=False)}</p>"  # one sentence, tags kept


def test_serve_languages_come_from_flags_then_the_data_then_the_paper(setup, copy_data, tmp_path):
    from aiayn.serve.catalog import build_catalog

    def one(path, source=None, target=None):
        (listed,) = build_catalog([str(path)], None, source, target)
        return listed.pair, listed.said

    translator, _ = setup
    run = labelled_run(translator.model, copy_data, tmp_path, ("en", "es"))
    assert one(run)[0] == LanguagePair("en", "es")
    assert one(run, None, "fr")[0] == LanguagePair("en", "fr")
    assert one(run, "de", "fr") == (LanguagePair("de", "fr"), "--source-lang/--target-lang")
    (tmp_path / "elsewhere").mkdir()
    assert one(tmp_path / "elsewhere")[0] == LanguagePair("en", "de")
    with pytest.raises(ValueError, match="name the languages of one model"):  # several: each named, or recorded
        build_catalog([str(run), f"de:en={run}"], None, "de", "fr")


def test_serve_language_flags(tmp_path, capsys):
    from aiayn.cli import main

    assert main(["serve", "--checkpoint", str(tmp_path), "--source-lang", "auto"]) == 2
    assert "the source language 'auto' is not a language code" in capsys.readouterr().err
    assert main(["serve", "--checkpoint", str(tmp_path), "--source-lang", "de"]) == 2
    assert "both 'de'" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# /docs without the network.

URL = re.compile(r"""(?:https?:)?//[^\s"'()<>]+""")


def test_docs_reference_nothing_outside_the_server(setup):
    translator, _ = setup
    app = app_of(translator)
    docs, redoc = call(app, [("GET", "/docs", None), ("GET", "/redoc", None)])
    assert docs.status_code == redoc.status_code == 200 and "SwaggerUIBundle" in docs.text
    assets = []
    for page in (docs, redoc):
        assert URL.findall(page.text) == [], "a page loads something from another host"
        assets += re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets) and any(a.endswith(".css") for a in assets)
    fetched = call(app_of(translator), [("GET", a, None) for a in assets])
    assert [r.status_code for r in fetched] == [200] * len(assets), assets
    for asset, r in zip(assets, fetched):
        if asset.endswith(".css"):
            assert not re.findall(r"url\(\s*['\"]?(?:https?:)?//", r.text), "the stylesheet loads from another host"
    assert '"validatorUrl": null' in docs.text  # Swagger UI sends no schema to its online validator


def test_docs_render_in_browser(setup):
    """Swagger UI at /docs shows every route, with only this server to load from (the test machine is offline)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    translator, _ = setup
    driver = browser()
    try:
        with ServerThread(app_of(translator)) as base:
            driver.get(base + "/docs")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")) >= 7)
            paths = {e.text.strip() for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
            assert {"/translate", "/detect", "/languages", "/attention", "/health", "/info"} <= paths, paths
            loaded = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
            assert loaded and all(url.startswith(base) for url in loaded), loaded
    finally:
        driver.quit()


def test_aiayn_decoding_fields_on_translate(setup):
    """aiayn's own request fields beside LibreTranslate's: prefix, no_repeat_ngram_size, sampling and its options;
    each answer is what offline decoding gives, and a request's samples do not depend on its batch neighbours."""
    translator, lines = setup
    search = translator.search
    offline = Translator(translator.model, translator.vocab, search)
    prefixed = offline.translate_nbest(lines[:2], prefixes=["a b", ""])
    sampler = Translator(translator.model, translator.vocab, SearchConfig(**{
        **{f: getattr(search, f) for f in ("alpha", "lp", "max_len_a", "max_len_b", "min_len")},
        "sampling": True, "nbest": 2, "top_k": 10, "seed": 3}))
    samples = sampler.translate_nbest(lines[:2])
    sample_body = {"q": lines[:2], "sampling": True, "top_k": 10, "seed": 3, "alternatives": 1}
    got = call(app_of(translator), [
        ("POST", "/translate", {"q": lines[:2], "prefix": ["a b", ""]}),
        ("POST", "/translate", sample_body),
        ("POST", "/translate", {"q": lines[3:5], "sampling": True, "seed": 1}),  # a neighbour in the batch
        ("POST", "/translate", Send(data={"q": lines[0], "no_repeat_ngram_size": "1"})),
        ("POST", "/translate", {"q": lines[0], "top_k": 5}),
        ("POST", "/translate", {"q": lines[0], "prefix": ["a"]}),
        ("POST", "/translate", {"q": lines[0], "prefix": "€"}),
        ("POST", "/translate", {"q": lines[0], "sampling": True, "top_p": 1.5}),
    ])
    assert [r.status_code for r in got] == [200] * 4 + [422] * 4, [r.text for r in got]
    pre, sampled, _, ngram, *errors = (r.json() for r in got)
    assert pre["translatedText"] == [h[0].text for h in prefixed]
    assert [[t, *alts] for t, alts in zip(sampled["translatedText"], sampled["alternatives"])] == \
        [[h.text for h in hs] for hs in samples]
    words = translator.vocab.encode(ngram["translatedText"])
    assert len(words) == len(set(words))  # no piece twice
    assert [e["error"] for e in errors][:3] == ['top_k: only sampling reads it; send "sampling": true as well, or '
                                                "leave it out",
                                                "prefix must be like q: a string for a string q, a list of 1 for a "
                                                "list of 1", "input line 1: the prefix piece '€' is not in the "
                                                "vocabulary"]
    assert "top_p" in errors[3]["error"]


def test_a_server_with_a_shortlist(setup, copy_data, tmp_path):
    """`aiayn serve --shortlist`: requests decode with the run's shortlist, as offline decoding with it does; a request
    may turn it off ("shortlist": false) or ask for it (true; a 422 on a server without one); /info says which."""
    from helpers import save_run

    from aiayn.decoding.shortlist import build_from_prepared
    from aiayn.serve.engines import ModelSource

    translator, lines = setup
    run = save_run(translator.model, copy_data / "vocab.model", tmp_path / "run")
    build_from_prepared(copy_data, per_source=2, frequent=1).save(run / "shortlist.safetensors")
    served, _ = ModelSource(str(run), translator.search, shortlist=True).load()  # what each worker loads
    assert served.shortlist is not None
    shortlisted = served.translate(lines[:3])
    assert shortlisted != translator.translate(lines[:3])  # the shortlist changes this random model's output
    got = call(app_of(served), [
        ("POST", "/translate", {"q": lines[:3]}),
        ("POST", "/translate", {"q": lines[:3], "shortlist": False}),
        ("POST", "/translate", Send(data={"q": lines[:3], "shortlist": "true"})),
        ("GET", "/info", None),
    ])
    assert [r.status_code for r in got] == [200] * 4, [r.text for r in got]
    assert got[0].json()["translatedText"] == got[2].json()["translatedText"] == shortlisted
    assert got[1].json()["translatedText"] == translator.translate(lines[:3])
    assert got[3].json()["models"][0]["shortlist"] == {"per_source": 2, "frequent": 1, "score": "dice"}
    refused, info = call(app_of(translator), [("POST", "/translate", {"q": lines[0], "shortlist": True}),
                                              ("GET", "/info", None)])
    assert refused.status_code == 422 and "this server has no shortlist" in refused.json()["error"]
    assert info.json()["models"][0]["shortlist"] is None
