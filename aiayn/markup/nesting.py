"""Placing one sentence's spans on its translation: target word intervals from the alignment, kept text substituted,
nesting repaired, and back to character offsets (aiayn.markup.spans.carry's insides).

Target positions are word intervals [lo, hi) over the translation's words (after kept text is substituted); a point
is the empty interval [p, p): before word p. A "wrap" covers the words aligned to its source words, from the first
to the last (with none aligned: the likeliest target word of each, `_likeliest`); its interval is then cut to lie
inside its source parent's and to cross no other (the part holding more of its aligned words wins). The intervals
make a tree; points go into the deepest element that holds them (preferring their source ancestors at an element's
edge). The tree, read in order, gives the spans in document order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_EDGES = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)


@dataclass(eq=False)
class Node:
    """One span on its way through a sentence: where it was, where it goes."""

    index: int
    span: Any  # aiayn.markup.spans.Span
    source_words: list[int]
    parent: int | None = None
    lo: int = 0
    hi: int = 0
    aligned: set[int] = field(default_factory=set)
    children: list[Node] = field(default_factory=list)
    char: tuple[int, int] = (0, 0)  # a keep's text inside its word
    space_before: bool = False  # a point: the source has a space just before it (it goes after the target's space)
    text: str = ""  # a keep's word, edges included

    @property
    def kind(self) -> str:
        return self.span.kind

    @property
    def empty(self) -> bool:
        return self.lo == self.hi


def _neighbours(node: Node, src: list[tuple[int, int]]) -> tuple[int, int]:
    """The source words just before and just after a span (or a point)."""
    if node.source_words:
        return node.source_words[0] - 1, node.source_words[-1] + 1
    left = sum(1 for s, _ in src if s < node.span.start) - 1
    return left, left + 1


def _point(node: Node, src: list[tuple[int, int]], links: dict[int, list[int]], n: int) -> int:
    """Where a span with no aligned word goes: after the translation of the nearest aligned word on its left, or
    before that of the nearest on its right (the left first at equal distance)."""
    left, right = _neighbours(node, src)
    for d in range(len(src) + 1):
        if 0 <= left - d < len(src) and links.get(left - d):
            return max(links[left - d]) + 1
        if 0 <= right + d < len(src) and links.get(right + d):
            return min(links[right + d])
    return 0 if left < 0 else n


def _group_text(group: list[Node], source: str) -> tuple[str, list[tuple[int, int]]]:
    """Kept spans that share source words, as one text: each span's text (a replacement's `text`) with the source
    text between them ("base/big" for "base" and "big"), and each span's place in it."""
    out, places, pos = "", [], group[0].span.start
    for node in group:
        out += source[pos:node.span.start]
        text = node.span.text if node.span.kind == "replace" and node.span.text is not None else \
            source[node.span.start:node.span.end]
        places.append((len(out), len(out) + len(text)))
        out += text
        pos = max(pos, node.span.end)
    return out, places


def _edge(target_edge: str, own: str, lead: bool) -> str:
    """A target word's edge punctuation less the part that belongs to the kept text itself: "(--host" keeps "(" before
    "--host", "<unk>," keeps "," after "<unk>"."""
    for k in range(min(len(target_edge), len(own)), 0, -1):
        if lead and target_edge.endswith(own[:k]):
            return target_edge[:-k]
        if not lead and target_edge.startswith(own[-k:]):
            return target_edge[k:]
    return target_edge


def _edges(body: str, before: str, after: str, ends: tuple[str, str], tokens: list[str], links_of) -> tuple[str, str]:
    """The punctuation a kept text takes around it: that of the translation of the source word it shares with other
    text ("(2020)" keeps its brackets, "Keep Me." its full stop), else the source word's own (also where the word is
    its own translation). `ends`: the first and last source words; `links_of`: their target words."""
    lead = trail = ""
    own = _EDGES.match(body)
    if before:
        lead = before if ends[0] in (tokens[j] for j in links_of[0]) else next(
            (e for j in links_of[0] if (m := _EDGES.match(tokens[j])).group(2)
             and (e := _edge(m.group(1), own.group(1), True))), "")
        lead = lead or _source_edge(before)
    if after:
        trail = after if ends[1] in (tokens[j] for j in links_of[1]) else next(
            (e for j in links_of[1] if (m := _EDGES.match(tokens[j])).group(2)
             and (e := _edge(m.group(3), own.group(3), False))), "")
        trail = trail or _source_edge(after)
    return lead, trail


def _source_edge(edge: str) -> str:
    """The source word's own edge punctuation, where no translation of the word kept any: the other words aligned
    to a kept span give way to it, so "(2020)." translated as "( unk ) ." or one invented word keeps its brackets."""
    return edge if edge and not any(c.isalnum() or c.isspace() for c in edge) else ""


