"""Plain lines through any engine with spans carried: numbers and symbols kept, glossary terms placed.

A sentence's spans are its glossary terms ("replace" spans: a source term found as whole words, case as written,
the longest first where two overlap) and what is not language (aiayn.markup.spans.with_protected: numbers, prices,
dates, URLs, e-mail addresses, emoji, symbols, as "keep" spans). The engine translates the sentence as it would
without them (the plain search, alignments asked), then:

- terms (`place_terms`): a term the translation already holds is left; otherwise it replaces one word, the word
  that the source term's own translation (the engine's translation of the term alone, `term_translations`) names,
  nearest to the words aligned to the term, else the last of the longest run of words aligned to it; the replaced
  word keeps its edge punctuation, the rest of that run is dropped, a word repeated for the same term is replaced
  each time, and a term nothing is aligned to goes beside its neighbour's translation. So the term stands where the
  source term's translation stood, the rest of the sentence is the plain translation's, the original word is not
  left beside it, and a translation with terms is at most as many words longer than without as its terms have words;
- kept text (aiayn.markup.spans.carry): the first target word aligned to a kept span becomes its text, the others
  aligned to it are dropped, a span no word is aligned to goes beside its neighbour's translation.

Before that, the target words the vocabulary could not spell (SentencePiece's unknown mark, " ⁇ ") are dropped
where the source holds kept text: they are what a model without digits or emoji writes for them. A sentence with no
letters is returned as it is, untranslated.

    sentence_spans(sentence, glossary)    the replace and keep spans of one sentence
    carry_nbests(sentences, nbests, ...)  every hypothesis's text with its sentence's spans carried
    translate_lines(engine, lines, ...)   lines in, texts out, through any engine (or `translate(sentences)`)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from aiayn.markup.spans import Span, carry, has_letters, with_protected, words

if TYPE_CHECKING:
    from aiayn.decoding.glossary import Glossary  # imports torch: only where a glossary is given

UNKNOWN = "\u2047"  # what SentencePiece decodes an unknown piece to


def term_spans(sentence: str, glossary: Glossary | None) -> list[Span]:
    """The glossary's source terms in a sentence as replace spans (whole words, case as written; where two
    occurrences overlap, the longer, then the earlier, wins), in order."""
    if glossary is None:
        return []
    found = []
    for source, target in glossary.entries:
        pattern = re.compile(rf"(?<!\w){re.escape(source.strip())}(?!\w)")
        found += [(m.start(), m.end(), target.strip()) for m in pattern.finditer(sentence)]
    chosen: list[tuple[int, int, str]] = []
    for start, end, target in sorted(found, key=lambda f: (f[0] - f[1], f[0])):
        if all(end <= s or e <= start for s, e, _ in chosen):
            chosen.append((start, end, target))
    return [Span(s, e, "replace", key=sentence[s:e], text=t) for s, e, t in sorted(chosen)]


def sentence_spans(sentence: str, glossary: Glossary | None = None) -> list[Span]:
    """A sentence's glossary terms (replace) and the text that is not language (keep), in document order; kept
    pieces that touch are one ("$20": a sign and a number)."""
    out: list[Span] = []
    for span in with_protected(sentence, term_spans(sentence, glossary)):
        if out and span.kind == out[-1].kind == "keep" and span.start == out[-1].end:
            out[-1] = out[-1].at(out[-1].start, span.end)
        else:
            out.append(span)
    return out


def term_translations(engine, sentences: Sequence[str], glossary: Glossary | None) -> dict[str, str]:
    """Each source term found in the sentences, translated alone by the engine (an Engine, or a translate(sentences)
    callable): how the translation of a sentence spells it, so its term replaces that word."""
    found = sorted({s.key for line in sentences for s in term_spans(line, glossary)})
    if not found:
        return {}
    if callable(getattr(engine, "translate_nbest", None)):
        return {term: hs[0].text for term, hs in zip(found, engine.translate_nbest(found))}
    return {term: text for term, (text, _) in zip(found, engine(found))}


def drop_unknown(source: str, text: str, alignment: list[tuple[int, int]] | None
                 ) -> tuple[str, list[tuple[int, int]] | None]:
    """The translation without the words that are only the unknown mark (and punctuation), where the source has
    none: the links re-indexed onto the words left."""
    words = text.split()
    if UNKNOWN in source or not any(UNKNOWN in w for w in words):
        return text, alignment
    gone = {j for j, w in enumerate(words) if UNKNOWN in w and not any(c.isalnum() for c in w)}
    words = [w.replace(UNKNOWN, "") for w in words]  # a mark inside a word: the word without it
    new_of, kept = {}, []
    for j, w in enumerate(words):
        if j not in gone and w:
            new_of[j] = len(kept)
            kept.append(w)
    links = None if alignment is None else [(i, new_of[j]) for i, j in alignment if j in new_of]
    return " ".join(kept), links


def _key(word: str) -> str:
    """A word as compared with a term's own translation: lower case, without edge punctuation."""
    return re.sub(r"^\W+|\W+$", "", word.lower())


