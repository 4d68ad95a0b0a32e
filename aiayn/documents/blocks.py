"""What every format shares: building Blocks while walking a document, translating them all in one call, and reading
a translated Block back as a tree of text and spans.

    BlockBuilder        text(), open(key)/close(), void(key), keep(text, key) -> Block; adjacent runs with the same
                        key (split only by voids: bookmarks, proofing marks) become one span, so a word split across
                        runs stays one word
    translate_all       every block of a document in one translate_blocks call (identical blocks once)
    is_code_style       a paragraph or character style that marks code (left as it is / kept verbatim)
    nest(block)         the translated block as a tree: Node(span, children) and plain strings, in text order
                        (aiayn.markup.spans.walk's nesting)
    distribute(...)     a block made of parts (subtitle cues, wrapped lines) cut back into its parts, in order

Spans and blocks are aiayn.markup.spans' (the markup layer carries them through word alignments).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiayn.markup.spans import Block, Span, translate_blocks, walk, with_protected


class BlockBuilder:
    """A block's text and spans, built in document order. Keys must be hashable (a block is looked up by value)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.pos = 0
        self.spans: list[list] = []  # [start, end, kind, key, text]
        self.stack: list[int] = []
        self.last_closed: int | None = None  # a span that a run of the same key right after may extend
        self.free = False  # a letter or digit outside kept text

    def text(self, s: str) -> None:
        if s:
            self.free = self.free or any(ch.isalnum() for ch in s)
            self.parts.append(s)
            self.pos += len(s)
            self.last_closed = None

    def open(self, key) -> None:
        last = self.last_closed
        if last is not None and self.spans[last][3] == key and self.spans[last][1] == self.pos:
            self.stack.append(last)  # the same formatting again, only voids between: one span
        else:
            self.spans.append([self.pos, None, "wrap", key, None])
            self.stack.append(len(self.spans) - 1)
        self.last_closed = None

    def close(self) -> None:
        i = self.stack.pop()
        self.spans[i][1] = self.pos
        self.last_closed = i

    def void(self, key) -> None:
        self.spans.append([self.pos, self.pos, "void", key, None])

    def keep(self, s: str, key) -> None:
        """Text passed through verbatim; right after kept text of the same key (a code run split in two) it
        extends that span, so one word never holds two kept pieces."""
        start, free = self.pos, self.free
        self.text(s)
        self.free = free
        self.mark_keep(start, key)

    def mark_keep(self, start: int, key) -> None:
        """The text added since `start` is kept verbatim (see keep)."""
        last = next((s for s in reversed(self.spans) if s[2] == "keep"), None)
        if last is not None and last[3] == key and last[1] == start and key == ("code",):
            last[1] = self.pos
        else:
            self.spans.append([start, self.pos, "keep", key, None])

    def has_text(self) -> bool:
        """Whether the block holds a letter or digit outside kept text (else there is nothing to translate)."""
        return self.free

    def block(self) -> Block:
        while self.stack:
            self.close()
        spans = [Span(*s) for s in self.spans]  # document order: an element before what it holds
        return Block("".join(self.parts), spans)


Translate = Callable[[list[str]], list]

# Styles that mark code in word processors (Word's HTML styles, LibreOffice's, common custom names), compared in
# lower case without spaces, underscores or ODF's "_20_": a paragraph of one is left as it is, a run of one is kept.
CODE_PARAGRAPH_STYLES = {"preformattedtext", "htmlpreformatted", "code", "codeblock", "sourcecode", "verbatim"}
CODE_RUN_STYLES = {"sourcetext", "htmlcode", "htmlkeyboard", "htmltypewriter", "htmlsample", "code", "codechar",
                   "inlinecode", "verbatimchar", "sourcecode"}


def is_code_style(name: str | None, paragraph: bool) -> bool:
    """Whether a paragraph (or run) style name marks code."""
    if not name:
        return False
    plain = re.sub(r"[^a-z0-9]", "", name.lower().replace("_20_", ""))
    return plain in (CODE_PARAGRAPH_STYLES if paragraph else CODE_RUN_STYLES)


