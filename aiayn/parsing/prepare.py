"""Treebank -> a prepared-data folder the normal trainer uses unchanged (`aiayn prepare-parse`).

Source = the words of each normalized tree (space-separated, as in the treebank); target = its linearization written
without spaces ("(S(NPXXXX)NP...)S"). Every structure token is a user-defined piece of the shared SentencePiece
vocabulary (matched longest first, no word-boundary piece before a sentence), so the target side is exactly one id
per structure token.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from aiayn.data.prepare import prepare
from aiayn.data.vocab import Vocab
from aiayn.errors import DataError
from aiayn.parsing.trees import POS, linearize, normalize, read_trees


def structure_tokens(labels: set[str]) -> list[str]:
    """The target vocabulary of a label set: "(X" and ")X" for each, and the placeholder."""
    return [POS] + sorted(f"{b}{x}" for x in labels for b in "()")


def _labels(tree) -> set[str]:
    return set() if tree.is_preterminal else {tree.label} | {x for c in tree.children for x in _labels(c)}


def prepare_parse(train: str | Path, out: str | Path, valid: str | Path | None = None,
                  test: str | Path | None = None, vocab_size: int = 8000) -> dict[str, Any]:
    """Normalize (COLLINS.prm), linearize and write {split}.words and {split}.tree (in a temporary folder), train the
    shared vocabulary (words + structure tokens), then `aiayn.data.prepare` into `out`."""
    with tempfile.TemporaryDirectory() as tmp:
        return _prepare(train, Path(out), valid, test, vocab_size, Path(tmp))


def _prepare(train, out: Path, valid, test, vocab_size: int, raw: Path) -> dict[str, Any]:
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
        tgt.write_text("".join("".join(linearize(t)) + "\n" for t in trees), encoding="utf-8")
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
    Vocab.train(iter(words_text), vocab_dir, vocab_size, symbols=structure_tokens(labels))
    # One target "word" per sentence: the length and ratio filters of translation data do not apply.
    return prepare(*files["train"], out, vocab=vocab_dir / "vocab.model", valid=files.get("valid"),
                   test=files.get("test"), max_len=10**9, max_ratio=10**9)