def _found(body: str, cur: list[str], aligned: list[int], deleted: set[int],
           offset: int) -> tuple[int, int, int] | None:
    """Where the translation holds a kept text as it is, in one aligned word or a run of consecutive ones: (first
    word, last word, character offset in the words joined by spaces); of several places, the one nearest `offset`
    (the text's place in its source word: the second "," of ",a,")."""
    wanted = " ".join(body.split())
    for a in aligned if wanted else []:
        b, joined = a, cur[a]
        while wanted not in joined and b + 1 in aligned and b + 1 not in deleted and len(joined) < 4 * len(wanted):
            b += 1
            joined += " " + cur[b]
        places = [m.start() for m in re.finditer(f"(?={re.escape(wanted)})", joined)]
        if places:
            return a, b, min(places, key=lambda at: abs(at - offset))
    return None


def _keep_groups(nodes: list[Node]) -> list[list[Node]]:
    """Kept and replaced spans in document order, those that share a source word ("base/big", "2+2") together."""
    groups: list[list[Node]] = []
    for node in nodes:
        if node.kind not in ("keep", "replace"):
            continue
        if groups and node.source_words and groups[-1][-1].source_words and \
                node.source_words[0] <= max(n.source_words[-1] for n in groups[-1] if n.source_words):
            groups[-1].append(node)
        else:
            groups.append([node])
    return groups


class _Words:
    """The translation's words while kept text is put in: each word's text, the kept spans marked in it, the words
    deleted and the ones inserted before a word."""

    def __init__(self, tokens: list[str]):
        self.cur = list(tokens)
        self.marks: dict[int, list[tuple[Node, int]]] = {}
        self.deleted: set[int] = set()
        self.inserts: dict[int, list[tuple[str, list[tuple[Node, int]]]]] = {}

    def mark(self, j: int, text: str, group: list[Node], places, offset: int) -> None:
        self.cur[j] = text
        self.marks.setdefault(j, []).extend((node, offset + a) for node, (a, _) in zip(group, places))
        for node, (a, b) in zip(group, places):
            node.char = (offset + a, offset + b)


def _put_group(group: list[Node], source: str, src, links, words: _Words, claimed: set[int], n: int) -> None:
    """One group of kept spans put into the translation: in place of the words aligned to it, or marked where the
    translation holds its text inside a word ("word<sup>1</sup>", "aiayn translate's"), or inserted at a neighbour's
    place when nothing is aligned to it."""
    body, places = _group_text(group, source)
    ws = sorted({i for node in group for i in node.source_words})
    aligned = sorted({j for i in ws for j in links.get(i, [])} - claimed - words.deleted)
    first, last = (ws[0], ws[-1]) if ws else (0, 0)
    before = source[src[first][0]:group[0].span.start] if ws else ""
    after = source[max(node.span.end for node in group):src[last][1]] if ws else ""
    if not aligned:
        words.inserts.setdefault(_point(group[0], src, links, n), []).append((body, list(zip(group, places))))
        for node, (a, b) in zip(group, places):
            node.char = (a, b)
        return
    letters_before, letters_after = any(c.isalnum() for c in before), any(c.isalnum() for c in after)
    if not (letters_before or letters_after):  # whole words (edge punctuation aside): the kept text replaces them
        ends = (source[src[first][0]:src[first][1]], source[src[last][0]:src[last][1]])
        lead, trail = _edges(body, before, after, ends, words.cur, (links.get(first, []), links.get(last, [])))
        words.mark(aligned[0], lead + body + trail, group, places, len(lead))
        words.deleted.update(aligned[1:])
        claimed.update(aligned)
        return
    found = _found(body, words.cur, aligned, words.deleted, len(before))
    if found is not None:  # the translation holds the text as it is: marked there (the words holding it joined)
        a, b, at = found
        joined = " ".join(words.cur[a:b + 1])
        wanted = " ".join(body.split())
        words.mark(a, joined[:at] + body + joined[at + len(wanted):], group, places, at)
        words.deleted.update(range(a + 1, b + 1))
        claimed.update(range(a, b + 1))
        return
    inner = [j for i in ws if (i != first or not letters_before) and (i != last or not letters_after)
             for j in links.get(i, []) if j in aligned]
    if inner:  # the words wholly kept give way to the text; the translation of the rest of its words stays
        words.mark(inner[0], body, group, places, 0)
        words.deleted.update(inner[1:])
        claimed.update(inner)
        return
    if letters_before:  # added at the same end of the translated word as in the source, inside its punctuation
        j = aligned[-1]
        lead, core, trail = _EDGES.match(words.cur[j]).groups()
        words.mark(j, lead + core + body + trail, group, places, len(lead) + len(core))
    else:
        j = aligned[0]
        lead = _EDGES.match(words.cur[j]).group(1)
        words.mark(j, lead + body + words.cur[j][len(lead):], group, places, len(lead))
    claimed.add(j)