def translate_all(blocks: Sequence[Block], translate: Translate, source_lang: str) -> list[Block]:
    """Each block translated (identical blocks, e.g. a text box Word holds twice, translated once and alike); blocks
    without a letter or digit come back as they are. One call of translate_blocks, so a server batches them. Numbers,
    URLs, e-mail addresses and symbols are keep spans (aiayn.markup.spans.with_protected), as in HTML."""
    unique: dict = {}
    for b in blocks:
        if any(ch.isalnum() for ch in b.text):  # numbers, URLs, symbols come back exactly (keep spans)
            unique.setdefault(_identity(b), Block(b.text, with_protected(b.text, b.spans)))
    todo = list(unique.values())
    translated = [whole_stays_whole(src, out) for src, out in zip(todo, translate_blocks(todo, translate, source_lang))]
    done = dict(zip(unique, translated))
    return [done.get(_identity(b), b) for b in blocks]


def whole_stays_whole(source: Block, translation: Block) -> Block:
    """An element that held the whole text of its block (a bold paragraph, a link that is a whole table-of-contents
    entry) holds the whole translation too, its punctuation included: nothing is left beside it (EPUB's navigation
    document allows no text beside an entry's link)."""
    lo, hi = _trimmed(source.text)
    whole = [repr(s.key) for s in source.spans if s.kind == "wrap" and s.start <= lo and hi <= s.end and lo < hi]
    if not whole:
        return translation
    tlo, thi = _trimmed(translation.text)
    keys = [repr(s.key) for s in translation.spans]
    outer, rest = [], []
    for span in translation.spans:
        if repr(span.key) in whole and keys.count(repr(span.key)) == 1:  # (one piece: not cut at a sentence end)
            outer.append(Span(min(span.start, tlo), max(span.end, thi), span.kind, span.key, span.text))
        else:
            rest.append(span)
    return Block(translation.text, outer + rest) if outer else translation


def _trimmed(text: str) -> tuple[int, int]:
    """Where a text's first and last non-space characters lie (start, end)."""
    return len(text) - len(text.lstrip()), len(text.rstrip())


def _identity(b: Block) -> tuple[str, str]:
    return b.text, repr(b.spans)  # keys may be unhashable (aiayn.markup.html's Tag): equal by their repr


def source_chars(blocks: Sequence[Block]) -> int:
    """The characters of the document's text that go to translation (every block holding a letter or digit, a
    repeated one each time it appears: what a reader sees), which the text budget counts."""
    return sum(len(b.text) for b in blocks if any(ch.isalnum() for ch in b.text))


@dataclass
class Node:
    span: Span
    children: list = field(default_factory=list)  # str | Node, in text order


def nest(block: Block) -> list:
    """The block as a tree (a list of str and Node, in text order), by aiayn.markup.spans' nesting rule (`walk`):
    keep and replace spans hold their text as their one child, voids none."""
    root = Node(Span(0, len(block.text)))
    stack = [root]
    for event, span, text in walk(block):
        if event == "text":
            stack[-1].children.append(text)
        elif event == "open":
            node = Node(span)
            stack[-1].children.append(node)
            stack.append(node)
        elif event == "close":
            stack.pop()
        else:  # keep, replace, void
            stack[-1].children.append(Node(span, [text] if text else []))
    return root.children


def distribute(items: list[tuple[int | None, str]], sizes: Sequence[int]) -> list[str]:
    """Cut a translated block back into its parts. items: the block's top-level pieces in target order, each with the
    part it was aligned to (None: text between parts, which joins the part before it), already rendered as text;
    sizes: each part's source length. Parts keep their order (a piece aligned to an earlier part than one before it
    joins that one); where a part would be left empty, the words are shared out in proportion to the source parts."""
    n = len(sizes)
    pieces = [""] * n
    current = 0
    for part, text in items:
        if part is not None:
            current = max(current, part)
        pieces[current] += text
    pieces = [p.strip() for p in pieces]
    if n > 1 and not all(pieces) and any(pieces):
        return proportional(" ".join(p for p in pieces if p), sizes)
    return pieces


def proportional(text: str, sizes: Sequence[int]) -> list[str]:
    """The words of `text` cut into len(sizes) pieces in proportion to sizes (each piece a word at least, while there
    are words)."""
    words = re.findall(r"\S+", text)
    n, total, w = len(sizes), max(sum(sizes), 1), len(words)
    cuts, acc = [0], 0
    for i, size in enumerate(sizes[:-1]):
        acc += size
        cut = max(round(w * acc / total), cuts[-1])
        if w >= n:  # enough words for one each: leave one at least to every piece
            cut = min(max(cut, cuts[-1] + 1), w - (n - 1 - i))
        cuts.append(min(cut, w))
    cuts.append(w)
    return [" ".join(words[a:b]) for a, b in zip(cuts, cuts[1:])]
