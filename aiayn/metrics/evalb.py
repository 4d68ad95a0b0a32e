"""Labelled bracket scores of parse trees, computed as EVALB does with COLLINS.prm (Sekine & Collins 1997; the
reference program is ../shared/tools/evalb, and tests/test_evalb.py checks the totals are identical).

Per sentence, as evalb.c reads a line: a pre-terminal whose tag is a DELETE_LABEL (-NONE-, punctuation) is
dropped with its word; every other constituent is a bracket (label, first word, end) over the remaining words;
brackets that span nothing, or whose label cut at the first '-' or '=' is a DELETE_LABEL (TOP), do not count.
Gold and test brackets match as a multiset on (start, end, label), with EQ_LABEL pairs (ADVP = PRT) equal.
Sentences whose words differ are errors, test lines without words are skipped; both are left out of the totals.
Not reproduced: evalb's re-insertion of quote pre-terminals tagged differently in gold and test (fix_quote), which
only matters when the test tags punctuation differently; aiayn's parser outputs take the gold tags
(`aiayn evaluate --task parse`), so it never does.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


@dataclass(frozen=True)
class EvalbParams:
    delete_labels: frozenset[str] = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
    delete_labels_for_length: frozenset[str] = frozenset({"-NONE-"})
    eq_labels: tuple[tuple[str, str], ...] = (("ADVP", "PRT"),)
    eq_words: tuple[tuple[str, str], ...] = ()
    cutoff_len: int = 40
    labeled: bool = True

    @classmethod
    def from_prm(cls, text: str) -> EvalbParams:
        """A parameter file in evalb's format (COLLINS.prm, sample.prm, ...)."""
        dl, dll, eql, eqw, cut, lab = set(), set(), [], [], 40, True
        for line in text.splitlines():
            parts = line.split()
            if not parts or line.startswith("#"):
                continue
            key, vals = parts[0], parts[1:]
            if key == "DELETE_LABEL":
                dl.add(vals[0])
            elif key == "DELETE_LABEL_FOR_LENGTH":
                dll.add(vals[0])
            elif key == "EQ_LABEL":
                eql.append((vals[0], vals[1]))
            elif key == "EQ_WORD":
                eqw.append((vals[0], vals[1]))
            elif key == "CUTOFF_LEN":
                cut = int(vals[0])
            elif key == "LABELED":
                lab = vals[0] != "0"
        return cls(frozenset(dl), frozenset(dll), tuple(eql), tuple(eqw), cut, lab)


COLLINS = EvalbParams()


@dataclass
class _Sentence:
    words: list[str]
    tags: list[str]
    brackets: list[tuple[int, int, str]]  # (start, end, label as read)
    length: int  # words for the length cutoff (DELETE_LABEL_FOR_LENGTH excluded)


def _read(line: str, p: EvalbParams) -> _Sentence:
    tokens = _TOKEN.findall(line)
    words, tags, brackets, stack, length = [], [], [], [], 0
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "(":
            label = ""
            if i + 1 < len(tokens) and tokens[i + 1] not in ("(", ")"):
                label, i = tokens[i + 1], i + 1
            if i + 2 < len(tokens) and tokens[i + 1] not in ("(", ")") and tokens[i + 2] == ")":
                word = tokens[i + 1]
                if label not in p.delete_labels_for_length:
                    length += 1
                if label not in p.delete_labels:
                    words.append(word)
                    tags.append(label)
                i += 3
                continue
            stack.append((len(words), label))
            i += 1
        elif tok == ")":
            if not stack:
                raise ValueError(f"unbalanced brackets: {line[:60]!r}")
            start, label = stack.pop()
            brackets.append((start, len(words), label))
            i += 1
        else:
            raise ValueError(f"a word outside a pre-terminal: {line[:60]!r}")
    if stack:
        raise ValueError(f"unbalanced brackets: {line[:60]!r}")
    return _Sentence(words, tags, brackets, length)


def _canonical(label: str, p: EvalbParams) -> str:
    for a, b in p.eq_labels:
        if label == b:
            return a
    return label


def _counted(s: _Sentence, p: EvalbParams) -> list[tuple[int, int, str]]:
    out = []
    for start, end, label in s.brackets:
        label = re.split(r"[-=]", label, maxsplit=1)[0]
        if start == end or any(label == d or (label, d) in p.eq_labels or (d, label) in p.eq_labels
                               for d in p.delete_labels):
            continue
        out.append((start, end, _canonical(label, p) if p.labeled else ""))
    return out


def _same_word(a: str, b: str, p: EvalbParams) -> bool:
    return a == b or (a, b) in p.eq_words or (b, a) in p.eq_words


def _crosses(g: tuple[int, int, str], t: tuple[int, int, str]) -> bool:
    return (g[0] < t[0] < g[1] < t[1]) or (t[0] < g[0] < t[1] < g[1])


