"""Penn Treebank trees: reading, the standard normalization, and the linearization a seq2seq parser predicts.

    read_trees(path)            bracketed trees, one per line or spread over lines (.mrg files)
    normalize(tree)             as EVALB's COLLINS.prm sees a tree: no -NONE- elements (nor the constituents they
                                leave empty), no function tags or indices (NP-SBJ-1 -> NP), no outer empty bracket
    linearize(tree)             depth-first, words dropped, every POS tag one placeholder XX, labelled closing
                                brackets (Vinyals et al. 2015): (S (NP XX )NP (VP XX )VP XX )S
    delinearize(tokens, words)  the inverse, with the words (and, if given, the POS tags) put back
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiayn.errors import DataError

POS = "XX"  # the one placeholder token of every pre-terminal (POS tag + word) in the linearization
# The two target formats. "xx": leaves are the placeholder XX (Vinyals et al. 2015, the paper's setup): the decoder
# has to count words to know where it is. "words": leaves are the words themselves, copied from the source through
# the shared vocabulary: each structure decision sits next to the word it concerns, and cross-attention gets a lexical
# signal from the first step (docs/parsing.md: the "xx" format's models ignored the source on 3,500 trees).
LEAVES = ("xx", "words")
EMPTY = "-NONE-"


@dataclass
class Tree:
    """A constituent (label + children), or a pre-terminal (label = POS tag, word set, no children)."""

    label: str
    children: list[Tree] = field(default_factory=list)
    word: str | None = None

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    def leaves(self) -> list[Tree]:
        if self.is_preterminal:
            return [self]
        return [leaf for c in self.children for leaf in c.leaves()]

    def words(self) -> list[str]:
        return [leaf.word for leaf in self.leaves()]

    def tags(self) -> list[str]:
        return [leaf.label for leaf in self.leaves()]

    def __str__(self) -> str:
        if self.is_preterminal:
            return f"({self.label} {self.word})"
        return f"({self.label} {' '.join(str(c) for c in self.children)})"


_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_tree(text: str) -> Tree:
    """One bracketed tree, e.g. "(S (NP (DT the) (NN cat)) (VP (VBD sat)))"; "( (S ...))" keeps its empty label."""
    tokens = _TOKEN.findall(text)
    if not tokens or tokens[0] != "(":
        raise DataError(f"not a bracketed tree: {text[:60]!r}")
    tree, end = _parse(tokens, 0, text)
    if end != len(tokens):
        raise DataError(f"text after the end of the tree: {text[:60]!r}")
    return tree


def _parse(tokens: list[str], i: int, text: str) -> tuple[Tree, int]:
    i += 1  # "("
    label = ""
    if i < len(tokens) and tokens[i] not in "()":
        label, i = tokens[i], i + 1
    if i + 1 < len(tokens) and tokens[i] not in "()" and tokens[i + 1] == ")":  # (TAG word)
        return Tree(label, word=tokens[i]), i + 2
    node = Tree(label)
    while i < len(tokens) and tokens[i] == "(":
        child, i = _parse(tokens, i, text)
        node.children.append(child)
    if i >= len(tokens) or tokens[i] != ")":
        raise DataError(f"unbalanced or malformed brackets in {text[:60]!r}")
    return node, i + 1


def iter_tree_strings(lines: Iterator[str], source: str = "input") -> Iterator[str]:
    """Whole trees from lines: one per line, or spread over several lines (.mrg), split by bracket balance."""
    buf, depth = [], 0
    for n, line in enumerate(lines, 1):
        if not line.strip() and depth == 0:
            continue
        buf.append(line.strip())
        depth += line.count("(") - line.count(")")
        if depth < 0:
            raise DataError(f"{source}, line {n}: more closing than opening brackets")
        if depth == 0:
            yield " ".join(buf)
            buf = []
    if buf:
        raise DataError(f"{source}: the last tree is not closed")


def read_trees(path: str | Path) -> list[Tree]:
    """Every tree of a file (one per line, or .mrg style), as written."""
    with open(path, encoding="utf-8") as f:
        return [parse_tree(t) for t in iter_tree_strings(f, str(path))]


def strip_label(label: str) -> str:
    """NP-SBJ-1 -> NP, PP-LOC=2 -> PP; labels that start with '-' (-NONE-, -LRB-) are kept whole."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


def normalize(tree: Tree) -> Tree:
    """The tree as scored: -NONE- pre-terminals and the constituents they leave empty removed, function tags and
    indices stripped from constituent labels, an outer empty-label (or TOP) bracket with one child removed."""
    while not tree.is_preterminal and tree.label in ("", "TOP") and len(tree.children) == 1:
        tree = tree.children[0]
    out = _normalize(tree)
    if out is None:
        raise DataError(f"the tree has no words left after removing empty elements: {tree}")
    return out


def _normalize(node: Tree) -> Tree | None:
    if node.is_preterminal:
        return None if node.label == EMPTY else Tree(node.label, word=node.word)
    kids = [k for k in (_normalize(c) for c in node.children) if k is not None]
    return Tree(strip_label(node.label), kids) if kids else None


def linearize(tree: Tree, words: bool = False) -> list[str]:
    """Depth-first: "(LABEL" opens a constituent, ")LABEL" closes it, each pre-terminal is XX (Vinyals et al.), or
    its word (words=True: the leaves format, see LEAVES)."""
    if tree.is_preterminal:
        return [tree.word if words else POS]
    return [f"({tree.label}", *(t for c in tree.children for t in linearize(c, words)), f"){tree.label}"]


def delinearize(tokens: Sequence[str], words: Sequence[str], tags: Sequence[str] | None = None) -> Tree:
    """The tree of a linearization, with words[i] (and tags[i], default XX) in the i-th XX. Raises DataError for a
    sequence that is not one well-formed tree with exactly one XX per word (the search constraint prevents it)."""
    stack: list[Tree] = []
    root = None
    n = 0
    for tok in tokens:
        if tok == POS:
            if not stack or n >= len(words):
                raise DataError("a word placeholder outside every constituent, or more than there are words")
            stack[-1].children.append(Tree(tags[n] if tags else POS, word=words[n]))
            n += 1
        elif tok.startswith("("):
            node = Tree(tok[1:])
            if stack:
                stack[-1].children.append(node)
            elif root is not None:
                raise DataError("more than one tree")
            else:
                root = node
            stack.append(node)
        elif tok.startswith(")"):
            if not stack or stack[-1].label != tok[1:]:
                raise DataError(f"closing bracket {tok} does not match the open constituent")
            stack.pop()
        else:
            raise DataError(f"not a structure token: {tok!r}")
    if root is None or stack or n != len(words):
        raise DataError("unclosed constituents, or not one placeholder per word")
    return root
