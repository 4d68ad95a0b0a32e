"""HTML and XHTML as blocks of text with inline spans, and back (what `format: "html"` translates).

Block-level tags (p, li, td, h1-h6, br, div ...) end a block; inline tags (b, i, a, span, sup ...) become "wrap"
spans of the block's text, rebuilt around the translated words they wrap (their start tag as written, links keep
their href). Images and other inline void tags are "void" spans: they keep their place among the words. Left exactly
as written: `code`, `kbd`, `samp`, `pre`, `script`, `style`, `textarea`, `svg`, `math`, comments and any element with
`translate="no"` or the class `notranslate` (inline, such an element is a "keep" span: its text stays in the
sentence for context and the element comes back as written). `alt` and `title` attributes are translated, `lang` and
`xml:lang` become the target language. Everything outside the translated text (the doctype, tags, whitespace between
blocks, an unclosed `<script>`) is copied from the input as written; in translated text `&amp;`, `&lt;`, `&gt;` and
`&nbsp;` are written as entities and a symbol written as an entity (`&copy;`) is kept as written.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser

from aiayn.markup.spans import Block, Pending, Span, Translate, contains, walk, with_protected

INLINE = frozenset("a abbr acronym b bdi bdo big cite data del dfn em font i img ins label mark nobr q rp rt ruby s "
                   "small span strike strong sub sup time tt u var wbr".split())
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
UNTOUCHED = frozenset("code kbd samp pre script style textarea svg math template".split())
TRANSLATED_ATTRIBUTES = ("alt", "title")
_ATTRIBUTE = re.compile(r"""(\s)([\w:-]+)(\s*=\s*)("[^"]*"|'[^']*'|[^\s"'=<>`]+)""")


@dataclass
class Tag:
    """An inline element: its start tag as written, its end tag if the block holds it."""

    start: str
    name: str
    end: str = ""


