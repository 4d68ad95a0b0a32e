"""Which of the served languages a text is in: `source: "auto"` and POST /detect (docs/serving.md "Language
detection").

`Detector(codes)` is lingua (lingua-language-detector: n-gram models of 75 languages bundled in the wheel, made for
short text as well as long) restricted to the languages a server serves, as a source or a target (Models.codes():
a text already in its target language is found, and /translate returns it unchanged), its models loaded at start.
`detect(text)` answers as LibreTranslate 1.9.6's /detect does: up to three languages, best first, each with a
`confidence` from 0 to 100 (lingua's probability among the served languages, rounded to a whole number as
LibreTranslate rounds langdetect's). Text with nothing to detect (digits, punctuation, emoji) gets LibreTranslate's
own answer to it: confidence 0 with the fallback language (English where it is served, else the first code), never
a guess at 100 (a blank text never gets here: the routes answer it 422, as they answer an empty one). A detector of
one language reads every text with letters as that language (confidence 100: there is nothing to choose between);
codes lingua does not know are never detected.
"""

from __future__ import annotations

from collections.abc import Iterable

TOP = 3  # LibreTranslate answers its three best candidates


class Detector:
    """Language identification among `codes` (the languages served, LibreTranslate's codes)."""

    def __init__(self, codes: Iterable[str]):
        self.codes = sorted(set(codes))
        if not self.codes:
            raise ValueError("a detector needs at least one language")
        self.fallback = "en" if "en" in self.codes else self.codes[0]
        self._lingua, self._code_of = None, {}
        known = {}
        if len(self.codes) > 1:
            from lingua import IsoCode639_1, LanguageDetectorBuilder

            for code in self.codes:
                base = code.replace("_", "-").split("-")[0].lower()
                try:
                    known.setdefault(IsoCode639_1.from_str(base), code)  # pt and pt-BR: the first one listed
                except ValueError:
                    continue  # a code lingua does not know (it is never detected)
        if len(known) > 1:
            self._lingua = (LanguageDetectorBuilder.from_iso_codes_639_1(*known).with_preloaded_language_models()
                            .build())
            self._code_of = {iso.name.lower(): code for iso, code in known.items()}

    def detect(self, text: str) -> list[dict]:
        """[{"confidence": 0-100, "language": code}, ...]: up to three served languages, best first; confidence 0
        and the fallback language for text with nothing to detect."""
        if not any(ch.isalpha() for ch in text):
            return [{"confidence": 0.0, "language": self.fallback}]
        if self._lingua is None:  # one language to choose from (or one lingua knows): it
            return [{"confidence": 100.0, "language": self.codes[0] if len(self.codes) == 1 else self.fallback}]
        found = [(round(v.value * 100), self._code_of[v.language.iso_code_639_1.name.lower()])
                 for v in self._lingua.compute_language_confidence_values(text)]
        found = [(confidence, code) for confidence, code in found if confidence > 0][:TOP]
        if not found:  # letters lingua has no model for (a script none of the languages is written in)
            return [{"confidence": 0.0, "language": self.fallback}]
        return [{"confidence": float(confidence), "language": code} for confidence, code in found]

    def best(self, text: str) -> dict:
        """The most likely served language: detect(text)[0]."""
        return self.detect(text)[0]
