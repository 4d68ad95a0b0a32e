"""Placing one sentence's spans on its translation: target word intervals from the alignment, kept text substituted,
nesting repaired, and back to character offsets (aiayn.markup.spans.carry's insides).

Target positions are word intervals [lo, hi) over the translation's words (after kept text is substituted); a point
is the empty interval [p, p): before word p. A "wrap" covers the words aligned to its source words, from the first to
the last; its interval is then cut to lie inside its source parent's and to cross no other (the part holding more of
its aligned words wins). The intervals make a tree; points go into the deepest element that holds them (preferring
their source ancestors at an element's edge). The tree, read in order, gives the spans in document order.
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


def _keep_word(node: Node, source: str, src, tokens: list[str], links: dict[int, list[int]], aligned: bool) -> None:
    """A keep's or a replacement's word: its text, with the edge punctuation of the translation of the source word it
    shares with other text ("(2020)" keeps its brackets, "Keep Me." its full stop)."""
    text = node.span.text if node.span.kind == "replace" and node.span.text is not None else \
        source[node.span.start:node.span.end]
    lead = trail = ""
    if aligned and node.source_words:
        first, last = node.source_words[0], node.source_words[-1]
        before, after = source[src[first][0]:node.span.start], source[node.span.end:src[last][1]]
        if before:
            lead = next((m.group(1) for j in links.get(first, []) if (m := _EDGES.match(tokens[j])).group(1)), "")
            lead = lead or _source_edge(before)
        if after:
            trail = next((m.group(3) for j in links.get(last, []) if (m := _EDGES.match(tokens[j])).group(2)
                          and m.group(3)), "")
            trail = trail or _source_edge(after)
    node.text = lead + text + trail
    node.char = (len(lead), len(lead) + len(text))


def _source_edge(edge: str) -> str:
    """The source word's own edge punctuation, where no translation of the word kept any: the other words aligned
    to a kept span give way to it, so "(2020)." translated as "( unk ) ." or one invented word keeps its brackets."""
    return edge if edge and not any(c.isalnum() or c.isspace() for c in edge) else ""


def _inside_word(node: Node, source: str, src, tokens: list[str], aligned: list[int]):
    """For kept text inside a word (letters beside it in the same source word: "word<sup>1</sup>", "A&lt;b"): the
    aligned target word that gets it, the text's place in it, and the word's new text; None for other spans. The
    text is marked where the translation holds it, else put at the same end of the translated word (before its edge
    punctuation) as in the source."""
    text = source[node.span.start:node.span.end]
    words = [src[i] for i in node.source_words]
    if not text or not words or not aligned:
        return None
    letters_before = any(c.isalnum() for c in source[words[0][0]:node.span.start])
    letters_after = any(c.isalnum() for c in source[node.span.end:words[-1][1]])
    if not (letters_before or letters_after):
        return None
    for j in aligned:
        at = tokens[j].find(text)
        if at >= 0:
            return j, (at, at + len(text)), tokens[j]
    if letters_before:
        j = aligned[-1]
        lead, core, trail = _EDGES.match(tokens[j]).groups()
        at = len(lead) + len(core)
        return j, (at, at + len(text)), lead + core + text + trail
    j = aligned[0]
    lead, rest = _EDGES.match(tokens[j]).group(1), tokens[j][len(_EDGES.match(tokens[j]).group(1)):]
    return j, (len(lead), len(lead) + len(text)), lead + text + rest


def _substitute(source, src, tokens, links, nodes) -> tuple[list[tuple[str, Node | None]], dict[int, list[int]]]:
    """Kept and replaced text put in place of the words aligned to it: the final words (with the keep node owning
    each) and the alignment re-indexed onto them."""
    claimed: set[int] = set()
    head: dict[int, Node] = {}
    inserts: dict[int, list[Node]] = {}
    deleted: set[int] = set()
    for node in nodes:
        if node.kind not in ("keep", "replace"):
            continue
        aligned = sorted({j for i in node.source_words for j in links.get(i, [])} - claimed)
        inside = _inside_word(node, source, src, tokens, aligned)
        if inside is not None:  # part of a word: marked in (or added to) its translation
            j, node.char, node.text = inside
            head[j] = node
            claimed.add(j)
        elif aligned:
            _keep_word(node, source, src, tokens, links, True)
            head[aligned[0]] = node
            deleted.update(aligned[1:])
            claimed.update(aligned)
        else:
            _keep_word(node, source, src, tokens, links, False)
            inserts.setdefault(_point(node, src, links, len(tokens)), []).append(node)
    final: list[tuple[str, Node | None]] = []
    new_of: dict[int, int] = {}
    for b in range(len(tokens) + 1):
        for node in inserts.get(b, []):
            node.lo, node.hi = len(final), len(final) + 1
            final.append((node.text, node))
        if b < len(tokens) and b not in deleted:
            new_of[b] = len(final)
            owner = head.get(b)
            if owner is not None:
                owner.lo, owner.hi = len(final), len(final) + 1
            final.append((owner.text if owner is not None else tokens[b], owner))
    moved = {i: sorted({new_of[j] for j in js if j in new_of}) for i, js in links.items()}
    for node in nodes:
        if node.kind in ("keep", "replace"):
            for i in node.source_words:
                moved[i] = sorted({j for j in moved.get(i, []) if final[j][1] is not node} | {node.lo})
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


def _intervals(nodes: list[Node], src, links, n: int) -> None:
    """Each wrap's and point's target interval, inside its parent's, crossing none placed before it."""
    placed: list[Node] = []
    for node in nodes:
        if node.kind in ("keep", "replace"):
            continue
        node.aligned = {j for i in node.source_words for j in links.get(i, [])} if node.kind == "wrap" else set()
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
    if held and held[0].isalnum() and first[1] is None:
        lead = _EDGES.match(first[0])
        if lead.group(2):
            start += len(lead.group(1))
    if held and held[-1].isalnum() and last[1] is None:
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


def place(source: str, src: list[tuple[int, int]], tokens: list[str], links: dict[int, list[int]],
          nodes: list[Node]) -> tuple[str, list]:
    """The translation with kept text substituted, and the spans on it in document order (see the module)."""
    final, links = _substitute(source, src, tokens, links, nodes)
    _intervals(nodes, src, links, len(final))
    root = _tree(nodes, len(final))
    starts, pos = [], 0
    for word, _ in final:
        starts.append(pos)
        pos += len(word) + 1
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

    text = " ".join(word for word, _ in final)
    emit(root, 0, len(text))
    return text, out