class _Events(HTMLParser):
    """The document as events (kind, offset, tag, attrs): each event's text is the input from its offset to the
    next event's, so nothing is lost (not even an unclosed <script>'s text, which the parser holds back)."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=False)
        self.events: list[tuple[str, int, str, list]] = []
        self._lines = [0] + [m.end() for m in re.finditer("\n", source)]

    def _add(self, kind: str, tag: str = "", attrs: list | None = None) -> None:
        line, column = self.getpos()
        self.events.append((kind, self._lines[line - 1] + column, tag, attrs or []))

    def handle_starttag(self, tag, attrs):
        self._add("start", tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._add("startend", tag, attrs)

    def handle_endtag(self, tag):
        self._add("end", tag)

    def handle_data(self, data):
        self._add("text")

    def handle_entityref(self, name):
        self._add("ref")

    def handle_charref(self, name):
        self._add("ref")

    def handle_comment(self, data):
        self._add("raw")

    def handle_decl(self, decl):
        self._add("raw")

    def handle_pi(self, data):
        self._add("raw")

    def unknown_decl(self, data):
        self._add("raw")


def _untouched(tag: str, attrs: list) -> bool:
    values = dict(attrs)
    classes = (values.get("class") or "").split()
    return tag in UNTOUCHED or (values.get("translate") or "").lower() == "no" or "notranslate" in classes


class HtmlDocument:
    """A parsed document: raw pieces, blocks of text, and the attributes to translate."""

    def __init__(self, source: str):
        parser = _Events(source)
        parser.feed(source)
        parser.close()
        events = parser.events
        self.source = source
        self.items: list[tuple[str, object]] = []  # ("raw", text) | ("block", index) | ("tag", (raw, attrs))
        self.blocks: list[Block] = []
        self.attributes: list[str] = []  # values of alt and title, translated as blocks of their own
        self._text: list[str] = []
        self._spans: list[Span] = []
        self._open: list[tuple[int, Tag]] = []  # inline elements open in the current block
        ends = [e[1] for e in events[1:]] + [len(source)]
        if events and events[0][1] > 0:
            self.items.append(("raw", source[: events[0][1]]))
        k = 0
        while k < len(events):
            k = self._event(events, ends, k)
        self._flush()

    def _event(self, events, ends, k: int) -> int:
        """Take in the event at k; the index of the next one."""
        kind, start, tag, attrs = events[k]
        raw = self.source[start:ends[k]]
        if kind in ("start", "startend") and _untouched(tag, attrs):
            last = k if kind == "startend" or tag in VOID else _closing(events, k)
            raw = self.source[start:ends[last]]
            if tag in INLINE or tag in ("code", "kbd", "samp"):
                text = "".join(html.unescape(self.source[e[1]:ends[i]]) for i, e in enumerate(events[k:last + 1], k)
                               if e[0] in ("text", "ref"))
                self._add_text(text, Span(0, 0, "keep", ("raw", raw)))
            elif tag in ("script", "style", "template", "svg", "math") and self._joined().strip():
                self._spans.append(Span(len(self._joined()), len(self._joined()), "void", ("raw", raw)))
            else:
                self._raw(raw, block=True)
            return last + 1
        if kind == "text":
            self._add_text(html.unescape(raw))
        elif kind == "ref":
            char = html.unescape(raw)
            symbol = char != raw and not char.isspace() and not any(c.isalnum() for c in char)
            self._add_text(char, Span(0, 0, "keep", ("raw", raw)) if symbol else None)
        elif kind == "raw" and not self._joined() and not self._spans:
            self.items.append(("raw", raw))
        elif kind == "raw":
            self._spans.append(Span(len(self._joined()), len(self._joined()), "void", ("raw", raw)))
        elif tag in INLINE and tag in VOID or (kind == "startend" and tag in INLINE):
            at = len(self._joined())
            self._spans.append(Span(at, at, "void", ("tag", self._tag(raw, attrs))))
        elif tag in INLINE and kind == "start":
            self._spans.append(Span(len(self._joined()), -1, "wrap", Tag(self._tag(raw, attrs), tag)))
            self._open.append((len(self._spans) - 1, self._spans[-1].key))
        elif tag in INLINE and kind == "end":
            self._close(tag, raw)
        else:  # block-level: ends the block
            self._raw(self._tag(raw, attrs) if kind != "end" else raw, block=True)
        return k + 1

    def _joined(self) -> str:
        if len(self._text) > 1:
            self._text[:] = ["".join(self._text)]
        return self._text[0] if self._text else ""

    def _add_text(self, text: str, span: Span | None = None) -> None:
        at = len(self._joined())
        self._text.append(text)
        if span is not None and not text:
            self._spans.append(Span(at, at, "void", span.key))
        elif span is not None:
            self._spans.append(Span(at, at + len(text), span.kind, span.key))

    def _tag(self, raw: str, attrs: list) -> tuple[str, list]:
        """A start tag to rebuild: its text and which of its alt/title values are translated (their indices)."""
        names = {name for name, value in attrs if name in TRANSLATED_ATTRIBUTES and value and value.strip()}
        found = []
        for name, value in attrs:
            if name in names:
                found.append(len(self.attributes))
                self.attributes.append(value)
        return raw, found

    def _close(self, tag: str, raw: str) -> None:
        """An inline end tag: ends the innermost open element of that name in this block (else kept as written)."""
        for depth in range(len(self._open) - 1, -1, -1):
            index, key = self._open[depth]
            if key.name == tag:
                for inner_index, inner in self._open[depth:]:  # unclosed inner elements end here too
                    self._spans[inner_index] = Span(self._spans[inner_index].start, len(self._joined()), "wrap", inner)
                key.end = raw
                del self._open[depth:]
                return
        self._spans.append(Span(len(self._joined()), len(self._joined()), "void", ("raw", raw)))

    def _raw(self, raw: str | tuple, block: bool) -> None:
        if block:
            self._flush()
        self.items.append(("tag", raw) if isinstance(raw, tuple) else ("raw", raw))

    def _flush(self) -> None:
        """End the current block: elements still open end with it (their end tags, if any, come later as written)."""
        text = self._joined()
        for index, key in self._open:
            self._spans[index] = Span(self._spans[index].start, len(text), "wrap", key)
        self._open.clear()
        if text or self._spans:
            self.items.append(("block", len(self.blocks)))
            self.blocks.append(Block(text, with_protected(text, self._spans)))
        self._text.clear()
        self._spans = []

    def render(self, blocks: list[Block], attributes: list[str], target_lang: str | None) -> str:
        """The document with each block replaced by its translation, attributes translated, lang set."""
        out = []
        for kind, value in self.items:
            if kind == "raw":
                out.append(value)
            elif kind == "tag":
                out.append(_start_tag(value, attributes, target_lang))
            else:
                out.append(_render_block(blocks[value], attributes, target_lang))
        return "".join(out)


def _closing(events, k: int) -> int:
    """The index of the end tag closing the element started at k (the last event if none does)."""
    tag, depth = events[k][2], 0
    for i in range(k, len(events)):
        kind, _, name, _ = events[i]
        if name == tag and kind == "start":
            depth += 1
        elif name == tag and kind == "end":
            depth -= 1
            if depth == 0:
                return i
    return len(events) - 1


def _start_tag(tag: tuple[str, list], attributes: list[str], target_lang: str | None) -> str:
    """A start tag as written, its alt/title values translated and its lang the target's."""
    raw, found = tag
    translated = iter(attributes[i] for i in found)

    def swap(m: re.Match) -> str:
        name = m.group(2).lower()
        if name in ("lang", "xml:lang") and target_lang:
            value = target_lang
        elif name in TRANSLATED_ATTRIBUTES and found and html.unescape(m.group(4).strip("\"'")).strip():
            value = next(translated, None)
            if value is None:
                return m.group(0)
        else:
            return m.group(0)
        return f'{m.group(1)}{m.group(2)}{m.group(3)}"{html.escape(value, quote=True)}"'

    return _ATTRIBUTE.sub(swap, raw)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\xa0", "&nbsp;")


