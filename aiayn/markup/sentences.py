"""A block's sentences by its language's rules: sentencex (Wikimedia's segmenter: the abbreviations and sentence
ends of about 300 languages) where it is installed, else aiayn's own English-abbreviation rule.

Two of sentencex's cuts are undone, as aiayn's own rule never makes them: before a lower-case letter or punctuation
that is not an opening one ("3.5 pct. in Q2", "¿no hará?; habló", "?)") and after a lone letter and its full stop
(an initial: "M. Dupont", "J. Smith")."""

from __future__ import annotations

import unicodedata
from functools import lru_cache


@lru_cache(maxsize=1)
def _sentencex():
    try:
        import sentencex
    except ImportError:
        return None
    return sentencex


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    """A range without the whitespace at its ends."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def sentence_ranges(text: str, lang: str) -> list[tuple[int, int]]:
    """The sentences of a text as (start, end) character ranges, in order, without the whitespace around them."""
    if not text.strip():
        return []
    segmenter = _sentencex()
    if segmenter is not None:
        bounds = [(b["start_index"], b["end_index"]) for b in segmenter.get_sentence_boundaries(lang or "en", text)]
    else:
        from aiayn.decoding.sentences import split_sentences

        bounds, pos = [], 0
        for line in text.splitlines(keepends=True):
            for sentence in split_sentences(line):
                bounds.append((pos, pos + len(sentence)))
                pos += len(sentence)
    ranges = [r for r in (_strip(text, s, e) for s, e in bounds) if r[0] < r[1]]
    merged: list[tuple[int, int]] = []
    for s, e in ranges:
        if merged and _joined(text, merged[-1], s):
            merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


_OPENERS = "\"'“‘«([¿¡„"


def _joined(text: str, before: tuple[int, int], start: int) -> bool:
    """Whether a cut between two sentences is one to undo: the next starts lower-case, or the one before ends with
    an initial."""
    first = text[start:start + 8].lstrip(_OPENERS)[:1]
    last = text[before[0]:before[1]].rsplit(None, 1)[-1]
    closing = bool(first) and unicodedata.category(first).startswith("P")  # , ; : ) ” ... (openers were stripped)
    return first.islower() or closing or (len(last) == 2 and last[0].isalpha() and last[1] == ".")
