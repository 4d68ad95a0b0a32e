"""aiayn's engines as the markup layer's translator: sentences in, (text, word alignment) out.

Every engine's `translate_nbest(sentences, alignments=True)` gives each translation its hard word links
(`Translation.alignment`: source word i, target word j, one link per target word); an engine that gives none
(an older one, or `alignment` None) is placed on the diagonal (aiayn.markup.spans' monotone fallback)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from aiayn.markup.html import HtmlDocument
from aiayn.markup.lines import drop_unknown
from aiayn.markup.spans import Block, Translate, translate_blocks, with_protected


def _nbest(engine, sentences: list[str]) -> list[list]:
    """The engine's n-best lists, with alignments where it can give them."""
    if "alignments" in inspect.signature(engine.translate_nbest).parameters:
        return engine.translate_nbest(sentences, alignments=True)
    return engine.translate_nbest(sentences)


def translate_fn(engine, nbest: int = 1) -> Translate:
    """A translator for translate_blocks: the best translation of each sentence (nbest > 1: the nbest-th best,
    or the last the engine found), with its alignment."""

    def translate(sentences: list[str]):
        hyps = _nbest(engine, sentences)
        picked = [h[min(nbest, len(h)) - 1] for h in hyps]
        # the vocabulary's unknown mark (what a model without digits writes for 2020) dropped: aiayn.markup.lines
        return [drop_unknown(s, t.text, getattr(t, "alignment", None)) for s, t in zip(sentences, picked)]

    return translate


def nbest_blocks(blocks: Sequence[Block], engine, source_lang: str, nbest: int) -> list[list[Block]]:
    """Each block translated up to `nbest` ways from one decoding: the k-th holds the k-th best translation of every
    sentence (or the last one found), with the spans carried through its own alignment."""
    cache: dict[tuple[str, ...], list[list]] = {}

    def pick(k: int) -> Translate:
        def translate(sentences: list[str]):
            key = tuple(sentences)
            if key not in cache:
                cache[key] = _nbest(engine, sentences)
            return [(h[min(k, len(h) - 1)].text, getattr(h[min(k, len(h) - 1)], "alignment", None))
                    for h in cache[key]]
        return translate

    ways = [translate_blocks(blocks, pick(k), source_lang) for k in range(nbest)]
    return [list(per_block) for per_block in zip(*ways)] if blocks else []


def translate_html_nbest(markup: str, engine, source_lang: str, target_lang: str | None, nbest: int) -> list[str]:
    """An HTML text translated up to `nbest` ways from one decoding (format=html with alternatives): the best first."""
    document = HtmlDocument(markup)
    blocks = document.blocks + [Block(value, with_protected(value, [])) for value in document.attributes]
    if not blocks:
        return [document.render([], [], target_lang)] * nbest
    ways = list(zip(*nbest_blocks(blocks, engine, source_lang, nbest)))  # per way: every block
    n = len(document.blocks)
    return [document.render(list(way[:n]), [b.text for b in way[n:]], target_lang) for way in ways]


def compose(first: list[tuple[int, int]] | None, second: list[tuple[int, int]] | None) -> list[tuple[int, int]] | None:
    """Source -> pivot links then pivot -> target links as source -> target links: each target word linked to the
    source word of its pivot word (one link per target word; none where its pivot word has no link)."""
    if first is None or second is None:
        return None
    source_of: dict[int, int] = {}
    for i, j in first:
        source_of.setdefault(j, i)
    return [(source_of[j], k) for j, k in second if j in source_of]


def pivot(first: Translate, second: Translate) -> Translate:
    """A translator through a middle language: `first` to it, `second` from it, the alignments composed."""

    def translate(sentences: list[str]):
        middle = first(sentences)
        final = second([text for text, _ in middle])
        return [(text, compose(a, b)) for (_, a), (text, b) in zip(middle, final)]

    return translate
