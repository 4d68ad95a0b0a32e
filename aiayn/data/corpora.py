"""Corpora: the shipped English-Spanish Bible, and WMT14 from HuggingFace for users who are online."""

from __future__ import annotations

import lzma
from pathlib import Path
from typing import Any

from aiayn.data.folder import SPLITS
from aiayn.errors import DataError
from aiayn.extras import require

BUILTIN = Path(__file__).parent / "corpus" / "bible-en-es.tsv.xz"  # verse id TAB English TAB Spanish
# Held-out whole books (neighbouring verses leak). John is the gospel with the fewest parallels in the
# other gospels, which stay in training; Acts is prose of the same kind.
BUILTIN_HELD_OUT = {"Acts": "valid", "John": "test"}


def builtin_corpus(dest_dir: str | Path) -> dict[str, tuple[Path, Path]]:
    """Extract the shipped English-Spanish Bible into {split}.en/.es files; cheap if already there."""
    dest = Path(dest_dir)
    paths = {split: (dest / f"{split}.en", dest / f"{split}.es") for split in SPLITS}
    stamp, expected = dest / ".extracted", f"{BUILTIN.name} {BUILTIN.stat().st_size}\n"
    done = stamp.is_file() and stamp.read_text() == expected
    if done and all(p.is_file() for pair in paths.values() for p in pair):
        return paths
    dest.mkdir(parents=True, exist_ok=True)
    files = {split: [open(p, "w", encoding="utf-8") for p in ps] for split, ps in paths.items()}
    try:
        with lzma.open(BUILTIN, "rt", encoding="utf-8", newline="\n") as f:
            for line in f:
                verse, en, es = line.rstrip("\n").split("\t")
                en_file, es_file = files[BUILTIN_HELD_OUT.get(verse.split(".")[0], "train")]
                en_file.write(en + "\n")
                es_file.write(es + "\n")
    finally:
        for fs in files.values():
            for f in fs:
                f.close()
    stamp.write_text(expected)
    return paths


def load_wmt14(
    pair: str = "de-en", src_lang: str = "en", tgt_lang: str = "de", out_dir: str | Path = "data/wmt14",
    dataset: Any = None,
) -> dict[str, tuple[Path, Path]]:
    """Write WMT14 (HuggingFace `wmt/wmt14`, or the given DatasetDict) as line-aligned text files.

    Returns {"train": (src, tgt), "valid": ..., "test": ...} (valid = newstest2013, test = newstest2014).
    """
    if sorted((src_lang, tgt_lang)) != sorted(pair.split("-")):
        raise DataError(f"languages {src_lang}-{tgt_lang} do not match the WMT14 pair {pair}")
    if dataset is None:
        require("load_wmt14", "datasets")
        import datasets

        dataset = datasets.load_dataset("wmt/wmt14", pair)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for hf_split, split in (("train", "train"), ("validation", "valid"), ("test", "test")):
        if hf_split not in dataset:
            continue
        paths[split] = (out / f"{split}.{src_lang}", out / f"{split}.{tgt_lang}")
        with open(paths[split][0], "w", encoding="utf-8") as fs, \
                open(paths[split][1], "w", encoding="utf-8") as ft:
            for rows in dataset[hf_split].iter(batch_size=10_000):
                for t in rows["translation"]:  # a newline inside a sentence would break line alignment
                    fs.write(t[src_lang].replace("\n", " ").replace("\r", " ") + "\n")
                    ft.write(t[tgt_lang].replace("\n", " ").replace("\r", " ") + "\n")
    return paths
