"""A request's texts translated along their routes (aiayn.serve.models.Models.route): the texts that share a route
are decoded together, each route's sentences in one submission per model; a pivot's first leg hands its best
translations to the second (as Argos chains two models), which gives the n-best, scores and prefix the request asked
for. Routes run concurrently: their models decode on threads of their own.

Spans carried through a translation (aiayn.markup, as `aiayn translate` carries them): numbers, prices, dates, URLs,
e-mail addresses, emoji and symbols keep their characters, and glossary terms replace the words aligned to their
source terms (aiayn.markup.lines.carry_nbests; each term's own translation, the route's translation of the term
alone, picks the word). A route's sentences are submitted with word alignments (the batcher's `alignments=True`)
where one of them holds such a span, and only those are changed; without one they are submitted as they were.
Through a pivot the two legs' alignments are composed (source -> middle -> target: aiayn.markup.engines.compose),
so the spans follow the middle language's words. With `markup=True` (HTML,
documents) every sentence comes back with its alignment and nothing is carried here: the markup layer does it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence

from aiayn.decoding.lines import Translation, aligned_lines
from aiayn.markup.engines import compose
from aiayn.markup.lines import carry_nbests, drop_unknown, sentence_spans, term_spans
from aiayn.serve.bodies import ApiError
from aiayn.serve.libre import LanguagePair
from aiayn.serve.models import Models


async def translate_along(models: Models, routes: list[list[LanguagePair] | None], sentences: list[list[str]],
                          prefixes: list[str] | None, nbest: int, options: dict, shortlist: bool | None,
                          glossary=None, markup: bool = False) -> list[list[list[Translation]]]:
    """Per text, the n-best list of each of its sentences (in order), spans carried (module docstring).
    routes[i], sentences[i]: text i's route and sentences (route None: nothing to translate); prefixes[i]: the text
    its first sentence's translation starts with; glossary: an aiayn.decoding.glossary.Glossary (or None), its source
    terms in the text's language; markup: every translation with its word alignment (for the markup layer), nothing
    carried."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, route in enumerate(routes):
        if route:
            groups[tuple(route)].append(i)

    async def one(route: tuple, members: list[int]) -> list[list[Translation]]:
        todo = [s for i in members for s in sentences[i]]
        starts = None
        if prefixes is not None:  # a text's prefix starts the translation of its first sentence
            starts = [prefixes[i] if k == 0 else "" for i in members for k in range(len(sentences[i]))]
        if not todo:
            return []
        if markup:
            return await _legs(models, list(route), todo, starts, nbest, options, shortlist, True, drop=True)
        return await _carried(models, list(route), todo, starts, nbest, options, shortlist, glossary)

    found = await asyncio.gather(*(one(route, members) for route, members in groups.items()))
    out: list[list[list[Translation]]] = [[] for _ in routes]
    for members, nbests in zip(groups.values(), found):
        it = iter(nbests)
        for i in members:
            out[i] = [next(it) for _ in sentences[i]]
    return out


async def _carried(models: Models, route: list[LanguagePair], sentences: list[str], prefixes: list[str] | None,
                   nbest: int, options: dict, shortlist: bool | None, glossary) -> list[list[Translation]]:
    """The sentences through the route, numbers, symbols and glossary terms carried into the ones that hold them;
    the others exactly as the models translate them. One submission for all of them (the ones that hold a span
    aligned), so sampling seeds each sentence as it would without spans."""
    spanned = [n for n, s in enumerate(sentences) if s.strip() and sentence_spans(s, glossary)]
    if not spanned:
        return await _legs(models, route, sentences, prefixes, nbest, options, shortlist)
    terms = sorted({span.key for n in spanned for span in term_spans(sentences[n], glossary)})
    flags = [False] * len(sentences)  # those sentences' alignments alone
    for n in spanned:
        flags[n] = True
    asked = [_legs(models, route, sentences, prefixes, nbest, options, shortlist, flags)]
    if terms:  # each term's own translation, with the server's search: how a translation spells it
        asked.append(_legs(models, route, terms, None, 1, {}, shortlist))
    found = await asyncio.gather(*asked)
    lexicon = dict(zip(terms, (hs[0].text for hs in found[1]))) if terms else {}
    out = [[h._replace(alignment=None) for h in hs] for hs in found[0]]
    carried = carry_nbests([sentences[n] for n in spanned], [found[0][n] for n in spanned], glossary, lexicon=lexicon)
    for n, hyps in zip(spanned, carried):
        out[n] = hyps
    return out


async def _legs(models: Models, route: list[LanguagePair], sentences: Sequence[str], prefixes: list[str] | None,
                nbest: int, options: dict, shortlist: bool | None, alignments: bool | list[bool] = False,
                drop: bool = False) -> list[list[Translation]]:
    """The sentences through every model of the route: the best of each leg is the next leg's source; alignments:
    each translation's word links from the route's source sentence (composed through the legs; a middle sentence
    without the vocabulary's unknown mark, and, with `drop`, the translations too, as aiayn.markup.engines does);
    a flag per sentence: those sentences' links alone (the others' None)."""
    links, aligned = None, any(aligned_lines(alignments, len(sentences)))
    for pair in route[:-1]:
        batcher = await models.batcher(pair)
        found = await batcher.submit(sentences, nbest=1, options=options, full_vocabulary=shortlist is False,
                                     alignments=alignments)
        if aligned:
            found = [[_known(s, hs[0])] for s, hs in zip(sentences, found)]
            links = [hs[0].alignment for hs in found]
        sentences = [hs[0].text for hs in found]
    batcher = await models.batcher(route[-1])
    if shortlist and batcher.translator.shortlist is None:
        raise ApiError(422, "shortlist: this server has no shortlist (aiayn serve --shortlist starts one with it); "
                            "leave the field out or send false")
    found = await batcher.submit(sentences, nbest=nbest, options=options, prefixes=prefixes,
                                 full_vocabulary=shortlist is False, alignments=alignments)
    if not aligned:
        return found
    if drop:
        found = [[_known(s, h) for h in hs] for s, hs in zip(sentences, found)]
    if links is None:
        return found
    return [[h._replace(alignment=compose(first, h.alignment)) for h in hs] for first, hs in zip(links, found)]


def _known(source: str, hyp: Translation) -> Translation:
    """A translation without the words that are only the vocabulary's unknown mark (what a model without digits
    writes for 2020), its links re-indexed (aiayn.markup.lines.drop_unknown)."""
    text, links = drop_unknown(source, hyp.text, hyp.alignment)
    return hyp if text == hyp.text else hyp._replace(text=text, alignment=links)
