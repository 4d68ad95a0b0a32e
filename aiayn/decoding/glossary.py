"""Glossaries: terms whose translation must appear in the output, by lexically constrained beam search.

A glossary is a list of (source term, target term) pairs (`Glossary`, read from a TSV file). In a sentence, each
source term that occurs as whole words, with the case as written, becomes a constraint: the target term's
SentencePiece pieces must appear, in order and contiguous, somewhere in the translation.

The search is the beam search of aiayn.decoding.search with `DynamicBeamAllocation` plugged into its step (Post & Vilar
2018, "Fast Lexically Constrained Decoding with Dynamic Beam Allocation"; Sockeye's and fairseq's constrained search):

    * a hypothesis's progress is how many constraint pieces it has produced: the pieces of the constraints it has
      met, plus the longest partial match of an unmet one at its end (a bank per progress value, 0..C pieces);
    * each step's candidates are the beam step's own (top_candidates: the best 2k of the sentence) plus, for every
      live hypothesis, its best token and every token that advances an unmet constraint;
    * the k live slots are shared out among the banks (k // (C+1) each, the rest to the top bank; a bank with too
      few candidates gives its slots to the others, the most advanced first), each bank taking its best candidates;
    * EOS is banned until every constraint is met; and once the words left before the length limit are only as
      many as the pieces still needed, only tokens that keep every constraint reachable are allowed. So a
      hypothesis finishes only with all its constraints met, and the search always finds one (at the limit);
    * the plain search comes first: where its hypotheses already hold every term they are the answer, and only the
      other sentences are searched again with constraints; their plain hypotheses that hold every term compete with
      the constrained ones (a small beam shared out among banks can lose a translation the plain beam finds);
    * the constrained search of a sentence is bounded: its translation has at most the plain best's pieces plus its
      terms' pieces, so a term is put into a translation of the plain one's length, never met by letting the
      hypothesis run on until it fits (unbounded, "king -> monarca" gave eight sentences on the quickstart model).

`aiayn translate` places terms by alignment instead (aiayn.markup.lines: measured better, BLEU and
length, in docs/decoding.md); this search is what a caller of `Translator.translate_nbest(glossary=...)` and
`search_ids(terms=...)` gets.

Constraints whose pieces add up to more than the sentence's word limit cannot fit: a UsageError naming the line.
A sentence without constraints gets exactly the plain beam search's hypotheses; so does one whose plain hypotheses
hold its terms. (With the allocation alone, with_plain=False, a sentence without constraints takes the plain step's
candidates in a batch that may hold constrained ones.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from aiayn.config import EOS_ID, PAD_ID, UNK_ID
from aiayn.decoding.search import NEG_INF, SearchConfig, beam_search, max_output_lengths
from aiayn.errors import UsageError, UserError
from aiayn.fast import row_topk

Term = tuple[int, ...]  # a target term's piece ids


@dataclass(frozen=True)
class Glossary:
    """(source term, target term) pairs; `terms_in(sentence)` gives the target terms a sentence asks for."""

    entries: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        for source, target in self.entries:
            if not source.strip() or not target.strip():
                raise UsageError(f"a glossary entry needs a source and a target term, got {source!r} -> {target!r}")
        conflict = conflicting(self.entries)
        if conflict:
            source, first, second = conflict
            raise UsageError(f"the glossary gives the source term {source!r} two target terms, {first!r} and "
                             f"{second!r}; keep one")
        object.__setattr__(self, "_patterns", [(re.compile(rf"(?<!\w){re.escape(s.strip())}(?!\w)"), t.strip())
                                               for s, t in self.entries])

    @classmethod
    def of(cls, pairs: Glossary | dict[str, str] | Iterable[tuple[str, str]]) -> Glossary:
        """A Glossary from itself, a {source: target} dict or (source, target) pairs."""
        if isinstance(pairs, Glossary):
            return pairs
        return cls(tuple(pairs.items() if isinstance(pairs, dict) else (tuple(p) for p in pairs)))

    @classmethod
    def read(cls, path: str | Path) -> Glossary:
        """A TSV file: `source term<TAB>target term` a line; blank lines and lines starting with # are skipped. A
        line of another shape is a UserError naming the file and the line."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read the glossary {path}: {e}") from None
        entries, where = [], {}
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            columns = line.split("\t")
            if len(columns) != 2 or not columns[0].strip() or not columns[1].strip():
                raise UserError(f"{path}, line {n}: expected 'source term<TAB>target term', got {line!r}")
            source, target = columns[0].strip(), columns[1].strip()
            first = where.setdefault(source, (n, target))
            if first[1] != target:
                raise UserError(f"{path}, line {n}: the source term {source!r} has a target term already, {first[1]!r} "
                                f"on line {first[0]}, and here {target!r}; keep one")
            entries.append((source, target))
        return cls(tuple(entries))

    def terms_in(self, sentence: str) -> list[str]:
        """The target terms of the source terms that occur in `sentence` as whole words (case as written), each
        once, in glossary order."""
        found = [target for pattern, target in self._patterns if pattern.search(sentence)]
        return list(dict.fromkeys(found))


