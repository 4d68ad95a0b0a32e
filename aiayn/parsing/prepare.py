"""Treebank -> a prepared-data folder the normal trainer uses unchanged (`aiayn prepare-parse`).

Source = the words of each normalized tree (space-separated, as in the treebank); target = its linearization written
without spaces ("(S(NPXXXX)NP...)S"), or with --leaves words the words in place of XX, each after a space except the
first ("(S(NPThe cat)NP(VP sat)VP .)S"), so that the target's word pieces are exactly the source's. Every structure
token is a user-defined piece of the shared SentencePiece vocabulary (matched longest first, no word-boundary piece
before a sentence), so the target side is exactly one id per structure token. A "words" vocabulary also holds the
piece WORDS_MARK, never emitted: it tells a trained model's format (aiayn.parsing.parse).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from aiayn.data.prepare import prepare
from aiayn.data.vocab import MODEL_FILE, Vocab
from aiayn.errors import DataError
from aiayn.parsing.trees import LEAVES, POS, linearize, normalize, read_trees

WORDS_MARK = "<leaves=words>"


def structure_tokens(labels: set[str], leaves: str = "xx") -> list[str]:
    """The target vocabulary of a label set: "(X" and ")X" for each, and the placeholder (and the format's mark)."""
    return [POS] + ([WORDS_MARK] if leaves == "words" else []) + sorted(f"{b}{x}" for x in labels for b in "()")


def target_text(tree, leaves: str = "xx") -> str:
    """The line that encodes to the tree's target ids."""
    if leaves == "xx":
        return "".join(linearize(tree))
    out: list[str] = []
    words = 0

    def walk(node) -> None:
        nonlocal words
        if node.is_preterminal:
            out.append(node.word if words == 0 else " " + node.word)
            words += 1
            return
        out.append(f"({node.label}")
        for c in node.children:
            walk(c)
        out.append(f"){node.label}")

    walk(tree)
    return "".join(out)


def _labels(tree) -> set[str]:
    return set() if tree.is_preterminal else {tree.label} | {x for c in tree.children for x in _labels(c)}


def prepare_parse(train: str | Path, out: str | Path, valid: str | Path | None = None,
                  test: str | Path | None = None, vocab_size: int = 8000, leaves: str = "xx") -> dict[str, Any]:
    """Normalize (COLLINS.prm), linearize and write {split}.words and {split}.tree (in a temporary folder), train the
    shared vocabulary (words + structure tokens), then `aiayn.data.prepare` into `out`. leaves: "xx" or "words"
    (aiayn.parsing.trees.LEAVES)."""
    if leaves not in LEAVES:
        raise DataError(f"leaves must be one of {', '.join(LEAVES)}; got {leaves!r}")
    with tempfile.TemporaryDirectory() as tmp:
        return _prepare(train, Path(out), valid, test, vocab_size, Path(tmp), leaves)


def _prepare(train, out: Path, valid, test, vocab_size: int, raw: Path, leaves: str) -> dict[str, Any]:
    splits = {"train": train, "valid": valid, "test": test}
    files, labels, words_text = {}, set(), []
    for split, path in splits.items():
        if path is None:
            continue
        trees = [normalize(t) for t in read_trees(path)]
        if not trees:
            raise DataError(f"{path} holds no trees")
        src, tgt = raw / f"{split}.words", raw / f"{split}.tree"
        src.write_text("".join(" ".join(t.words()) + "\n" for t in trees), encoding="utf-8")
        tgt.write_text("".join(target_text(t, leaves) + "\n" for t in trees), encoding="utf-8")
        files[split] = (src, tgt)
        for t in trees:
            labels |= _labels(t)
        if split == "train":
            words_text = [" ".join(t.words()) for t in trees]
    bad = [x for x in labels if x == POS or any(c in x for c in "() ")]
    if bad:
        raise DataError(f"constituent labels {bad} clash with the structure tokens; rename them in the treebank")
    vocab_dir = raw / "vocab"
    vocab_dir.mkdir()
    symbols = structure_tokens(labels, leaves)
    vocab = Vocab.train(iter(words_text), vocab_dir, vocab_size, symbols=symbols)
    if leaves == "words":
        _check_copyable(vocab, set(symbols), files)
    # One target "word" per sentence: the length and ratio filters of translation data do not apply.
    return prepare(*files["train"], out, vocab=vocab_dir / MODEL_FILE, valid=files.get("valid"),
                   test=files.get("test"), max_len=10**9, max_ratio=10**9)


def _check_copyable(vocab: Vocab, symbols: set[str], files: dict) -> None:
    """In the words format the target's word pieces must be exactly the source's (the decoder copies them)."""
    for split, (src, tgt) in files.items():
        srcs = src.read_text(encoding="utf-8").splitlines()
        tgts = tgt.read_text(encoding="utf-8").splitlines()
        for n, (s_ids, t_ids) in enumerate(zip(vocab.encode_batch(srcs), vocab.encode_batch(tgts)), 1):
            if [i for i in t_ids if vocab.piece(i) not in symbols] != s_ids:
                raise DataError(f"{split} tree {n}: its words do not encode alike alone and inside the tree "
                                f"({srcs[n - 1][:80]!r}); a word holds a structure token? use --leaves xx")