def _runs(js: list[int]) -> list[list[int]]:
    """Sorted target word numbers cut into runs of adjacent ones."""
    runs: list[list[int]] = []
    for j in js:
        if runs and j == runs[-1][-1] + 1:
            runs[-1].append(j)
        else:
            runs.append([j])
    return runs


def _heads(span: Span, covered: list[int], links: list[tuple[int, int]], tokens: list[str],
           lexicon: dict[str, str], used: set[int]) -> list[int]:
    """The target words a term replaces (none taken by another term): where its source term's own translation
    (`lexicon`) is in the translation, that word (the nearest to the aligned ones; the translation's longest word);
    else the longest run of adjacent words aligned to the term, at most as many words as the source term has, from
    its end (an article before a noun stays)."""
    aligned = sorted({j for i, j in links if i in covered} - used)
    solo = sorted({_key(w) for w in lexicon.get(span.key or "", "").split()} - {""}, key=len, reverse=True)
    for word in solo[:1]:
        found = [j for j, t in enumerate(tokens) if _key(t) == word and j not in used]
        if found:
            middle = aligned[0] if aligned else 0
            return [min(found, key=lambda j: (abs(j - middle), j))]
    if not aligned:
        return []
    run = max(_runs(aligned), key=len)
    return run[-max(1, len(covered)):]


def _beside(covered: list[int], links: list[tuple[int, int]], n: int) -> int:
    """Where a term no word is aligned to goes: after the translation of the nearest source word before it, else
    before that of the nearest after it (a target word number; n: the end)."""
    by_source: dict[int, list[int]] = {}
    for i, j in links:
        by_source.setdefault(i, []).append(j)
    for d in range(1, max(covered, default=0) + len(by_source) + 2):
        if by_source.get(covered[0] - d):
            return max(by_source[covered[0] - d]) + 1
        if by_source.get(covered[-1] + d):
            return min(by_source[covered[-1] + d])
    return n


def _twins(heads: list[int], covered: list[int], links: list[tuple[int, int]], tokens: list[str],
           used: set[int]) -> list[int]:
    """Other words aligned to a term that are the word it replaced again (a one-word head)."""
    if len(heads) != 1 or not _key(tokens[heads[0]]):
        return []
    return sorted({j for i, j in links if i in covered and j not in used and _key(tokens[j]) == _key(tokens[heads[0]])})


def _edges(word: str) -> tuple[str, str]:
    """A word's leading and trailing punctuation."""
    lead = re.match(r"^[^\w]*", word).group()
    return lead, re.search(r"[^\w]*$", word[len(lead):]).group()