def _render_block(block: Block, attributes: list[str], target_lang: str | None) -> str:
    out = []
    for event, span, text in walk(block):
        if event == "text":
            out.append(_escape(text))
        elif event == "open":
            out.append(_start_tag(span.key.start, attributes, target_lang))
        elif event == "close":
            out.append(span.key.end)
        elif isinstance(span.key, tuple) and span.key[0] == "raw":
            out.append(span.key[1])
        elif isinstance(span.key, tuple) and span.key[0] == "tag":
            out.append(_start_tag(span.key[1], attributes, target_lang))
        else:
            out.append(_escape(text))
    return "".join(out)


class HtmlTranslation:
    """An HTML text waiting for its translations (translate_html in two steps, for a server's batcher): its
    `sentences` (the blocks', then the alt and title values'), then `finish(results, target_lang)` with one
    (translation, alignment) per sentence -> the translated HTML."""

    def __init__(self, markup: str, source_lang: str):
        self.document = HtmlDocument(markup)
        attributes = [Block(value, with_protected(value, [])) for value in self.document.attributes]
        self.pending = Pending(self.document.blocks + attributes, source_lang)
        self.sentences = self.pending.sentences

    def finish(self, results, target_lang: str | None = None) -> str:
        done = self.pending.finish(results)
        n = len(self.document.blocks)
        return self.document.render(done[:n], [b.text for b in done[n:]], target_lang)


def translate_html(markup: str, translate: Translate, source_lang: str, target_lang: str | None = None) -> str:
    """A document or fragment translated sentence by sentence, its markup carried through the word alignments."""
    pending = HtmlTranslation(markup, source_lang)
    return pending.finish(translate(pending.sentences) if pending.sentences else [], target_lang)


__all__ = ["HtmlDocument", "HtmlTranslation", "Tag", "contains", "translate_html", "with_protected"]
