"""A block's sentences by its language's rules: sentencex (Wikimedia's segmenter: the abbreviations and sentence
ends of about 300 languages) where it is installed, else aiayn's own English-abbreviation rule."""

from __future__ import annotations

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
    ranges = [_strip(text, s, e) for s, e in bounds]
    return [(s, e) for s, e in ranges if s < e]