def place_terms(source: str, spans: Sequence[Span], text: str, alignment: list[tuple[int, int]] | None,
                lexicon: dict[str, str] | None = None) -> tuple[str, list[tuple[int, int]] | None]:
    """The translation with each glossary term (replace span) in place of the words it replaces (`_heads`, with their
    edge punctuation; the others of those words dropped), or beside a neighbour's translation where none is aligned
    to it; a term the translation holds already (whole words, as written) leaves it as it is. The links come back
    re-indexed onto the new words (a term's words linked to its source words only)."""
    src, tokens = words(source), text.split()
    links = list(alignment) if alignment is not None else \
        [(min(len(src) - 1, j * len(src) // max(len(tokens), 1)), j) for j in range(len(tokens))]
    edits: dict[int, str | None] = {}  # target word -> its new text (None: dropped)
    inserts: dict[int, list[str]] = {}  # before target word b -> terms
    owner: dict[int, list[int]] = {}  # a replaced word -> its term's source words
    for span in spans:
        if span.kind != "replace" or re.search(rf"(?<!\w){re.escape(span.text)}(?!\w)", text):
            continue
        covered = [i for i, (a, b) in enumerate(src) if a < span.end and span.start < b]
        heads = _heads(span, covered, links, tokens, lexicon or {}, set(edits))
        if heads:
            lead, trail = _edges(tokens[heads[0]])[0], _edges(tokens[heads[-1]])[1]
            edits.update({heads[0]: lead + span.text + trail, **{j: None for j in heads[1:]}})
            owner[heads[0]] = covered
            for j in _twins(heads, covered, links, tokens, set(edits)):  # the model said it twice: both replaced
                edits[j] = _edges(tokens[j])[0] + span.text + _edges(tokens[j])[1]
                owner[j] = covered
        else:
            inserts.setdefault(_beside(covered, links, len(tokens)), []).append(span.text)
    if not edits and not inserts:
        return text, alignment
    out: list[str] = []
    new_of: dict[int, int] = {}
    for b in range(len(tokens) + 1):
        out += [w for term in inserts.get(b, []) for w in term.split()]
        if b < len(tokens) and edits.get(b, "") is not None:
            new_of[b] = len(out)
            out += edits.get(b, tokens[b]).split()
    moved = [(i, new_of[j]) for i, j in links if j in new_of and (j not in owner or i in owner[j])]
    return " ".join(out), (moved if alignment is not None else None)


def carry_text(source: str, spans: Sequence[Span], text: str, alignment: list[tuple[int, int]] | None,
               lexicon: dict[str, str] | None = None) -> str:
    """One translation with its sentence's spans carried (the module docstring); no spans: the text as it is.
    lexicon: each source term's own translation (term_translations), where known."""
    if not spans:
        return text
    if not text.strip():
        return text if has_letters(source) else source
    if any(s.kind == "keep" for s in spans):
        text, alignment = drop_unknown(source, text, alignment)
    text, alignment = place_terms(source, spans, text, alignment, lexicon)
    kept = [s for s in spans if s.kind != "replace"]
    return carry(source, kept, text, alignment)[0] if kept else text


def carry_nbests(sentences: Sequence[str], nbests: Sequence[Sequence], glossary: Glossary | None = None,
                 keep_alignments: bool = False, lexicon: dict[str, str] | None = None) -> list[list]:
    """Each hypothesis (a Translation, with its `alignment` where the engine gave one; None: the diagonal) with its
    sentence's spans carried into its text. Its alignment is dropped (keep_alignments: kept where the text is the
    model's own, unchanged). A sentence without letters: itself, untranslated."""
    out = []
    for sentence, hyps in zip(sentences, nbests):
        spans = sentence_spans(sentence, glossary) if sentence.strip() else []
        if sentence.strip() and not has_letters(sentence):
            out.append([h._replace(text=sentence.strip(), alignment=None) for h in hyps])
            continue
        line = []
        for h in hyps:
            text = carry_text(sentence, spans, h.text, getattr(h, "alignment", None), lexicon)
            kept = h.alignment if keep_alignments and text == h.text else None
            line.append(h._replace(text=text, alignment=kept))
        out.append(line)
    return out


def needs_alignment(sentences: Sequence[str], glossary: Glossary | None = None) -> list[bool]:
    """Per sentence, whether it has a span to carry into its translation (so the engine should be asked for its
    alignment: an engine's translate_nbest takes these flags as `alignments`). A sentence without letters is kept as
    it is, untranslated: it needs none."""
    return [bool(s.strip()) and has_letters(s) and bool(sentence_spans(s, glossary)) for s in sentences]


Translate = Callable[[list[str]], list[tuple[str, "list[tuple[int, int]] | None"]]]


def translate_lines(engine, lines: Sequence[str], glossary: Glossary | dict | Sequence | None = None,
                    aligned: bool = True) -> list[str]:
    """The best translation of each line (one sentence a line), spans carried. `engine`: an Engine (asked for
    alignments where a line has spans and `aligned`) or any callable translate(sentences) -> [(text, alignment)]."""
    if glossary is not None:
        from aiayn.decoding.glossary import Glossary

        glossary = Glossary.of(glossary)
    todo = [n for n, line in enumerate(lines) if line.strip() and has_letters(line)]
    sentences = [lines[n] for n in todo]
    if callable(getattr(engine, "translate_nbest", None)):
        ask = needs_alignment(sentences, glossary) if aligned else False
        found = [hs[0] for hs in engine.translate_nbest(sentences, alignments=ask)] if sentences else []
        pairs = [(h.text, h.alignment) for h in found]
    else:
        pairs = engine(sentences) if sentences else []
    lexicon = term_translations(engine, sentences, glossary)
    out = [line if line.strip() else "" for line in lines]  # blank: empty; without letters: as it is
    for n, sentence, (text, alignment) in zip(todo, sentences, pairs):
        out[n] = carry_text(sentence, sentence_spans(sentence, glossary), text, alignment, lexicon)
    return out