def conflicting(entries: Iterable[tuple[str, str]]) -> tuple[str, str, str] | None:
    """The first source term given two different target terms, as (source, first target, second target), or None
    (the same pair twice is no conflict)."""
    seen: dict[str, str] = {}
    for source, target in entries:
        first = seen.setdefault(source.strip(), target.strip())
        if first != target.strip():
            return source.strip(), first, target.strip()
    return None


def encode_terms(vocab, glossary: Glossary, lines: Sequence[str]) -> list[list[Term]]:
    """Per line, the piece ids of the target terms it asks for (as they read inside a sentence). A target term with
    a piece outside the vocabulary (encoded to UNK) is a UsageError naming it."""
    cache: dict[str, Term] = {}
    out = []
    for line in lines:
        terms = []
        for target in glossary.terms_in(line):
            if target not in cache:
                ids = tuple(vocab.encode(target))
                if UNK_ID in ids:
                    raise UsageError(f"the glossary's target term {target!r} has a piece outside the vocabulary")
                cache[target] = ids
            terms.append(cache[target])
        out.append(terms)
    return out


def check_fits(terms: Sequence[Sequence[Term]], limit: Sequence[int], lines: Sequence[int]) -> None:
    """A UsageError naming the first line whose terms need more pieces than its translation may have words."""
    for words, most, line in zip(terms, limit, lines):
        need = sum(map(len, words))
        if need > most:
            raise UsageError(f"input line {line + 1}: its glossary terms need {need} pieces, more than the {most} "
                             "words its translation may have (--max-len-a, --max-len-b)")


# ---------------------------------------------------------------------------------------------------------
# One hypothesis's constraints: pure functions of its met terms and the end of its words.


def holds(words: Sequence[int], term: Sequence[int]) -> bool:
    """Whether `words` hold `term`, contiguous."""
    n = len(term)
    return any(tuple(words[i: i + n]) == tuple(term) for i in range(len(words) - n + 1))


def _ends_with(words: Sequence[int], part: Sequence[int]) -> bool:
    return len(part) <= len(words) and tuple(words[len(words) - len(part):]) == tuple(part)


def advance(terms: Sequence[Term], met: frozenset[int], tail: Sequence[int], token: int) -> tuple[frozenset[int], int]:
    """After `token` follows words ending in `tail`: the terms met (by index) and the pieces still needed (those of
    the unmet terms, less the longest partial match of one at the end)."""
    words = (*tail, token)
    met = met | {i for i, term in enumerate(terms) if i not in met and _ends_with(words, term)}
    return met, needed(terms, met, words)


