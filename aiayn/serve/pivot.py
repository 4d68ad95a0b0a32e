"""A request's texts translated along their routes (aiayn.serve.models.Models.route): the texts that share a route
are decoded together, each route's sentences in one submission per model; a pivot's first leg hands its best
translations to the second (as Argos chains two models), which gives the n-best, scores and prefix the request asked
for. Routes run concurrently: their models decode on threads of their own."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from aiayn.decoding.lines import Translation
from aiayn.serve.bodies import ApiError
from aiayn.serve.libre import LanguagePair
from aiayn.serve.models import Models
from aiayn.serve.segments import Piece


async def translate_along(models: Models, routes: list[list[LanguagePair] | None], split: list[list[Piece]],
                          prefixes: list[str] | None, nbest: int, options: dict, shortlist: bool | None,
                          glossary: list[tuple[str, str]] | None = None) -> list[list[list[Translation]]]:
    """Per text, the n-best list of each of its pieces to translate (in order). routes[i], split[i]: text i's route
    and pieces (route None: nothing to translate); prefixes[i]: the text its first sentence's translation starts
    with; glossary: the request's terms (a route of one model only: its source terms are the text's language)."""
    if glossary and any(route and len(route) > 1 for route in routes):
        pivoted = next(route for route in routes if route and len(route) > 1)
        raise ApiError(422, f"glossary: {pivoted[0].source} -> {pivoted[-1].target} is translated through "
                            f"{pivoted[0].target} (two models), and a glossary's source terms must be in the text the "
                            "model reads; send it for a pair one model translates")
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, route in enumerate(routes):
        if route:
            groups[tuple(route)].append(i)

    async def one(route: tuple, members: list[int]) -> list[list[Translation]]:
        sentences = [p.text for i in members for p in split[i] if p.translate]
        starts = None
        if prefixes is not None:  # a text's prefix starts the translation of its first sentence
            starts = [prefixes[i] if k == 0 else "" for i in members for k in range(sum(p.translate for p in split[i]))]
        return await _legs(models, list(route), sentences, starts, nbest, options, shortlist, glossary) \
            if sentences else []

    found = await asyncio.gather(*(one(route, members) for route, members in groups.items()))
    out: list[list[list[Translation]]] = [[] for _ in routes]
    for members, nbests in zip(groups.values(), found):
        it = iter(nbests)
        for i in members:
            out[i] = [next(it) for p in split[i] if p.translate]
    return out


async def _legs(models: Models, route: list[LanguagePair], sentences: list[str], prefixes: list[str] | None,
                nbest: int, options: dict, shortlist: bool | None, glossary: list | None = None
                ) -> list[list[Translation]]:
    """The sentences through every model of the route: the best of each leg is the next leg's source."""
    for pair in route[:-1]:
        batcher = await models.batcher(pair)
        found = await batcher.submit(sentences, nbest=1, options=options, full_vocabulary=shortlist is False)
        sentences = [hs[0].text for hs in found]
    batcher = await models.batcher(route[-1])
    if shortlist and batcher.translator.shortlist is None:
        raise ApiError(422, "shortlist: this server has no shortlist (aiayn serve --shortlist starts one with it); "
                            "leave the field out or send false")
    return await batcher.submit(sentences, nbest=nbest, options=options, prefixes=prefixes,
                                full_vocabulary=shortlist is False, glossary=glossary)
