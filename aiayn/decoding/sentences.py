"""Sentence splitting: a line cut into its sentences, what `aiayn translate` and `aiayn serve` hand the model.

A line is cut after ., ! or ? (and any closing quote or bracket) followed by spaces and an upper-case letter, unless
the word before the stop is a single letter or a known abbreviation (Mr., Dr., St., ...): a conservative rule that
rather leaves two sentences together than cuts one in half. The spaces after a sentence stay at its end, so the
sentences join back to the line.
"""

from __future__ import annotations

import re

# A sentence end: stop, closing quotes/brackets, spaces; what follows must start with an upper-case letter.
_END = re.compile(r"""[.!?]+["'”’»)\]]*(\s+)(?=["'“‘«(\[¿¡]*\w)""")
_OPENERS = "\"'“‘«([¿¡"
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "sr", "sra", "jr", "st", "vs", "etc", "no", "vol", "fig",
                           "dept", "approx", "cf", "e.g", "i.e", "sen", "gen", "col", "lt", "sgt", "capt", "rev"})


def split_sentences(line: str) -> list[str]:
    """A line without line breaks as its sentences, the spaces between kept at the end of each (they join back to
    the line)."""
    out, start = [], 0
    for m in _END.finditer(line):
        after = line[m.end():].lstrip(_OPENERS)
        before = line[:m.start()]
        word = before.rsplit(None, 1)[-1].rstrip(".!?").lstrip(_OPENERS) if before.strip() else ""
        if after[:1].isupper() and len(word) > 1 and word.lower() not in ABBREVIATIONS:
            out.append(line[start:m.end()])
            start = m.end()
    out.append(line[start:])
    return [s for s in out if s]