def needed(terms: Sequence[Term], met: frozenset[int], words: Sequence[int]) -> int:
    """Pieces still to produce: the unmet terms' pieces, less the longest of their prefixes that `words` ends with."""
    unmet = [terms[i] for i in range(len(terms)) if i not in met]
    partial = max((j for term in unmet for j in range(1, len(term)) if _ends_with(words, term[:j])), default=0)
    return sum(map(len, unmet)) - partial


def advancing_tokens(terms: Sequence[Term], met: frozenset[int], tail: Sequence[int]) -> set[int]:
    """The tokens that start or extend a (partial) match of an unmet term after words ending in `tail`."""
    return {term[j] for i, term in enumerate(terms) if i not in met
            for j in range(len(term)) if _ends_with(tail, term[:j])}


def bank_sizes(k: int, counts: Sequence[int]) -> list[int]:
    """How many of k slots each bank gets (bank b: b constraint pieces produced; counts: its candidates): k // banks
    each, the rest to the top bank; slots a bank cannot fill go to the others, the most advanced first."""
    sizes = [k // len(counts)] * len(counts)
    sizes[-1] += k - sum(sizes)
    spare = sum(max(0, s - c) for s, c in zip(sizes, counts))
    sizes = [min(s, c) for s, c in zip(sizes, counts)]
    for b in reversed(range(len(counts))):
        more = min(spare, counts[b] - sizes[b])
        sizes[b] += more
        spare -= more
    return sizes


# ---------------------------------------------------------------------------------------------------------
# The beam search's hook.


class DynamicBeamAllocation:
    """aiayn.decoding.search.beam_search's `lexical` hook: per sentence its terms; per live hypothesis (sentence, beam
    slot) the terms it has met. `restrict` bans what would break a constraint, `alive` chooses the live beam by
    banks."""

    def __init__(self, terms: Sequence[Sequence[Term]], limit: Tensor):
        self.terms = [list(dict.fromkeys(tuple(t) for t in ts)) for ts in terms]
        self.total = [sum(map(len, ts)) for ts in self.terms]
        self.limit = limit.tolist()
        self.longest = max((len(t) for ts in self.terms for t in ts), default=1)
        self.pieces = [{x for t in ts for x in t} for ts in self.terms]  # a token outside them advances nothing
        self.met: list[list[frozenset[int]]] = [[frozenset()] for _ in self.terms]  # [sentence][slot]
        self.rows: dict[int, tuple[int, frozenset[int], tuple[int, ...]]] = {}  # this step: row -> sentence, met, tail

    def restrict(self, allowed: Tensor | None, sent: Tensor, kk: int, tokens: Tensor, t: int, V: int
                 ) -> Tensor | None:
        """The (N, V) mask of what each row may take next, given the search's own (None: everything): EOS banned
        while a term is unmet; where the words left are no more than the pieces needed, only tokens after which
        every term still fits (this wins over the search's own bans)."""
        sentences = sent.tolist()
        constrained = [r for r in range(tokens.size(0)) if self.terms[sentences[r // kk]]]
        self.rows = {}
        if not constrained:
            return allowed
        tails = tokens[constrained, max(1, tokens.size(1) - self.longest + 1):].tolist()
        edits = []  # (row, None: ban EOS | set of tokens: only these)
        for r, tail in zip(constrained, tails):
            s = sentences[r // kk]
            terms, met = self.terms[s], self.met[s][r % kk]
            self.rows[r] = (s, met, tuple(tail))
            if len(met) == len(terms):
                continue
            left = self.limit[s] - t - 1  # words that may follow this step's
            if sum(len(terms[i]) for i in range(len(terms)) if i not in met) <= left:
                edits.append((r, None))
            else:
                edits.append((r, {x for x in advancing_tokens(terms, met, tail) if advance(terms, met, tail, x)[1]
                                  <= left}))
        return _apply(allowed, edits, tokens, V)

    def alive(self, lprobs: Tensor, scores: Tensor, cands: tuple[Tensor, Tensor, Tensor], alive: tuple[Tensor, ...],
              sent: Tensor, kk: int, k: int) -> tuple[Tensor, Tensor, Tensor]:
        """The live beam (scores, tokens, rows, each (bsz, k)): `alive` (alive_candidates') for sentences without
        terms, else chosen from the beam step's candidates `cands` (scores, tokens, rows of top_candidates) and
        each row's extra ones by bank, best score first."""
        alive_scores, alive_tokens, alive_rows = (a.clone() for a in alive)
        sentences = sent.tolist()
        extra = self._extra_candidates(lprobs, scores)
        cand = [c.tolist() for c in cands]
        batch, chosen = [], []
        for b, s in enumerate(sentences):
            if not self.terms[s]:
                continue
            pool = {(r, x): v for v, x, r in zip(cand[0][b], cand[1][b], cand[2][b]) if x != EOS_ID and v > NEG_INF}
            for r in range(b * kk, (b + 1) * kk):
                pool.update(extra.get(r, {}))
            batch.append(b)
            chosen.append(self._allocate(s, pool, k, b * kk))
            self.met[s] = [met for _, _, _, met in chosen[-1]]
        if batch:
            alive_scores[batch] = torch.tensor([[c[0] for c in cs] for cs in chosen], dtype=alive_scores.dtype)
            alive_tokens[batch] = torch.tensor([[c[1] for c in cs] for cs in chosen])
            alive_rows[batch] = torch.tensor([[c[2] for c in cs] for cs in chosen])
        return alive_scores, alive_tokens, alive_rows

    def _extra_candidates(self, lprobs: Tensor, scores: Tensor) -> dict[int, dict[tuple[int, int], float]]:
        """Per constrained row: its best non-EOS token and every token advancing a term, with running scores."""
        pairs = []
        best = row_topk(lprobs, 2)[1].tolist() if self.rows else []  # every row's: cheaper than copying some
        for r, (s, met, tail) in self.rows.items():
            top = best[r]
            tokens = advancing_tokens(self.terms[s], met, tail) | {top[0] if top[0] != EOS_ID else top[1]}
            pairs += [(r, x) for x in tokens]
        if not pairs:
            return {}
        rows, toks = torch.tensor(pairs).T
        values = (scores[rows] + lprobs[rows, toks]).tolist()
        out: dict[int, dict[tuple[int, int], float]] = {}
        for (r, x), v in zip(pairs, values):
            if v > NEG_INF and x != EOS_ID:
                out.setdefault(r, {})[r, x] = v
        return out

    def _allocate(self, s: int, pool: dict[tuple[int, int], float], k: int, first_row: int) -> list[tuple]:
        """k of the candidates `pool` ((row, token) -> score) of sentence s, by bank: (score, token, row, met)."""
        ranked, terms, pieces = [], self.terms[s], self.pieces[s]
        for (r, x), v in sorted(pool.items(), key=lambda item: -item[1]):
            _, met, tail = self.rows[r]
            if x in pieces:
                met, need = advance(terms, met, tail, x)
                ranked.append((self.total[s] - need, (v, x, r, met)))
            else:  # no term met, no partial match left: the met terms' pieces
                ranked.append((sum(len(terms[i]) for i in met), (v, x, r, met)))
        counts = [0] * (self.total[s] + 1)
        for bank, _ in ranked:
            counts[bank] += 1
        sizes = bank_sizes(k, counts)
        chosen = []
        for bank, candidate in ranked:
            if sizes[bank]:
                chosen.append(candidate)
                sizes[bank] -= 1
        chosen.sort(key=lambda c: -c[0])
        while len(chosen) < k:  # too few candidates: dead slots
            v, x, r, met = chosen[-1] if chosen else (NEG_INF, EOS_ID, first_row, frozenset())
            chosen.append((NEG_INF, x, r, met))
        return chosen


def _apply(allowed: Tensor | None, edits: list[tuple[int, set[int] | None]], like: Tensor, V: int) -> Tensor | None:
    """`allowed` (None: everything) with EOS banned on some rows (edit None) and others cut to a set of tokens."""
    if not edits:
        return allowed
    mask = like.new_ones(like.size(0), V, dtype=torch.bool) if allowed is None else allowed.clone()
    for r, only in edits:
        if only is None:
            mask[r, EOS_ID] = False
        else:
            mask[r] = False
            mask[r, list(only)] = True
    return mask


@torch.no_grad()
def constrained_beam_search(model, src: Tensor, search: SearchConfig, max_len: int | None = None,
                            constraint=None, prefixes: Sequence[Sequence[int]] | None = None,
                            lines: Tensor | None = None, terms: Sequence[Sequence[Term]] = (),
                            with_plain: bool = True):
    """beam_search (arguments as its own) with each sentence's target terms as constraints (`terms[i]`: piece-id
    tuples of sentence i; none: the plain search). with_plain: the plain search first; its hypotheses are the answer
    where they all hold every term, and the other sentences with terms are searched with dynamic beam allocation, its
    hypotheses competing with the plain ones that hold every term (False: dynamic beam allocation alone, on every
    sentence with terms). A sentence whose terms cannot fit its word limit is a UsageError naming its line; sampling
    and target prefixes are refused."""
    if search.sampling:
        raise UsageError("a glossary needs beam (or greedy) search, not sampling")
    if prefixes and any(prefixes):
        raise UsageError("a glossary and target prefixes do not work together")
    lines = torch.arange(src.size(0)) if lines is None else lines
    limit = max_output_lengths(src, search.max_len_a, search.max_len_b, search.min_len, max_len)
    check_fits(terms, limit.tolist(), lines.tolist())
    if not any(terms):
        return beam_search(model, src, search, max_len, constraint, prefixes, lines)
    if not with_plain:
        return beam_search(model, src, search, max_len, constraint, prefixes, lines,
                           lexical=DynamicBeamAllocation(terms, limit))
    hyps = beam_search(model, src, search, max_len, constraint, prefixes, lines)
    rows = [i for i, (words, hs) in enumerate(zip(terms, hyps)) if words and not _all_hold(hs, words)]
    if not rows:
        return hyps
    found = {}
    for bound, group in _bounds(hyps, terms, limit, rows).items():  # each sentence no longer than its bound
        index = torch.tensor(group, device=src.device)
        within = None if constraint is None else (lambda sent, prefix, index=index: constraint(index[sent], prefix))
        part = src.index_select(0, index)
        part = part[:, : int(part.ne(PAD_ID).sum(1).max())]  # their own padding
        cap = bound if max_len is None else min(bound, max_len)
        found.update(zip(group, beam_search(model, part, search, cap, within, None, lines[group],
                                            lexical=DynamicBeamAllocation([terms[i] for i in group],
                                                                          limit[group].clamp(max=bound)))))
    for i, hs in ((i, found[i]) for i in rows):
        rivals = [h for h in hyps[i] if _all_hold([h], terms[i])]
        best = {}
        for h in sorted(hs + rivals, key=lambda h: -h.score):
            best.setdefault(tuple(h.tokens), h)
        hyps[i] = list(best.values())[: search.nbest]
    return hyps


def _bounds(hyps: Sequence, terms: Sequence[Sequence[Term]], limit: Tensor, rows: list[int]) -> dict[int, list[int]]:
    """The sentences to search with constraints grouped by their word bound: the plain best translation's pieces
    plus its terms' pieces (never over its own limit, never under the terms' pieces), so that a term is put into a
    translation of the plain one's length and not met by letting it go on until the term fits."""
    groups: dict[int, list[int]] = {}
    for i in rows:
        need = sum(map(len, terms[i]))
        plain = len(hyps[i][0].tokens) if hyps[i] else 0
        groups.setdefault(max(need, min(int(limit[i]), plain + need)), []).append(i)
    return groups


def _all_hold(hyps: Sequence, terms: Sequence[Term]) -> bool:
    """Whether there are hypotheses and each holds every term."""
    return bool(hyps) and all(holds(h.tokens, term) for h in hyps for term in terms)
