"""aiayn.serve.detect: the language of a text among the served sources, answered as LibreTranslate 1.9.6 answers it."""

import pytest

pytest.importorskip("lingua", reason="the serve extra installs lingua-language-detector")
from aiayn.serve.detect import Detector  # noqa: E402

SENTENCES = {  # short and long, each unmistakable to a reader
    "en": ["Where is the train station?", "The committee will publish its report after the summer holidays."],
    "de": ["Wo ist der Bahnhof?", "Der Ausschuss wird seinen Bericht nach den Sommerferien veröffentlichen."],
    "es": ["¿Dónde está la estación?", "El comité publicará su informe después de las vacaciones de verano."],
    "fr": ["Où est la gare ?", "Le comité publiera son rapport après les vacances d'été."],
}


def test_each_language_is_found_among_the_served_ones():
    detector = Detector(["en", "de", "es", "fr"])
    for code, texts in SENTENCES.items():
        for text in texts:
            found = detector.detect(text)
            assert found[0]["language"] == code, (text, found)
            assert 0 < found[0]["confidence"] <= 100 and len(found) <= 3
            assert [f["confidence"] for f in found] == sorted((f["confidence"] for f in found), reverse=True)
            assert {f["language"] for f in found} <= {"en", "de", "es", "fr"}


def test_only_served_languages_are_answered():
    """A French text on a server reading English and German: one of those two, never fr."""
    found = Detector(["en", "de"]).detect(SENTENCES["fr"][1])
    assert {f["language"] for f in found} <= {"en", "de"}


@pytest.mark.parametrize("text", ["12345", "!!! ???", "😀🎉", "   ", "", "3.14 + 2 = 5.14"])
def test_nothing_to_detect_is_confidence_zero_with_the_fallback(text):
    """LibreTranslate answers such text {"confidence": 0.0, "language": "en"}; the fallback is English where it is
    served, else the first source language."""
    assert Detector(["de", "en", "es"]).detect(text) == [{"confidence": 0.0, "language": "en"}]
    assert Detector(["fr", "de"]).detect(text) == [{"confidence": 0.0, "language": "de"}]


def test_one_source_language_and_codes_lingua_does_not_know():
    assert Detector(["es"]).detect("Hola") == [{"confidence": 100.0, "language": "es"}]
    assert Detector(["es"]).detect("42") == [{"confidence": 0.0, "language": "es"}]
    mixed = Detector(["en", "de", "tlh"])  # Klingon: no model; never detected
    assert mixed.detect(SENTENCES["de"][1])[0]["language"] == "de"
    assert Detector(["pt-BR", "en"]).detect("O comitê publicará o relatório depois das férias.")[0]["language"] \
        == "pt-BR"
    with pytest.raises(ValueError):
        Detector([])
