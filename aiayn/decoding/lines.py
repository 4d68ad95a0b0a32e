"""Input lines to the sentences an engine translates, and translations back to output lines: what every engine
(aiayn's Translator, CTranslate2's) and the server share, without torch (so `aiayn translate --engine ct2` starts
without it).

    split_prefixes   `source<TAB>prefix` lines, or --prefix FILE -> sources and target prefixes
    split_lines      lines -> sentences (aiayn.decoding.sentences), each line's Layout; join_lines puts translations
    back encode_sources   text -> source ids + EOS, cut at max_input_len with a warning; None for a blank line
    encode_prefixes  target prefixes -> word ids (no EOS); a piece outside the vocabulary is an error
    Translation      one hypothesis: text, score, ids, token log-probs
    score_columns    the columns `--print-scores` appends to an output line (SCORE_KINDS)
    aligned_lines    which lines an engine's translate_nbest(alignments=...) aligns: every one, none, or a flag each

Rules for awkward input (docs/decoding.md):
    * an empty (or all-blank) line gives an empty line, without running the model;
    * a line longer than --max-input-len subword tokens (EOS included; default the model's max_positions)
      is cut to that length, with a warning naming the line on stderr; it is never an error.
    * a target prefix (`source<TAB>prefix`, or --prefix FILE) is encoded with the vocabulary, without EOS; a piece
      that encodes to UNK, or a prefix on a blank line, is an error naming the line.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NamedTuple

from aiayn.config import EOS_ID, UNK_ID
from aiayn.decoding.sentences import split_sentences
from aiayn.errors import UsageError


def warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def encode_sources(vocab, lines: Sequence[str], max_input_len: int) -> list[list[int] | None]:
    """Source ids (+ EOS) per line, cut to max_input_len tokens; None for a blank line."""
    out: list[list[int] | None] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            out.append(None)
            continue
        ids = vocab.encode(line) + [EOS_ID]
        if len(ids) > max_input_len:
            warn(f"input line {n} has {len(ids)} tokens, more than --max-input-len {max_input_len}; "
                  f"translating its first {max_input_len - 1} tokens only")
            ids = ids[: max_input_len - 1] + [EOS_ID]
        out.append(ids)
    return out


def split_prefixes(lines: Sequence[str], prefix_lines: Sequence[str] | None = None
                   ) -> tuple[list[str], list[str] | None]:
    """(sources, target prefixes or None) from input lines that may be `source<TAB>prefix`, or from `prefix_lines`
    (--prefix FILE: one per input line, aligned; an empty line: no prefix). Errors name the line."""
    split = [line.split("\t") for line in lines]
    for n, columns in enumerate(split, 1):
        if len(columns) > 2:
            raise UsageError(f"input line {n} has {len(columns)} tab-separated columns; give source<TAB>prefix")
    tabbed = any(len(columns) == 2 for columns in split)
    if prefix_lines is not None:
        if tabbed:
            raise UsageError("give target prefixes either as a second tab-separated input column or with --prefix, "
                             "not both")
        if len(prefix_lines) != len(lines):
            raise UsageError(f"--prefix has {len(prefix_lines)} lines but the input has {len(lines)}; give one prefix "
                             "per input line (an empty line: none)")
        return list(lines), list(prefix_lines)
    if not tabbed:
        return list(lines), None
    return [columns[0] for columns in split], [columns[1] if len(columns) == 2 else "" for columns in split]


def encode_prefixes(vocab, prefixes: Sequence[str]) -> list[list[int]]:
    """Word ids of each target prefix (no EOS; [] for an empty one); a piece outside the vocabulary (encoded to UNK)
    is an error naming the line and the piece."""
    out = []
    for n, text in enumerate(prefixes, 1):
        ids = vocab.target.encode(text) if text.strip() else []
        if UNK_ID in ids:
            pieces = vocab.sp.encode(text, out_type=str)
            unknown = next(p for p, i in zip(pieces, ids) if i == UNK_ID)
            raise UsageError(f"input line {n}: the prefix piece {unknown!r} is not in the vocabulary")
        out.append(ids)
    return out


class Layout(NamedTuple):
    """Where a line's sentences lie in the list of sentences translated: the first one's index, and the spaces that
    follow each sentence but the last (so a line of n sentences has n - 1 of them)."""

    first: int
    spaces: tuple[str, ...]


def split_lines(lines: Sequence[str], prefixes: Sequence[str] | None = None
                ) -> tuple[list[str], list[str] | None, list[Layout]]:
    """Lines cut into sentences (aiayn.decoding.sentences): (sentences, their prefixes or None, each line's Layout). A
    line of one sentence, a blank line and a line with a target prefix stay whole, as they are."""
    sentences: list[str] = []
    sentence_prefixes: list[str] = []
    layouts = []
    for n, line in enumerate(lines):
        prefix = prefixes[n] if prefixes is not None else ""
        parts = split_sentences(line.strip()) if not prefix else []
        if len(parts) < 2:
            parts = [line]
        layouts.append(Layout(len(sentences), tuple(p[len(p.rstrip()):] for p in parts[:-1])))
        sentences += [p.rstrip() if len(parts) > 1 else p for p in parts]
        sentence_prefixes += [prefix] + [""] * (len(parts) - 1)
    return sentences, (sentence_prefixes if prefixes is not None else None), layouts


def join_lines(nbests: Sequence[Sequence[Translation]], layouts: Sequence[Layout]) -> Sequence[Sequence[Translation]]:
    """The translations of split lines put back together: hypothesis i of a line joins hypothesis i of each of its
    sentences (a sentence's last where it has fewer) with the source's spaces between; its tokens and token scores
    are theirs one after the other, its score their scores' mean weighted by their lengths (|Y|, EOS included).
    Nothing split: `nbests` itself."""
    if all(not layout.spaces for layout in layouts):
        return nbests
    out = []
    for layout in layouts:
        parts = nbests[layout.first: layout.first + len(layout.spaces) + 1]
        if len(parts) == 1:
            out.append(list(parts[0]))
            continue
        line = []
        for i in range(max(map(len, parts))):
            hyps = [hs[min(i, len(hs) - 1)] for hs in parts]
            text = "".join(h.text + space for h, space in zip(hyps, layout.spaces + ("",)))
            lengths = [len(h.tokens) + 1 for h in hyps]
            score = sum(h.score * n for h, n in zip(hyps, lengths)) / sum(lengths)
            line.append(Translation(text, score, [t for h in hyps for t in h.tokens],
                                    [p for h in hyps for p in h.positional_scores]))
        out.append(line)
    return out


class Translation(NamedTuple):
    """One hypothesis for one input line: detokenized text, normalized score, subword ids (no BOS/EOS), the
    log-prob of each token, EOS last (where the engine gives them), and its word alignment where one was asked for:
    (source word i, target word j) pairs, one per target word, words = the whitespace-separated words of the source
    sentence and of `text` (aiayn.decoding.alignment; None: not asked)."""

    text: str
    score: float
    tokens: list[int]
    positional_scores: Sequence[float] = ()
    alignment: list[tuple[int, int]] | None = None


SCORE_KINDS = ("sentence", "tokens")  # translate --print-scores: what the tab-separated columns hold


def token_scores(hyp: Translation) -> str:
    """The log-prob of each token of a translation, EOS last, space-separated."""
    return " ".join(f"{p:.4f}" for p in hyp.positional_scores)


def score_columns(hyp: Translation, kind: str) -> str:
    """The columns translate --print-scores appends to an output line: TAB sentence score (the length-normalised one
    the search ranked by), and with kind "tokens" also TAB its token_scores."""
    return f"\t{hyp.score:.4f}" + (f"\t{token_scores(hyp)}" if kind == "tokens" else "")


def aligned_lines(alignments: bool | Sequence[bool], n: int) -> list[bool]:
    """Which of n lines translate_nbest's `alignments` asks word links for: True or False, every line; else one flag a
    line (a file where one line in a hundred holds a number aligns that line, not the hundred)."""
    if isinstance(alignments, bool):
        return [alignments] * n
    flags = [bool(a) for a in alignments]
    if len(flags) != n:
        raise UsageError(f"alignments: {len(flags)} flags for {n} lines; give one a line (or True / False)")
    return flags