@dataclass
class _Totals:
    sent: int = 0
    error: int = 0
    skip: int = 0
    gold: int = 0
    test: int = 0
    match: int = 0
    complete: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less: int = 0
    words: int = 0
    tags: int = 0

    @property
    def valid(self) -> int:
        return self.sent - self.error - self.skip

    @property
    def recall(self) -> float:
        return 100.0 * self.match / self.gold if self.gold else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.match / self.test if self.test else 0.0

    @property
    def f1(self) -> float:
        r, p = self.recall, self.precision
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass
class EvalbResult:
    all: _Totals = field(default_factory=_Totals)
    short: _Totals = field(default_factory=_Totals)  # sentences of at most cutoff_len words
    cutoff_len: int = 40
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The "=== Summary ===" block of evalb's output."""
        lines = ["=== Summary ==="]
        for name, t in (("All", self.all), (f"len<={self.cutoff_len}", self.short)):
            v = t.valid
            lines += ["", f"-- {name} --",
                      f"Number of sentence        = {t.sent:6d}",
                      f"Number of Error sentence  = {t.error:6d}",
                      f"Number of Skip  sentence  = {t.skip:6d}",
                      f"Number of Valid sentence  = {v:6d}",
                      f"Bracketing Recall         = {t.recall:6.2f}",
                      f"Bracketing Precision      = {t.precision:6.2f}",
                      f"Bracketing FMeasure       = {t.f1:6.2f}",
                      f"Complete match            = {100.0 * t.complete / v if v else 0.0:6.2f}",
                      f"Average crossing          = {t.crossing / v if v else 0.0:6.2f}",
                      f"No crossing               = {100.0 * t.no_crossing / v if v else 0.0:6.2f}",
                      f"2 or less crossing        = {100.0 * t.two_or_less / v if v else 0.0:6.2f}",
                      f"Tagging accuracy          = {100.0 * t.tags / t.words if t.words else 0.0:6.2f}"]
        return "\n".join(lines) + "\n"


def evalb(gold: Sequence[str], test: Sequence[str], params: EvalbParams = COLLINS) -> EvalbResult:
    """Score test trees against gold trees (bracketed strings, line-aligned) as evalb does."""
    if len(gold) != len(test):
        raise ValueError(f"{len(gold)} gold trees but {len(test)} test trees; they must be line-aligned")
    res = EvalbResult(cutoff_len=params.cutoff_len)
    for n, (g_line, t_line) in enumerate(zip(gold, test), 1):
        g, t = _read(g_line, params), _read(t_line, params)
        status, stats = 0, None
        if not t.words:
            status = 2
        elif len(g.words) != len(t.words) or not all(_same_word(a, b, params) for a, b in zip(g.words, t.words)):
            status = 1
            res.errors.append(f"sentence {n}: words or length differ ({len(g.words)} | {len(t.words)})")
        else:
            gb, tb = _counted(g, params), _counted(t, params)
            match = sum((Counter(gb) & Counter(tb)).values())
            crossing = sum(1 for x in tb if any(_crosses(y, x) for y in gb))
            tags = sum(1 for a, b in zip(g.tags, t.tags)
                       if a == b or (a, b) in params.eq_labels or (b, a) in params.eq_labels)
            stats = (len(gb), len(tb), match, crossing, len(g.words), tags)
        for tot in (res.all, res.short) if g.length <= params.cutoff_len else (res.all,):
            tot.sent += 1
            if status == 1:
                tot.error += 1
            elif status == 2:
                tot.skip += 1
            else:
                gn, tn, match, crossing, words, tags = stats
                tot.gold, tot.test, tot.match = tot.gold + gn, tot.test + tn, tot.match + match
                tot.complete += gn == tn == match
                tot.crossing += crossing
                tot.no_crossing += crossing == 0
                tot.two_or_less += crossing <= 2
                tot.words += words
                tot.tags += tags
    return res


def with_gold_tags(hyp: str, gold: str) -> str:
    """The hypothesis tree with the gold tree's POS tags on its words (a parser that predicts placeholder tags, as
    aiayn's, is scored on brackets only: evalb deletes punctuation by tag, so the tags must be the gold ones).
    Returned unchanged when the words differ (evalb then counts an error sentence)."""
    g_tags = [(m.group(1), m.group(2)) for m in _PRETERMINAL.finditer(gold) if m.group(1) != "-NONE-"]
    h = list(_PRETERMINAL.finditer(hyp))
    if [w for _, w in g_tags] != [m.group(2) for m in h]:
        return hyp
    out, last = [], 0
    for m, (tag, word) in zip(h, g_tags):
        out += [hyp[last:m.start()], f"({tag} {word})"]
        last = m.end()
    return "".join(out) + hyp[last:]


_PRETERMINAL = re.compile(r"\(([^\s()]+) ([^\s()]+)\)")


def score_parses(hyps: Sequence[str], refs: Sequence[str]) -> EvalbResult:
    """A parser's trees scored as `aiayn evaluate --task parse` does: COLLINS.prm, PTB's outer empty bracket as TOP
    (which COLLINS.prm deletes), the gold POS tags put on the hypothesis' words (`with_gold_tags`)."""
    hyps, refs = ([re.sub(r"^\s*\(\s*\(", "(TOP (", line) for line in lines] for lines in (hyps, refs))
    return evalb(refs, [with_gold_tags(h, r) for h, r in zip(hyps, refs)], COLLINS)


def parse_report(result: EvalbResult) -> str:
    """What `aiayn evaluate --task parse` prints: the F1 line, then evalb's summary."""
    return (f"parse F1        {result.all.f1:6.2f}  (labelled brackets, EVALB COLLINS.prm; POS tags taken from "
            f"--ref)\n{result.summary()}")
