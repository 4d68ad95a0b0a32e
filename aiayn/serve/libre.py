"""LibreTranslate's side of the API: a language pair a model translates, and the shapes of requests and answers.

A LibreTranslate server holds many Argos models and picks one per request from `source` and `target`; so does an
aiayn server of many models (aiayn.serve.models: the routing, the pivot, GET /languages), and one of a single model
serves its one pair. "auto" detects each text's language among every language served, as a source or a target
(aiayn.serve.detect); a text whose language is its target comes back unchanged, as LibreTranslate returns it.

A model's pair comes from the run's prepared data (`aiayn prepare --source-lang --target-lang`, or train.en/train.es:
aiayn.languages), or from `aiayn serve` (--source-lang/--target-lang, or --checkpoint SRC:TGT=PATH); `LanguagePair`
holds it here. A text is translated line by line and sentence by sentence (aiayn.serve.segments), an HTML one
sentence by sentence with its tags carried (aiayn.markup.html).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from aiayn.languages import check_code

# English names of the codes LibreTranslate's language list uses most (ISO 639-1); any other code is its own name.
LANGUAGE_NAMES = {
    "ar": "Arabic", "az": "Azerbaijani", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "da": "Danish", "de": "German", "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French", "ga": "Irish",
    "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "ms": "Malay", "nb": "Norwegian",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak",
    "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian", "sv": "Swedish", "th": "Thai", "tl": "Tagalog",
    "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
}

@dataclass(frozen=True)
class LanguagePair:
    """The translation direction a model serves (default: the paper's English -> German)."""

    source: str = "en"
    target: str = "de"

    def __post_init__(self) -> None:
        check_code(self.source, "source")
        check_code(self.target, "target")
        if self.source == self.target:
            raise ValueError(f"the source and target languages are both {self.source!r}; a model translates "
                             "between two")

    def __str__(self) -> str:
        return f"{self.source} ({language_name(self.source)}) -> {self.target} ({language_name(self.target)})"


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code.split("-")[0].split("_")[0].lower(), code)


# ---------------------------------------------------------------------------------------------------------
# Requests and answers. Unknown fields are ignored, as LibreTranslate ignores them.


class TranslateRequest(BaseModel):
    """LibreTranslate's POST /translate, plus nothing: every field of theirs is read or accepted."""

    model_config = ConfigDict(extra="ignore")
    q: str | list[str] = Field(description="a text, or a list of texts translated independently (in a form: the "
                                           "field once, or repeated)")
    source: str | None = Field(None, description='the source language code, or "auto": each text\'s language is '
                                                 "detected among the languages served (the answer then carries "
                                                 "detectedLanguage; a text already in the target language comes "
                                                 "back unchanged); GET /languages lists what is served")
    target: str | None = Field(None, description="the target language code; absent: the source's one target")
    format: Literal["text", "html"] = Field("text", description="text: each line and sentence translated, line breaks "
                                                                "and blank lines kept; html: an HTML fragment "
                                                                "translated sentence by sentence, each inline tag "
                                                                "carried to the words aligned to its words "
                                                                "(aiayn.markup.html)")
    alternatives: int = Field(0, ge=0, description="n-best: this many further translations, best first (< beam)")
    api_key: str | None = Field(None, description="LibreTranslate's API key field (docs/serving-access.md)")
    # aiayn's own decoding options, beside LibreTranslate's fields (which a LibreTranslate client sends unchanged)
    prefix: str | list[str] | None = Field(None, description="aiayn: the text each translation starts with (a list, "
                                                             "one per text, for a list q; empty: none)")
    no_repeat_ngram_size: int = Field(0, ge=0, description="aiayn: ban a token that would repeat an n-gram of this "
                                                           "size (0: off)")
    sampling: bool = Field(False, description="aiayn: draw each token instead of beam search; alternatives: more "
                                              "samples")
    top_k: int = Field(0, ge=0, description="aiayn, sampling: from the k most probable tokens only (0: all)")
    top_p: float = Field(1.0, gt=0, le=1, description="aiayn, sampling: from the nucleus of mass >= top_p only")
    temperature: float = Field(1.0, ge=0, description="aiayn, sampling: softmax(log-probs / temperature); 0: greedy")
    seed: int = Field(0, ge=0, description="aiayn, sampling: text i of the request draws from a generator seeded "
                                           "by (seed, i)")
    glossary: list[tuple[str, str]] | None = Field(None, description="aiayn: [source term, target term] pairs; each "
                                                                     "source term found in a sentence (whole words, "
                                                                     "case as written) puts the target term in place "
                                                                     "of the words aligned to it (aiayn.markup.lines; "
                                                                     "JSON only; format text)")
    shortlist: bool | None = Field(None, description="aiayn: decode with the server's lexical shortlist (faster; "
                                                     "absent: as the server is started, aiayn serve --shortlist); "
                                                     "false: the full vocabulary; true needs a server with one")

    def search_options(self) -> dict:
        """The decoding options this request sets (SearchConfig fields), left out where they are the defaults."""
        fields = ("no_repeat_ngram_size", "sampling", "top_k", "top_p", "temperature", "seed")
        return {name: getattr(self, name) for name in fields if name in self.model_fields_set}


class DetectedLanguage(BaseModel):
    confidence: float = Field(description="0-100: how likely the text is in this language rather than in another "
                                          "language served; 0: nothing to detect (digits, punctuation, emoji), the "
                                          "fallback language")
    language: str


class TranslateResponse(BaseModel):
    translatedText: str | list[str]
    alternatives: list[str] | list[list[str]] | None = None
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = Field(
        None, description='when source was "auto": the language detected (a list, one per text, for a list q)')
    pivot: str | list[str | None] | None = Field(None, description="aiayn: where no model translates the pair "
                                                                   "directly, the language the text went through "
                                                                   "(a list, null where direct, for a list q)")
    scores: list[float] | list[list[float]] = Field(description="normalized log-prob of translatedText, then of "
                                                                "each alternative (a list per text for a list q)")


class DetectRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    q: str = Field(description="a text")
    api_key: str | None = Field(None, description="LibreTranslate's API key field (docs/serving-access.md)")


class Language(BaseModel):
    code: str
    name: str = Field(description="in English")
    targets: list[str] = Field(description="the codes this language is translated into here")


class AttentionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    q: str = Field(description="one source sentence")
    translation: str | None = Field(None, description="the translation to show attention for; null or absent: the "
                                                      "model's own")
    source: str | None = Field(None, description='the source language code, or "auto" (as /translate\'s)')
    target: str | None = Field(None, description="the target language code (a pair one model translates)")


class ErrorResponse(BaseModel):
    """Every error: what is wrong and what to send; "limit" and "max" when a limit was hit."""

    error: str
    limit: str | None = None
    max: float | None = None