def _substitute(source, src, tokens, links, nodes) -> tuple[list[tuple[str, list[Node]]], dict[int, list[int]]]:
    """Kept and replaced text put in place of the words aligned to it: the final words (with the keep nodes marked
    in each) and the alignment re-indexed onto them."""
    words, claimed = _Words(tokens), set()
    for group in _keep_groups(nodes):
        _put_group(group, source, src, links, words, claimed, len(tokens))
    final: list[tuple[str, list[Node]]] = []
    new_of: dict[int, int] = {}

    def add(text: str, marks) -> None:
        for node, _ in marks:
            node.lo, node.hi = len(final), len(final) + 1
        final.append((text, [node for node, _ in marks]))

    for b in range(len(tokens) + 1):
        for text, marks in words.inserts.get(b, []):
            add(text, marks)
        if b < len(tokens) and b not in words.deleted:
            new_of[b] = len(final)
            add(words.cur[b], words.marks.get(b, []))
    moved = {i: sorted({new_of[j] for j in js if j in new_of}) for i, js in links.items()}
    for node in nodes:
        if node.kind in ("keep", "replace"):
            for i in node.source_words:
                moved[i] = sorted({j for j in moved.get(i, []) if node not in final[j][1]} | {node.lo})
    return final, {i: js for i, js in moved.items() if js}


def _clip(node: Node, lo: int, hi: int) -> None:
    """Cut a node's interval to [lo, hi); an interval left empty becomes a point inside it."""
    node.lo, node.hi = max(node.lo, lo), min(node.hi, hi)
    if node.lo >= node.hi:
        node.lo = node.hi = min(max(node.lo, lo), hi)


def _ancestors(node: Node, nodes: list[Node]) -> set[int]:
    out, k = set(), node.parent
    while k is not None:
        out.add(k)
        k = nodes[k].parent
    return out


def _uncross(node: Node, placed: list[Node], ancestors: set[int]) -> None:
    """Cut a wrap's interval until it crosses no placed one: keep the part (inside or outside the other) that holds
    more of its aligned words."""
    changed = True
    while changed and not node.empty:
        changed = False
        for other in placed:
            if other.index in ancestors or other.empty:
                continue
            if node.lo < other.lo < node.hi < other.hi or other.lo < node.lo < other.hi < node.hi:
                inside = (max(node.lo, other.lo), min(node.hi, other.hi))
                outside = (node.lo, other.lo) if node.lo < other.lo else (other.hi, node.hi)
                count = [sum(1 for j in node.aligned if a <= j < b) for a, b in (inside, outside)]
                node.lo, node.hi = inside if count[0] > count[1] else outside
                changed = True


