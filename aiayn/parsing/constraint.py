"""The search constraint that makes every parse a well-formed tree with exactly one leaf per input word.

An aiayn.decoding.search.Constraint: for each decoder row, from its prefix, the tokens allowed next:
    "(X"   while words remain (a constituent must cover a word), the root is not yet closed and fewer than
           max_opens "(" tokens stand in a row (the first token is "(X"). The PTB sample's trees have at most 6 in a
           row; a model whose copy of the next word is not aligned yet would put the word off with "(NP (NP (NP ...".
    "XX"   inside a constituent, while words remain
    ")X"   only for the innermost open constituent, labelled X, once it covers a word (the root: once all do)
    EOS    once the root is closed and every word placed
everything else (subword pieces, PAD, BOS, UNK) never. In the "words" format (aiayn.parsing.trees.LEAVES) the leaf is
the next word's subword pieces instead of XX: its first piece is allowed where XX would be, and once a word is begun
only its next piece is. It runs inside the beam search as a mask over the vocabulary (the search itself is
unchanged); the state of a prefix is derived from its parent's, memoised per call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.config import EOS_ID
from aiayn.parsing.trees import POS


@dataclass(frozen=True)
class _State:
    stack: tuple[tuple[str, bool], ...]  # open constituents (label, covers a word yet), innermost last
    placed: int  # words placed
    closed: bool  # the root has been closed
    dead: bool = False  # the prefix broke the rules (only a -inf candidate the search kept to fill its beam can)
    inword: int = 0  # words format: pieces of the current word emitted so far (0 = between words)
    opens: int = 0  # "(" tokens in a row at the end of the prefix


class TreeConstraint:
    """structure: token id -> structure token ("(NP", ")NP", "XX"); words[line] = words of input line `line`.
    pieces (the words format): pieces[line][i] = the subword ids of word i of that line, which are its leaf."""

    def __init__(self, structure: Mapping[int, str], vocab_size: int, words: Sequence[int], max_depth: int = 64,
                 pieces: Sequence[Sequence[Sequence[int]]] | None = None, max_opens: int = 8):
        self.words, self.max_depth, self.vocab_size, self.max_opens = list(words), max_depth, vocab_size, max_opens
        self.pieces = [[tuple(w) for w in line] for line in pieces] if pieces is not None else None
        if self.pieces is not None and [len(x) for x in self.pieces] != self.words:
            raise ValueError("pieces must hold one entry per word of every line")
        self.tok = dict(structure)
        self.opens = {i: t[1:] for i, t in self.tok.items() if t.startswith("(")}
        self.closes = {t[1:]: i for i, t in self.tok.items() if t.startswith(")")}
        self.pos = next(i for i, t in self.tok.items() if t == POS)
        self.open_ids = torch.tensor(sorted(self.opens), dtype=torch.long)
        self._memo: dict[tuple[int, tuple[int, ...]], _State] = {}

    def _state(self, line: int, prefix: tuple[int, ...]) -> _State:
        key = (line, prefix)
        if key in self._memo:
            return self._memo[key]
        if len(prefix) <= 1:  # BOS only
            state = _State((), 0, False)
        else:
            state = self._next(line, self._state(line, prefix[:-1]), prefix[-1])
        if len(self._memo) > 500_000:
            self._memo.clear()
        self._memo[key] = state
        return state

    def _next(self, line: int, s: _State, token: int) -> _State:
        """The state after `token`."""
        last = self.tok.get(token)
        if s.dead:
            return s
        if self.pieces is not None and last is None:  # a word piece
            if s.inword:
                word = self.pieces[line][s.placed]
                if token != word[s.inword]:
                    return _State((), s.placed, True, dead=True)
                done = s.inword + 1 == len(word)
                return _State(s.stack, s.placed + done, s.closed, inword=0 if done else s.inword + 1)
            if not s.stack or s.placed >= self.words[line] or token != self.pieces[line][s.placed][0]:
                return _State((), s.placed, True, dead=True)
            stack = s.stack[:-1] + ((s.stack[-1][0], True),)
            done = len(self.pieces[line][s.placed]) == 1
            return _State(stack, s.placed + done, s.closed, inword=0 if done else 1)
        if s.inword or last is None or (last == POS and (not s.stack or self.pieces is not None)) \
                or (last[0] == ")" and not s.stack):
            return _State((), s.placed, True, dead=True)
        if last == POS:
            return _State(s.stack[:-1] + ((s.stack[-1][0], True),), s.placed + 1, s.closed)
        if last.startswith("("):
            stack = s.stack
            if stack:
                stack = stack[:-1] + ((stack[-1][0], True),)  # the parent now has a child
            return _State(stack + ((last[1:], False),), s.placed, False, opens=s.opens + 1)
        return _State(s.stack[:-1], s.placed, not s.stack[:-1])

    def __call__(self, sent: Tensor, prefix: Tensor) -> Tensor:
        allowed = torch.zeros(prefix.size(0), self.vocab_size, dtype=torch.bool)
        for row, (line, toks) in enumerate(zip(sent.tolist(), prefix.tolist())):
            s = self._state(line, tuple(toks))
            remaining = self.words[line] - s.placed
            if s.dead:
                allowed[row, EOS_ID] = True  # its score is -inf already: let it end
                continue
            if s.inword:  # inside a word: only its next piece
                allowed[row, self.pieces[line][s.placed][s.inword]] = True
                continue
            if s.closed:
                if remaining == 0:
                    allowed[row, EOS_ID] = True
                continue
            if remaining > 0 and len(s.stack) < self.max_depth and s.opens < self.max_opens:
                allowed[row, self.open_ids] = True
            if s.stack and remaining > 0:
                allowed[row, self.pos if self.pieces is None else self.pieces[line][s.placed][0]] = True
            if s.stack and s.stack[-1][1] and s.stack[-1][0] in self.closes and (len(s.stack) > 1 or remaining == 0):
                allowed[row, self.closes[s.stack[-1][0]]] = True
        return allowed.to(prefix.device)
