"""serve: a text whose source language is its target comes back unchanged (LibreTranslate's answer: no model, no
pivot), given or detected; detection chooses among every language served, as a source or a target; on a server of
one model and one of several alike (aiayn.serve.models: one model is a catalogue of one)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("lingua", reason="the serve extra installs lingua-language-detector")
from serving import SEARCH, call, tiny_model  # noqa: E402

from aiayn.data import Vocab  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.serve import LanguagePair, Models, create_app  # noqa: E402
from aiayn.serve.engines import Loaded  # noqa: E402

ONE = [("de", "en")]
MANY = [("de", "en"), ("es", "en"), ("es", "de"), ("de", "es")]  # en: a target only; de <-> es
ENGLISH = "The committee will publish its report after the summer holidays."
GERMAN = "Der Ausschuss wird seinen Bericht nach den Sommerferien veröffentlichen."


@pytest.fixture(scope="module")
def vocab(copy_data):
    return Vocab.load(copy_data / "vocab.model")


def server(vocab, pairs):
    """An app around in-memory tiny models, one per pair, each loaded; and its models."""
    models = Models.from_sources([(LanguagePair(*pair), Loaded(Translator(tiny_model(len(vocab), seed=n,
                                                                                     eos_bias=1.0), vocab, SEARCH)))
                                  for n, pair in enumerate(pairs)])
    models.preload()
    return create_app(models), models


def decoded(models: Models) -> int:
    return models.stats["sentences"]


@pytest.mark.parametrize("pairs", [ONE, MANY], ids=["one", "many"])
def test_same_language_in_is_the_text_unchanged(vocab, pairs):
    """source == target, for a source, a target, and a language served only one way (en on de -> en, es on the
    many-model server): the text as sent (blank lines and spaces too), no pivot, no model asked; alternatives []
    (LibreTranslate drops alternatives equal to the translation); a list q too."""
    app, models = server(vocab, pairs)
    text = "  Hello there.\n\nSecond line.  "
    codes = sorted({code for pair in pairs for code in pair})
    requests = [("POST", "/translate", {"q": text, "source": code, "target": code, "alternatives": 2})
                for code in codes]
    requests.append(("POST", "/translate", {"q": [text, "x"], "source": codes[0], "target": codes[0]}))
    *same, listed = call(app, requests)
    for code, r in zip(codes, same):
        assert r.status_code == 200, (code, r.text)
        assert r.json() == {"translatedText": text, "alternatives": [], "scores": [0.0]}, code
    assert listed.json() == {"translatedText": [text, "x"], "scores": [[0.0], [0.0]]}
    assert decoded(models) == 0


@pytest.mark.parametrize("pairs", [ONE, MANY], ids=["one", "many"])
def test_a_language_not_served_is_a_400_even_to_itself(vocab, pairs):
    """fr -> fr where fr is served neither way: the 400 that names what is served (LibreTranslate: not supported)."""
    app, _ = server(vocab, pairs)
    (r,) = call(app, [("POST", "/translate", {"q": "Bonjour", "source": "fr", "target": "fr"})])
    assert r.status_code == 400 and "source 'fr' is not served" in r.json()["error"], r.text


@pytest.mark.parametrize("pairs", [ONE, MANY], ids=["one", "many"])
def test_auto_finds_a_text_already_in_the_target_language(vocab, pairs):
    """An English text sent with source auto and target en to a server of de -> en: detected as en (a target only,
    yet a language served), sure of it, and returned unchanged; a German one is translated. /detect answers among
    every served language too."""
    app, models = server(vocab, pairs)
    english, german, detect = call(app, [
        ("POST", "/translate", {"q": ENGLISH, "source": "auto", "target": "en"}),
        ("POST", "/translate", {"q": GERMAN, "source": "auto", "target": "en"}),
        ("POST", "/detect", {"q": ENGLISH}),
    ])
    assert english.status_code == 200, english.text
    assert english.json()["translatedText"] == ENGLISH and "pivot" not in english.json()
    assert english.json()["detectedLanguage"]["language"] == "en"
    assert english.json()["detectedLanguage"]["confidence"] > 90  # how sure detection was, not of the route
    assert german.json()["detectedLanguage"]["language"] == "de" and german.json()["translatedText"] != GERMAN
    assert detect.json()[0] == english.json()["detectedLanguage"]
    assert decoded(models) == 1  # the German sentence alone


@pytest.mark.parametrize("pairs", [ONE, MANY], ids=["one", "many"])
def test_detect_of_nothing_to_detect_and_of_blanks(vocab, pairs):
    """/detect: digits and punctuation are confidence 0 with the fallback (English, served here), as LibreTranslate
    answers; a blank text is a 422, as on /translate (docs/serving.md says both)."""
    app, _ = server(vocab, pairs)
    digits, blank = call(app, [("POST", "/detect", {"q": "12345 !!"}), ("POST", "/detect", {"q": "   "})])
    assert digits.json() == [{"confidence": 0.0, "language": "en"}]
    assert blank.status_code == 422 and blank.json()["error"] == "q is empty; give text to translate", blank.text


@pytest.mark.parametrize("pairs", [ONE, MANY], ids=["one", "many"])
def test_attention_of_a_language_into_itself_is_a_422(vocab, pairs):
    """/attention shows one model's weights: de -> de or en -> en has none to show (a language served both ways was
    routed as a round trip through two models): a 422 that says why."""
    app, models = server(vocab, pairs)
    got = call(app, [("POST", "/attention", {"q": "Hello there.", "source": code, "target": code})
                     for code in ("de", "en")])
    for code, r in zip(("de", "en"), got):
        assert r.status_code == 422 and f"both {code!r}" in r.json()["error"], r.text
    assert decoded(models) == 0


def test_auto_into_a_target_not_served_or_from_a_target_only_language(vocab):
    """"auto" with a target served nowhere: the 400 names the target (not a source the client never sent); a text
    detected as a language served only as a target (English, on de -> en and fr -> es), into another target (es),
    with no candidate that reaches it: a 400 that says what was detected and which sources reach the target."""
    app, models = server(vocab, [("de", "en"), ("fr", "es")])
    nowhere, target_only = call(app, [("POST", "/translate", {"q": ENGLISH, "source": "auto", "target": "zz"}),
                                      ("POST", "/translate", {"q": ENGLISH, "source": "auto", "target": "es"})])
    assert nowhere.status_code == 400 and nowhere.json()["error"].startswith("target 'zz' is not served"), nowhere.text
    assert 'send target "en" or "es"' in nowhere.json()["error"]
    assert target_only.status_code == 400, target_only.text
    assert target_only.json()["error"] == ('the text reads as en (detected, confidence 99), which is not translated '
                                           'into es here; send its source language: "fr"')
    assert decoded(models) == 0
