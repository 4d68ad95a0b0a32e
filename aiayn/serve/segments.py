"""What of a LibreTranslate text goes to the model, and how the answer is put back together.

A model translates one sentence at a time, so a text is cut into pieces: the ones to translate (sentences) and the
ones kept as they are (line breaks, the spaces around them, empty lines; in HTML the tags, comments and the
contents of <script>, <style>, <code> and <pre>). The answer joins the translated and kept pieces in their order,
so a text of three lines comes back as three lines, and an HTML fragment keeps its tags and attributes.

Sentences: aiayn.decoding.sentences.split_sentences, the rule `aiayn translate` splits lines with.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
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


class _Fragment(HTMLParser):
    """An HTML fragment as pieces: text nodes as text_pieces (outside skipped elements), everything else kept as
    written."""

    SKIP = {"script", "style", "code", "pre"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.pieces: list[Piece] = []
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.pieces.append(Piece(self.get_starttag_text(), False))
        if tag in self.SKIP:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.pieces.append(Piece(self.get_starttag_text(), False))

    def handle_endtag(self, tag):
        self.pieces.append(Piece(f"</{tag}>", False))
        if tag in self.open:
            del self.open[len(self.open) - 1 - self.open[::-1].index(tag):]

    def handle_data(self, data):
        if self.open and self.open[-1] in ("script", "style"):  # raw text: not entity-decoded, not to be escaped
            self.pieces.append(Piece(data, False))
        elif self.open:
            self.pieces.append(Piece(html.escape(data, quote=False), False))
        else:
            self.pieces += text_pieces(data)

    def handle_comment(self, data):
        self.pieces.append(Piece(f"<!--{data}-->", False))

    def handle_decl(self, decl):
        self.pieces.append(Piece(f"<!{decl}>", False))

    def unknown_decl(self, data):  # <![CDATA[...]]> (data "CDATA[..."), <![if ...]>
        self.pieces.append(Piece(f"<![{data}]]>" if data.startswith("CDATA[") else f"<![{data}]>", False))

    def handle_pi(self, data):
        self.pieces.append(Piece(f"<?{data}>", False))


def html_pieces(fragment: str) -> list[Piece]:
    """An HTML fragment as pieces; translated text is escaped when joined (join(..., escape=True))."""
    parser = _Fragment()
    parser.feed(fragment)
    parser.close()
    return parser.pieces


def pieces(text: str, format: str) -> list[Piece]:
    return html_pieces(text) if format == "html" else text_pieces(text)


def join(parts: list[Piece], translations: list[str], escape: bool = False) -> str:
    """The pieces with each one to translate replaced by the next of `translations` (HTML-escaped if `escape`)."""
    answers = iter(translations)
    return "".join((html.escape(next(answers), quote=False) if escape else next(answers)) if p.translate else p.text
                   for p in parts)
