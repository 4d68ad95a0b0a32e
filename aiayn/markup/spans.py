"""Spans carried through a translation: inline markup, text kept verbatim and glossary terms, one mechanism.

A block of a document (a paragraph, a list item, a table cell, a subtitle cue) is plain text plus spans: character
ranges of that text, each an inline element around words ("wrap"), text passed through verbatim ("keep": numbers,
URLs, code), words to be replaced by a given text ("replace": a glossary term) or a point ("void": an image, a line
break). `translate_blocks` cuts every block into sentences, translates all sentences in one call, and carries each
span to the target words aligned to the source words it covered (`carry`, one sentence):

- wrap: around the target words from the first to the last aligned to its words; if none is aligned (engines link
  each target word to one source word, so some source words get none), around the likeliest target word of each of
  its words: one between the targets of its nearest linked neighbours, else the nearer neighbour's; empty only when
  the translation has no word. Punctuation at the edge of a target word stays outside the element when the source
  element did not hold any there (`<b>God</b>.` -> `<b>Dios</b>.`).
- keep / replace: the first target word aligned to its words becomes its text (the source text, or `Span.text`), the
  others aligned to it are dropped; with none aligned, its text is inserted at a neighbour's place. Kept spans that
  share a source word ("base/big", "(--host x)", "aiayn translate's") go together, each exactly once: marked where
  the translation holds their text, else in place of the words they fill, the word's other punctuation kept once.
- A no-break space between two source words stays between their translations where these stand side by side.
- void: after the translation of the word before it (or before that of the word after it).

Then nesting is repaired: a span stays inside its source parent, two spans that would cross are cut so that one holds
the other or they are apart. The output is always well-formed and every span comes back exactly once per sentence it
touched (an element across a sentence end is two elements, one per sentence).

Nesting in a flat list: `Block.spans` lists spans in document order (an element before what it holds); a span lies
inside the nearest earlier "wrap" whose range holds it, except that an empty span at the end of a non-empty wrap lies
after it, and an empty wrap holds no empty wrap (it holds an image at its place: a linked image). `walk(block)`
turns a block into open/text/close events by that rule.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from aiayn.markup.nesting import Node, place
from aiayn.markup.sentences import sentence_ranges

KINDS = ("wrap", "keep", "replace", "void")
Alignment = list[tuple[int, int]]  # (source word, target word), words split at whitespace
# translate(sentences) -> one (translation, alignment) per sentence; alignment may be None (monotone fallback)
Translate = Callable[[list[str]], list[tuple[str, "Alignment | None"]]]

_WORD = re.compile(r"\S+")
_PUNCT = re.compile(r"^([^\w]*)(.*?)([^\w]*)$", re.S)


@dataclass(frozen=True)
class Span:
    """A character range [start, end) of a block's text: an inline element, kept text, a term or a point."""

    start: int
    end: int
    kind: str = "wrap"
    key: object = None  # what the format needs to rebuild the element (opaque here)
    text: str | None = None  # the replacement, for kind "replace"

    def at(self, start: int, end: int) -> Span:
        """The same span over another range (dataclasses.replace, without its cost in the hot loops)."""
        return Span(start, end, self.kind, self.key, self.text)


@dataclass
class Block:
    """One block-level element: its text and its spans in document order."""

    text: str
    spans: list[Span] = field(default_factory=list)


def contains(outer: Span, inner: Span) -> bool:
    """Whether `inner` (listed after `outer`) lies inside it: the flat list's nesting rule."""
    if outer.kind != "wrap" or not (outer.start <= inner.start and inner.end <= outer.end):
        return False
    if inner.start == inner.end == outer.end:  # a point at an element's end: after it, unless the element is empty
        return outer.start == outer.end and inner.kind != "wrap"  # and the point no element (<a><img></a>)
    return True


def walk(block: Block) -> Iterator[tuple[str, Span | None, str]]:
    """The block as events in order: ("text", None, text), ("open", span, ""), ("close", span, ""),
    ("keep", span, its text) for keep and replace spans, ("void", span, ""). Always balanced: a span crossing the
    end of the one it starts in is cut there."""
    stack: list[Span] = []
    pos = 0

    def text_to(end: int):
        nonlocal pos
        if end > pos:
            yield "text", None, block.text[pos:end]
            pos = end

    for span in block.spans:
        while stack and not (stack[-1].start <= span.start and (span.start < stack[-1].end or
                                                                contains(stack[-1], span.at(span.start, span.start)))):
            yield from text_to(stack[-1].end)
            yield "close", stack.pop(), ""
        end = min(span.end, stack[-1].end) if stack else span.end  # cut a crossing span
        start = max(span.start, pos)
        end = max(end, start)
        yield from text_to(start)
        if span.kind == "wrap":
            stack.append(span.at(start, end) if (start, end) != (span.start, span.end) else span)
            yield "open", span, ""
        elif span.kind == "void":
            yield "void", span, ""
        else:
            yield "keep", span, block.text[start:end]
            pos = end
    while stack:
        yield from text_to(stack[-1].end)
        yield "close", stack.pop(), ""
    yield from text_to(len(block.text))


