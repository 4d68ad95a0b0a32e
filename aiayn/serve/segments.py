"""What of a LibreTranslate text (format "text") goes to the model, and how the answer is put back together.

A model translates one sentence at a time, so a text is cut into pieces: the ones to translate (sentences) and the
ones kept as they are (line breaks, the spaces around them, empty lines). The answer joins the translated and kept
pieces in their order, so a text of three lines comes back as three lines. (format "html" goes through the markup
layer instead: aiayn.markup.html, sentences whole across inline tags.)

Sentences: aiayn.decoding.sentences.split_sentences, the rule `aiayn translate` splits lines with.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from aiayn.decoding.sentences import split_sentences


class Piece(NamedTuple):
    text: str
    translate: bool  # False: kept as it is


def text_pieces(text: str) -> list[Piece]:
    """A plain text as pieces: each sentence of each non-blank line to translate; line breaks, blank lines and the
    spaces around a line's sentences kept."""
    pieces = []
    for part in re.split(r"(\s*\n\s*)", text):  # separators (odd indexes): a line break with the spaces around it
        if not part.strip():
            pieces.append(Piece(part, False))
            continue
        lead, body, trail = re.fullmatch(r"(\s*)(.*?)(\s*)", part, re.S).groups()
        pieces.append(Piece(lead, False))
        for sentence in split_sentences(body):
            core = sentence.rstrip()
            pieces += [Piece(core, True), Piece(sentence[len(core):], False)]
        pieces.append(Piece(trail, False))
    return [p for p in pieces if p.text]


def join(parts: list[Piece], translations: list[str]) -> str:
    """The pieces with each one to translate replaced by the next of `translations`."""
    answers = iter(translations)
    return "".join(next(answers) if p.translate else p.text for p in parts)