def _likeliest(i: int, n_source: int, links: dict[int, list[int]], n: int) -> int:
    """The target word most likely to translate source word i, which no target word is linked to: one between the
    targets of its nearest linked neighbours where the translation has words there (placed in proportion), else the
    target of the nearer neighbour (the left one at equal distance), else the diagonal's."""
    left = next((k for k in range(i - 1, -1, -1) if links.get(k)), None)
    right = next((k for k in range(i + 1, n_source) if links.get(k)), None)
    if left is not None and right is not None:
        a, b = max(links[left]), min(links[right])
        if b - a > 1:
            return min(b - 1, max(a + 1, a + round((i - left) * (b - a) / (right - left))))
        return a if i - left <= right - i else b
    if left is not None:
        return max(links[left])
    if right is not None:
        return min(links[right])
    return min(n - 1, i * n // max(n_source, 1))


def _intervals(nodes: list[Node], src, links, n: int) -> None:
    """Each wrap's and point's target interval, inside its parent's, crossing none placed before it."""
    placed: list[Node] = []
    for node in nodes:
        if node.kind in ("keep", "replace"):
            continue
        node.aligned = {j for i in node.source_words for j in links.get(i, [])} if node.kind == "wrap" else set()
        if node.kind == "wrap" and not node.aligned and n:  # words the alignment left out: their likeliest place
            node.aligned = {_likeliest(i, len(src), links, n) for i in node.source_words}
        if node.aligned:
            node.lo, node.hi = min(node.aligned), max(node.aligned) + 1
        else:
            node.lo = node.hi = _point(node, src, links, n)
        if node.parent is not None:
            parent = nodes[node.parent]
            _clip(node, parent.lo, parent.hi)
        _uncross(node, placed, _ancestors(node, nodes))
        placed.append(node)


def _tree(nodes: list[Node], n: int) -> Node:
    """The nodes as a tree: intervals nested by containment, points dropped into the deepest element holding them."""
    root = Node(index=-1, span=None, source_words=[], lo=0, hi=n)
    stack = [root]
    filled = sorted((x for x in nodes if not x.empty), key=lambda x: (x.lo, -x.hi, x.kind != "wrap", x.index))
    for node in filled:
        while not (stack[-1].lo <= node.lo and node.hi <= stack[-1].hi):
            stack.pop()
        stack[-1].children.append(node)
        if node.kind == "wrap":
            stack.append(node)
    for node in (x for x in nodes if x.empty):
        at, ancestors, p = root, _ancestors(node, nodes), node.lo
        while True:
            inner = next((c for c in at.children if c.kind == "wrap" and (c.lo < p < c.hi or (
                c.index in ancestors and c.lo <= p and (p < c.hi or (c.empty and node.kind != "wrap"))))), None)
            if inner is None:
                break
            at = inner
        place = next((k for k, c in enumerate(at.children) if c.lo > p or (c.lo == p and not c.empty)),
                     len(at.children))
        at.children.insert(place, node)
    return root


def _trimmed(node: Node, source: str, final, starts: list[int]) -> tuple[int, int]:
    """A wrap's character range: its words, less edge punctuation its source text did not hold."""
    start, end = starts[node.lo], starts[node.hi - 1] + len(final[node.hi - 1][0])
    held = source[node.span.start:node.span.end].strip()
    first, last = final[node.lo], final[node.hi - 1]
    if held and held[0].isalnum() and not first[1]:
        lead = _EDGES.match(first[0])
        if lead.group(2):
            start += len(lead.group(1))
    if held and held[-1].isalnum() and not last[1]:
        trail = _EDGES.match(last[0])
        if trail.group(2):
            end -= len(trail.group(3))
    return start, max(start, end)


def _stripped(text: str, start: int, end: int) -> tuple[int, int]:
    """A range without the whitespace at its ends."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


_NO_BREAK = frozenset("\u00a0\u202f\u2007\u2060")


def _separators(source: str, src: list[tuple[int, int]], links: dict[int, list[int]], n: int) -> list[str]:
    """What follows each target word: a space, or the source's no-break space where the two words translate two
    source words that one joined ("10\u00a0km"); nothing after the last."""
    seps = [" "] * max(n - 1, 0) + [""] * (n > 0)
    of: dict[int, set[int]] = {}
    for i, js in links.items():
        for j in js:
            of.setdefault(j, set()).add(i)
    for j in range(n - 1):
        for i in of.get(j, ()):
            gap = source[src[i][1]:src[i + 1][0]] if i + 1 < len(src) else ""
            if gap and set(gap) <= _NO_BREAK and i + 1 in of.get(j + 1, ()):
                seps[j] = gap
    return seps


def place(source: str, src: list[tuple[int, int]], tokens: list[str], links: dict[int, list[int]],
          nodes: list[Node]) -> tuple[str, list]:
    """The translation with kept text substituted, and the spans on it in document order (see the module)."""
    final, links = _substitute(source, src, tokens, links, nodes)
    _intervals(nodes, src, links, len(final))
    root = _tree(nodes, len(final))
    seps = _separators(source, src, links, len(final))
    starts, pos = [], 0
    for (word, _), sep in zip(final, seps):
        starts.append(pos)
        pos += len(word) + len(sep)
    out: list = []
    # a wrap around exactly a kept text (a footnote mark "word<sup>1</sup>"): around that text, not its whole word
    kept = {(n.span.start, n.span.end): n for n in nodes if n.kind in ("keep", "replace")}

    def emit(node: Node, lo: int, hi: int) -> None:
        for child in node.children:
            if child.kind in ("keep", "replace"):
                s = starts[child.lo]
                span = (s + child.char[0], s + child.char[1])
            elif child.empty:
                p = child.lo
                if node.index >= 0 and not node.empty and p == node.lo:
                    s = lo
                elif child.space_before and 0 < p < len(final):
                    s = starts[p]
                else:
                    s = starts[p - 1] + len(final[p - 1][0]) if p > 0 else 0
                span = (s, s)
            else:
                span = _trimmed(child, source, final, starts)
                inner = kept.get(_stripped(source, child.span.start, child.span.end))
                if inner is not None and child.lo <= inner.lo < child.hi:
                    span = (starts[inner.lo] + inner.char[0], starts[inner.lo] + inner.char[1])
            s, e = min(max(span[0], lo), hi), max(min(span[1], hi), lo)
            if child.empty and child.kind != "keep":
                s = e = min(max(span[0], lo), hi)
            out.append(child.span.at(s, max(s, e)))
            emit(child, s, max(s, e))

    text = "".join(word + sep for word, sep in zip((w for w, _ in final), seps))
    emit(root, 0, len(text))
    return text, out