def parents(spans: Sequence[Span]) -> list[int | None]:
    """Each span's parent (the index of the wrap it lies in, by the flat list's rule), or None."""
    out: list[int | None] = []
    stack: list[int] = []
    for i, span in enumerate(spans):
        while stack and not contains(spans[stack[-1]], span):
            stack.pop()
        out.append(stack[-1] if stack else None)
        if span.kind == "wrap":
            stack.append(i)
    return out


def words(text: str) -> list[tuple[int, int]]:
    """The whitespace-separated words of a text as (start, end) character ranges."""
    return [m.span() for m in _WORD.finditer(text)]


def _covered(span: Span, source_words: list[tuple[int, int]]) -> list[int]:
    """The source words a span overlaps."""
    return [i for i, (s, e) in enumerate(source_words) if s < span.end and span.start < e]


def _monotone(n_source: int, n_target: int) -> Alignment:
    """A diagonal alignment, for a translation without one."""
    return [(min(n_source - 1, j * n_source // max(n_target, 1)), j) for j in range(n_target)] if n_source else []


def carry(source: str, spans: Sequence[Span], translation: str,
          alignment: Alignment | None) -> tuple[str, list[Span]]:
    """One sentence: the translation (keep and replace spans' words substituted) and the spans moved onto it through
    the word alignment, well-formed, in document order. `spans` are ranges of `source`, in document order."""
    src = words(source)
    tokens = translation.split()
    if alignment is None:
        alignment = _monotone(len(src), len(tokens))
    links: dict[int, list[int]] = {}
    for i, j in alignment:
        if 0 <= i < len(src) and 0 <= j < len(tokens):
            links.setdefault(i, []).append(j)
    nodes = [Node(index=k, span=s, source_words=_covered(s, src)) for k, s in enumerate(spans)]
    for node, parent in zip(nodes, parents(spans)):
        node.parent = parent
        node.space_before = source[node.span.start - 1:node.span.start].isspace()
    return place(source, src, tokens, links, nodes)


def _piece(span: Span, lo: int, hi: int, text: str) -> Span | None:
    """The part of a span inside [lo, hi), shifted to start at lo; None when it has no text there (points: when it
    lies there)."""
    if span.start == span.end or span.kind == "void":
        return span.at(span.start - lo, span.end - lo) if lo <= span.start <= hi else None
    s, e = max(span.start, lo), min(span.end, hi)
    if s >= e or not text[s:e].strip():
        return None
    return span.at(s - lo, e - lo)


def has_letters(text: str) -> bool:
    """Whether a text holds a letter (a sentence without one is passed through untranslated)."""
    return any(unicodedata.category(c).startswith("L") for c in text)


def _plan(block: Block, source_lang: str) -> list[tuple[int, int, bool]]:
    """A block cut into pieces (start, end, is_sentence) that join back to its text; gaps are whitespace."""
    pieces, pos = [], 0
    for s, e in sentence_ranges(block.text, source_lang):
        if s > pos:
            pieces.append((pos, s, False))
        pieces.append((s, e, True))
        pos = e
    if pos < len(block.text) or not pieces:
        pieces.append((pos, len(block.text), False))
    return pieces


def _gap_spans(block: Block, lo: int, hi: int, claimed: set[int]) -> list[Span]:
    """The spans lying only in a gap (whitespace) between sentences, kept where they are."""
    out = []
    for k, span in enumerate(block.spans):
        if k in claimed:
            continue
        inside = lo <= span.start and span.end <= hi and (span.start < hi or span.start == span.end == hi == lo)
        if inside or (lo <= span.start <= hi and span.start == span.end):
            out.append(span.at(span.start - lo, span.end - lo))
            claimed.add(k)
    return out


class Pending:
    """Blocks cut into sentences, waiting for their translations: `sentences` (every sentence with a letter of every
    block, its whitespace collapsed) to translate in one call, or by a server's batcher, then `finish(results)` with
    one (translation, alignment) per sentence -> the translated blocks (translate_blocks in two steps)."""

    def __init__(self, blocks: Sequence[Block], source_lang: str):
        self.blocks = list(blocks)
        self.plans = [_plan(b, source_lang) for b in self.blocks]
        self.jobs = []  # (block index, piece index, sentence text)
        for b, (block, pieces) in enumerate(zip(self.blocks, self.plans)):
            for p, (s, e, is_sentence) in enumerate(pieces):
                if is_sentence and has_letters(block.text[s:e]):
                    self.jobs.append((b, p, " ".join(block.text[s:e].split())))
        self.sentences = [text for _, _, text in self.jobs]

    def finish(self, results: Sequence[tuple[str, Alignment | None]]) -> list[Block]:
        if len(results) != len(self.jobs):
            raise ValueError(f"translate returned {len(results)} translations for {len(self.jobs)} sentences")
        done: list[dict] = [{} for _ in self.blocks]  # per block: piece index -> (translation, alignment)
        for (b, p, _), result in zip(self.jobs, results):
            done[b][p] = result
        return [_assemble(block, pieces, got) for block, pieces, got in zip(self.blocks, self.plans, done)]


def translate_blocks(blocks: Sequence[Block], translate: Translate, source_lang: str) -> list[Block]:
    """Every block translated sentence by sentence, all sentences of all blocks in one call of `translate`, each
    block's spans carried to the words of its translation (see the module's docstring)."""
    pending = Pending(blocks, source_lang)
    return pending.finish(translate(pending.sentences) if pending.sentences else [])


def _assemble(block: Block, pieces: list[tuple[int, int, bool]], done: dict) -> Block:
    """A block's translation from its pieces: gaps as they were, sentences translated with their spans carried."""
    text, spans, claimed = [], [], set()
    offset = 0
    for p, (s, e, is_sentence) in enumerate(pieces):
        if is_sentence:
            mine = [(k, _piece(span, s, e, block.text)) for k, span in enumerate(block.spans)]
            mine = [(k, span) for k, span in mine if span is not None and (span.start != span.end or k not in claimed)]
            claimed.update(k for k, _ in mine)
            if p in done:
                out, moved = carry(block.text[s:e], [span for _, span in mine], *done[p])
            else:  # no letters: passed through as it is
                out, moved = block.text[s:e], [span for _, span in mine]
        else:
            out, moved = block.text[s:e], _gap_spans(block, s, e, claimed)
        spans.extend(span.at(span.start + offset, span.end + offset) for span in moved)
        text.append(out)
        offset += len(out)
    return Block("".join(text), spans)


# Text passed through verbatim: URLs, e-mail addresses, numbers with their signs (prices, dates, times, percentages).
_PROTECTED = re.compile(
    r"(?:https?://|ftp://|www\.)[^\s<>\"']+[^\s<>\"'.,;:!?)\]]"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    r"|[+\-−]?\d+(?:[.,:/\-]\d+)*(?:\s?%)?"
)
_JOINERS = {"\u200d", "\ufe0f", "\u20e3"}


def _symbol_runs(text: str) -> Iterator[tuple[int, int]]:
    """Runs of symbols (emoji, currency, ©, ™, arrows ...), joiners and skin tones included."""
    start = None
    for i, c in enumerate(text):
        symbol = unicodedata.category(c) in ("So", "Sc", "Sk") or (start is not None and c in _JOINERS)
        if symbol and start is None:
            start = i
        elif not symbol and start is not None:
            yield start, i
            start = None
    if start is not None:
        yield start, len(text)


def _price(text: str, left: tuple[int, int], right: tuple[int, int]) -> bool:
    """Whether two pieces one space apart are a number and a currency sign ("15 €", "$ 20")."""
    pieces = [text[a:b] for a, b in (left, right)]
    currency = [all(unicodedata.category(c) == "Sc" for c in p) for p in pieces]
    number = [p[-1].isdigit() for p in pieces]
    return right[0] - left[1] == 1 and text[left[1]].isspace() and (
        (number[0] and currency[1]) or (currency[0] and number[1]))


def protected_spans(text: str) -> list[Span]:
    """The spans of a text that are not language and must come back exactly: numbers, prices, dates, times, URLs,
    e-mail addresses, emoji and symbols ("keep" spans, in order, not overlapping; "15 €" is one)."""
    found = sorted([m.span() for m in _PROTECTED.finditer(text)] + list(_symbol_runs(text)))
    merged: list[tuple[int, int]] = []
    pieces = 0  # how many found pieces the last merged span holds
    for s, e in found:
        if merged and s <= merged[-1][1]:  # overlapping or touching ("2+2", "€15"): one span
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        elif merged and pieces == 1 and _price(text, merged[-1], (s, e)):
            merged[-1] = (merged[-1][0], e)
            pieces = 2
            continue
        else:
            merged.append((s, e))
        pieces = 1
    return [Span(s, e, "keep") for s, e in merged]


def with_protected(text: str, spans: list[Span]) -> list[Span]:
    """The spans (elements, glossary terms ...) with `protected_spans(text)` added where one overlaps no keep or
    replace span, crosses no element and holds no point (else its parts, "12" and "$" of "12 $", each where it can),
    each after the spans that start at or before it (document order): what a caller gives translate_blocks or carry
    so that numbers and symbols come back exactly."""
    out = list(spans)

    def fits(extra: Span) -> bool:
        return not any(s.start < extra.end and extra.start < s.end and (s.kind != "wrap" or not (
            s.start <= extra.start and extra.end <= s.end)) for s in out) and not any(
            s.start == s.end and extra.start < s.start < extra.end for s in out)

    for merged in protected_spans(text):
        parts = [merged] if fits(merged) else [Span(merged.start + s, merged.start + e, "keep") for s, e in sorted(
            [m.span() for m in _PROTECTED.finditer(text[merged.start:merged.end])] +
            list(_symbol_runs(text[merged.start:merged.end])))]
        for extra in parts:
            if fits(extra):
                at = next((i for i, s in enumerate(out) if s.start > extra.start), len(out))
                out.insert(at, extra)
    return out
