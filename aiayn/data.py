"""Everything between raw parallel text and the batches the trainer consumes.

raw text --prepare--> prepared-data directory (shared vocabulary + token-id cache) --load_split-->
PreparedSplit --TokenBatchSampler--> lists of example indices --collate--> Batch of padded tensors.

`prepare` streams the text three times (check and filter; draw the vocabulary's training sample;
tokenize), so memory holds per-pair lengths, never the corpus. The layout it writes is described in
docs/data.md and at `prepare`.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import lzma
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, PAPER_VOCAB, UNK_ID
from aiayn.errors import DataError
from aiayn.vocab import Vocab

__all__ = [
    "Batch", "DataError", "PreparedSplit", "TokenBatchSampler", "Vocab", "builtin_corpus", "collate",
    "load_split", "load_wmt14", "prepare",
]

META_FILE = "meta.json"
PARTIAL_MARK = ".aiayn-partial"  # in a directory that prepare is still writing
FORMAT_VERSION = 1
SPLITS = ("train", "valid", "test")
CHUNK = 20_000  # pairs tokenized per SentencePiece call

# Why a pair is dropped (Moses clean-corpus-n); the code is stored per input line during the first pass.
KEEP, EMPTY, TOO_LONG, RATIO = 0, 1, 2, 3
DROP_NAMES = {EMPTY: "empty", TOO_LONG: "too_long", RATIO: "ratio"}


# ---------------------------------------------------------------------------------------------------
# Reading: strict UTF-8, line-aligned files or TSV
# ---------------------------------------------------------------------------------------------------


def _lines(path: Path) -> Iterator[str]:
    """Lines of `path` without their newline. Splits on b"\\n" only, never on Unicode separators."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                yield raw.rstrip(b"\r\n").decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path}, line {n}: not valid UTF-8 ({e.reason} at byte {e.start} of the line); "
                    "re-encode the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`) or fix that line"
                ) from None


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _read_pairs(paths: tuple[Path, ...]) -> Iterator[tuple[str, str]]:
    """(source, target) per line of two line-aligned files, or of one TSV file (source TAB target)."""
    if len(paths) == 1:
        for n, line in enumerate(_lines(paths[0]), 1):
            fields = line.split("\t")
            if len(fields) != 2:
                raise DataError(
                    f"{paths[0]}, line {n}: expected 2 tab-separated fields (source TAB target), found "
                    f"{len(fields)}; remove tabs inside sentences or give --src/--tgt files instead"
                )
            yield fields[0], fields[1]
        return
    src, tgt = paths
    for s, t in itertools.zip_longest(_lines(src), _lines(tgt)):
        if s is None or t is None:
            raise DataError(
                f"line counts differ: {src} has {_count_lines(src)} lines, {tgt} has {_count_lines(tgt)}; "
                "the files must be line-aligned (line i of one is the translation of line i of the other)"
            )
        yield s, t


def _verdict(src: str, tgt: str, max_len: float, max_ratio: float) -> int:
    """KEEP or why not, as Moses clean-corpus-n does it: by whitespace-separated words."""
    ns, nt = len(src.split()), len(tgt.split())
    if ns == 0 or nt == 0:
        return EMPTY
    if ns > max_len or nt > max_len:
        return TOO_LONG
    if ns > max_ratio * nt or nt > max_ratio * ns:
        return RATIO
    return KEEP


# ---------------------------------------------------------------------------------------------------
# prepare: text -> prepared-data directory
# ---------------------------------------------------------------------------------------------------


def _input(*paths: str | Path | None) -> tuple[Path, ...]:
    out = tuple(Path(p) for p in paths if p is not None)
    for p in out:
        if not p.is_file():
            raise DataError(f"no such file: {p}")
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stamp(path: Path) -> list[Any]:
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


def _check_split(split: str, paths: tuple[Path, ...], max_len: float, max_ratio: float) -> bytearray:
    """First pass: validate every line and decide which pairs to keep (one verdict byte per pair)."""
    verdicts = bytearray()
    for src, tgt in tqdm(_read_pairs(paths), desc=f"check {split}", unit=" pairs", disable=None):
        verdicts.append(_verdict(src, tgt, max_len, max_ratio))
    if not verdicts:
        raise DataError(f"{split} input {', '.join(map(str, paths))} is empty")
    if verdicts.count(KEEP) == 0:
        raise DataError(f"no {split} pair is left after filtering; check the input or --max-len/--max-ratio")
    return verdicts


def _vocab_sentences(paths: tuple[Path, ...], verdicts: bytearray, n_sentences: int, seed: int
                     ) -> Iterator[str]:
    """Second pass: both sides of a seeded random sample of kept training pairs (all of them if few)."""
    kept = np.flatnonzero(np.frombuffer(verdicts, np.uint8) == KEEP)
    n_pairs = max(1, n_sentences // 2)
    if len(kept) > n_pairs:
        kept = np.sort(np.random.default_rng(seed).choice(kept, n_pairs, replace=False))
    wanted = iter(kept.tolist())
    want = next(wanted)
    for i, (src, tgt) in enumerate(_read_pairs(paths)):
        if i == want:
            yield src
            yield tgt
            want = next(wanted, None)
            if want is None:
                return


def _write_ids(texts: list[str], vocab: Vocab, dtype: np.dtype, f) -> tuple[np.ndarray, int]:
    """Append the ids of `texts` to the open file `f`; returns (lengths, number of UNK ids)."""
    ids = vocab.encode_batch(texts)
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype, count=int(lengths.sum()))
    flat.tofile(f)
    return lengths, int(np.count_nonzero(flat == UNK_ID))


def _encode_split(
    split: str, paths: tuple[Path, ...], verdicts: bytearray, vocab: Vocab, dtype: np.dtype, out: Path
) -> dict[str, Any]:
    """Third pass: tokenize the kept pairs into {split}.src.bin/.tgt.bin and {split}.idx.npy."""
    keep_text = split != "train"  # untouched references for BLEU
    lengths: dict[str, list[np.ndarray]] = {"src": [], "tgt": []}
    unk = {"src": 0, "tgt": 0}
    bins = {side: open(out / f"{split}.{side}.bin", "wb") for side in ("src", "tgt")}
    texts = {}
    if keep_text:
        texts = {side: open(out / f"{split}.{side}.txt", "w", encoding="utf-8") for side in ("src", "tgt")}
    bar = tqdm(total=verdicts.count(KEEP), desc=f"tokenize {split}", unit=" pairs", disable=None)

    def flush(chunk: list[tuple[str, str]]) -> None:
        for side, column in zip(("src", "tgt"), zip(*chunk)):
            n, n_unk = _write_ids(list(column), vocab, dtype, bins[side])
            lengths[side].append(n)
            unk[side] += n_unk
            if keep_text:
                texts[side].writelines(line + "\n" for line in column)
        bar.update(len(chunk))

    try:
        chunk: list[tuple[str, str]] = []
        for pair, verdict in zip(_read_pairs(paths), verdicts):
            if verdict == KEEP:
                chunk.append(pair)
                if len(chunk) == CHUNK:
                    flush(chunk)
                    chunk = []
        if chunk:
            flush(chunk)
    finally:
        bar.close()
        for f in (*bins.values(), *texts.values()):
            f.close()

    src_len, tgt_len = np.concatenate(lengths["src"]), np.concatenate(lengths["tgt"])
    offsets = np.zeros((2, len(src_len) + 1), np.int64)  # row 0: source, row 1: target
    np.cumsum(src_len, out=offsets[0, 1:])
    np.cumsum(tgt_len, out=offsets[1, 1:])
    np.save(out / f"{split}.idx.npy", offsets)

    codes = np.frombuffer(verdicts, np.uint8)
    src_tokens, tgt_tokens = int(offsets[0, -1]), int(offsets[1, -1])
    return {
        "read": len(verdicts),
        "kept": len(src_len),
        "dropped": {name: int(np.count_nonzero(codes == code)) for code, name in DROP_NAMES.items()},
        "dropped_lines": {  # the first few (1-based) input lines of each kind, so a drop can be checked
            name: (np.flatnonzero(codes == code)[:5] + 1).tolist() for code, name in DROP_NAMES.items()
        },
        "src_tokens": src_tokens,
        "tgt_tokens": tgt_tokens,
        "src_unk": unk["src"] / max(1, src_tokens),
        "tgt_unk": unk["tgt"] / max(1, tgt_tokens),
    }


def _existing(out: Path, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
    """The meta of `out` if it already holds exactly these inputs prepared the same way; None if empty."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return None
    if not (out / META_FILE).is_file():
        raise DataError(f"{out} exists and is not a prepared-data directory (no {META_FILE}); "
                        "choose another --out or empty it")
    meta = json.loads((out / META_FILE).read_text())
    old = meta.get("fingerprint", {})
    if old == fingerprint:
        return meta
    differ = [f"{k}.{kk}" for k in fingerprint for kk in {**old.get(k, {}), **fingerprint[k]}
              if old.get(k, {}).get(kk) != fingerprint[k].get(kk)]
    raise DataError(f"{out} holds data prepared from other inputs or options (differs in: "
                    f"{', '.join(differ)}); choose another --out, or delete it to prepare again")


def _print_summary(meta: dict[str, Any], out: Path) -> None:
    for split, s in meta["splits"].items():
        dropped = s["dropped"]
        labels = {"empty": "empty", "too_long": f"longer than {meta['options']['max_len']} words",
                  "ratio": f"with length ratio > {meta['options']['max_ratio']}"}
        why = ", ".join(f"{dropped[name]:,} {label} (e.g. lines {str(s['dropped_lines'][name])[1:-1]})"
                        for name, label in labels.items() if dropped[name])
        print(f"{split}: {s['read']:,} pairs read, {s['kept']:,} kept, {s['read'] - s['kept']:,} dropped"
              + (f": {why}" if why else ""))
        print(f"{split}: {s['src_tokens']:,} source tokens (unk {100 * s['src_unk']:.3f}%), "
              f"{s['tgt_tokens']:,} target tokens (unk {100 * s['tgt_unk']:.3f}%)")
    took = ", ".join(f"{name} {sec:.1f} s" for name, sec in meta["seconds"].items())
    print(f"vocabulary: {meta['vocab_size']:,} pieces; prepared data in {out} ({took})")


def _build(part: Path, inputs: dict[str, tuple[Path, ...]], vocab: Vocab | None, options: dict[str, Any]
           ) -> dict[str, Any]:
    """The three passes of `prepare`, writing into `part`; returns the meta without the fingerprint."""
    seconds, start = {}, time.perf_counter()
    limits = {"max_len": options["max_len"], "max_ratio": options["max_ratio"]}
    no_limits = {"max_len": float("inf"), "max_ratio": float("inf")}
    verdicts = {split: _check_split(split, paths, **(limits if split == "train" else no_limits))
                for split, paths in inputs.items()}
    seconds["check"], start = time.perf_counter() - start, time.perf_counter()
    if vocab is None:
        n_sentences = options["vocab_sample"]
        print(f"prepare: training a {options['vocab_size']:,}-piece BPE vocabulary on both sides of "
              f"{min(n_sentences // 2, verdicts['train'].count(KEEP)):,} training pairs")
        sample = _vocab_sentences(inputs["train"], verdicts["train"], n_sentences, options["seed"])
        vocab = Vocab.train(sample, part, options["vocab_size"])
    else:
        vocab.copy_to(part)
    seconds["vocab"], start = time.perf_counter() - start, time.perf_counter()
    dtype = np.dtype(np.uint16 if len(vocab) <= 2**16 else np.int32)
    splits = {split: _encode_split(split, paths, verdicts[split], vocab, dtype, part)
              for split, paths in inputs.items()}
    seconds["tokenize"] = time.perf_counter() - start
    return {"vocab_size": len(vocab), "dtype": dtype.name, "options": options, "splits": splits,
            "seconds": {k: round(v, 2) for k, v in seconds.items()}}


def prepare(
    src_path: str | Path | None,
    tgt_path: str | Path | None,
    out_dir: str | Path,
    vocab_size: int = PAPER_VOCAB,
    valid: tuple[str | Path, str | Path] | None = None,
    test: tuple[str | Path, str | Path] | None = None,
    max_len: int = 250,
    max_ratio: float = 9.0,
    seed: int = 1,
    tsv: str | Path | None = None,
    vocab: Vocab | str | Path | None = None,
    vocab_sample: int = 1_000_000,
) -> dict[str, Any]:
    """Clean, build the shared vocabulary and cache token ids; returns the summary (also in meta.json).

    Training pairs come from line-aligned `src_path`/`tgt_path` or from `tsv` (source TAB target).
    Training pairs are dropped when a side is empty, longer than `max_len` words, or one side has more
    than `max_ratio` times the words of the other; valid/test pairs only when a side is empty, so
    references stay as published. The vocabulary is trained on both sides of `vocab_sample` sentences
    drawn with `seed` from the kept training pairs, unless `vocab` (a Vocab, model file or directory)
    is given. Writes into out_dir:

        meta.json                       options, input fingerprint, counts and the summary
        vocab.model, vocab.vocab        the shared SentencePiece BPE (ids 0-3: pad, unk, bos, eos)
        {split}.src.bin, .tgt.bin       token ids of the kept pairs, concatenated (dtype in meta.json)
        {split}.idx.npy                 int64 (2, n + 1): pair i spans [i]:[i + 1] of .src.bin (row 0)
                                        and .tgt.bin (row 1)
        {valid,test}.src.txt, .tgt.txt  the kept lines, untouched, for scoring

    If out_dir already holds the same inputs (path, size, mtime) prepared with the same options, it is
    reused as it is.
    """
    given = (src_path is not None, tgt_path is not None, tsv is not None)
    if given not in ((True, True, False), (False, False, True)):
        raise DataError("give the training pairs either as --src and --tgt files or as one --tsv file")
    inputs = {"train": _input(tsv) if tsv is not None else _input(src_path, tgt_path)}
    for split, pair in (("valid", valid), ("test", test)):
        if pair is not None:
            if len(pair) != 2 or None in pair:
                raise DataError(f"{split} must be a (source file, target file) pair, got {pair!r}")
            inputs[split] = _input(*pair)
    if vocab is not None and not isinstance(vocab, Vocab):
        vocab = Vocab.load(vocab)
    options = {"vocab_size": vocab_size if vocab is None else len(vocab), "max_len": max_len,
               "max_ratio": max_ratio, "seed": seed, "vocab_sample": vocab_sample}
    fingerprint = {
        "inputs": {split: [_stamp(p) for p in paths] for split, paths in inputs.items()},
        "options": {**options, "vocab": None if vocab is None else _sha256(vocab.model_path)},
    }
    out = Path(out_dir)
    meta = _existing(out, fingerprint)
    if meta is not None:
        print(f"prepare: {out} already holds these inputs prepared with these options; reusing it")
        _print_summary(meta, out)
        return {**meta, "reused": True}

    part = out.with_name(out.name + ".partial")  # built here, renamed into place when complete
    if part.exists():
        if not (part / PARTIAL_MARK).exists():
            raise DataError(f"{part} exists and was not made by aiayn; move it away")
        shutil.rmtree(part)
    part.mkdir(parents=True)
    (part / PARTIAL_MARK).touch()
    try:
        meta = {"format": FORMAT_VERSION, **_build(part, inputs, vocab, options), "fingerprint": fingerprint}
    except BaseException:
        shutil.rmtree(part)
        raise
    (part / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    (part / PARTIAL_MARK).unlink()
    if out.exists():
        out.rmdir()  # empty, checked by _existing
    os.replace(part, out)
    _print_summary(meta, out)
    return {**meta, "reused": False}


# ---------------------------------------------------------------------------------------------------
# Loading a prepared split
# ---------------------------------------------------------------------------------------------------


class PreparedSplit:
    """One split of a prepared-data directory: ds[i] -> (src_ids, tgt_ids), subword ids without specials."""

    def __init__(self, data_dir: Path, split: str, dtype: str) -> None:
        self.data_dir, self.split, self.dtype = data_dir, split, np.dtype(dtype)
        self.offsets = np.load(data_dir / f"{split}.idx.npy")  # (2, n + 1)
        self.src_lengths = np.diff(self.offsets[0]) + 1  # + EOS
        self.tgt_lengths = np.diff(self.offsets[1]) + 1  # + BOS (tgt_in) or EOS (tgt_out)
        texts = (data_dir / f"{split}.src.txt", data_dir / f"{split}.tgt.txt")
        self.text_paths: tuple[Path, Path] | None = texts if texts[0].is_file() else None
        self._ids: tuple[np.ndarray, np.ndarray] | None = None  # memory maps, opened on first use

    def _open(self) -> tuple[np.ndarray, np.ndarray]:
        def ids(side: str) -> np.ndarray:
            path = self.data_dir / f"{self.split}.{side}.bin"
            if path.stat().st_size == 0:
                return np.zeros(0, self.dtype)
            return np.asarray(np.memmap(path, dtype=self.dtype, mode="r"))

        self._ids = (ids("src"), ids("tgt"))
        return self._ids

    def __len__(self) -> int:
        return self.offsets.shape[1] - 1

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= i < len(self):
            raise IndexError(f"pair {i} of a {len(self)}-pair split")
        src, tgt = self._ids or self._open()
        (s0, t0), (s1, t1) = self.offsets[:, i], self.offsets[:, i + 1]
        return src[s0:s1], tgt[t0:t1]

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers reopen the maps instead of pickling ids
        return {**self.__dict__, "_ids": None}


def load_split(data_dir: str | Path, split: str) -> PreparedSplit:
    """A split ("train", "valid", "test") of a directory written by `prepare`."""
    data_dir = Path(data_dir)
    if not (data_dir / META_FILE).is_file():
        raise DataError(f"{data_dir} is not a prepared-data directory (no {META_FILE}); run `aiayn prepare`")
    meta = json.loads((data_dir / META_FILE).read_text())
    if split not in meta["splits"]:
        raise DataError(f"{data_dir} has no {split!r} split (it has: {', '.join(meta['splits'])}); "
                        f"prepare it with `aiayn prepare ... --{split}-src FILE --{split}-tgt FILE`")
    return PreparedSplit(data_dir, split, meta["dtype"])


# ---------------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------------


def _pack(order: np.ndarray, longest: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Cut `order` greedily into batches with len(batch) * max(longest in batch) <= max_tokens."""
    batches, start, n = [], 0, len(order)
    while start < n:
        window = longest[start : start + max_tokens // longest[start]]  # no batch can be longer
        fits = np.arange(1, len(window) + 1) * np.maximum.accumulate(window) <= max_tokens
        size = len(window) if fits[-1] else int(np.argmin(fits))  # fits is True...True False...False
        batches.append(order[start : start + size])
        start += size
    return batches


def _split_for_ranks(batches: list[np.ndarray], world_size: int) -> list[np.ndarray]:
    """Halve the batch with the most pairs until the count divides world_size (halves obey the limit)."""
    batches = list(batches)
    while len(batches) % world_size:
        i = max(range(len(batches)), key=lambda j: len(batches[j]))
        b = batches[i]
        if len(b) == 1:
            raise DataError(f"{len(batches)} single-pair batches cannot be shared equally by {world_size} "
                            "ranks; raise max_tokens")
        batches[i : i + 1] = [b[: len(b) // 2], b[len(b) // 2 :]]
    return batches


class TokenBatchSampler:
    """Batches of example indices, at most `max_tokens` padded tokens per side, for one rank.

    Pairs are sorted by (longer side, source length, target length), ties broken at random, and cut
    greedily so that len(batch) * longest <= max_tokens on each side (padding counted). The longer side
    leads because it alone sets the batch size; sorting by source first leaves ~12% target padding.
    If the batch count does not divide world_size, the batch with the most pairs is halved until it
    does, so every rank gets the same number of batches and no pair is lost or repeated. The batch
    order is shuffled; tie-breaking and order are pure functions of (seed, epoch). Rank r gets
    batches r, r + W, r + 2W, ... The state (epoch, position) resumes mid-epoch exactly, given the
    same lengths, max_tokens and world_size.
    """

    def __init__(
        self,
        src_lengths: Sequence[int],
        tgt_lengths: Sequence[int],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 1,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.src_lengths = np.asarray(src_lengths, np.int64)
        self.tgt_lengths = np.asarray(tgt_lengths, np.int64)
        if self.src_lengths.shape != self.tgt_lengths.shape or self.src_lengths.ndim != 1:
            raise ValueError("src_lengths and tgt_lengths must be 1-D and of equal length")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must lie in [0, world_size={world_size}), got {rank}")
        self.longest = np.maximum(self.src_lengths, self.tgt_lengths)
        if len(self.longest) < world_size:
            raise DataError(f"{len(self.longest)} pairs cannot be shared by {world_size} ranks")
        if len(self.longest) and self.longest.max() > max_tokens:
            i = int(self.longest.argmax())
            raise DataError(
                f"pair {i} has {self.longest[i]} tokens (with EOS/BOS), more than max_tokens={max_tokens}; "
                "raise max_tokens or prepare the data with a smaller --max-len"
            )
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.epoch, self.position = 0, 0
        self._cached: tuple[int, list[np.ndarray]] | None = None

    def _batches(self) -> list[np.ndarray]:
        """This rank's batches of the current epoch, in order."""
        if self._cached is None or self._cached[0] != self.epoch:
            rng = np.random.default_rng([self.seed, self.epoch])
            ties = rng.permutation(len(self.longest)) if self.shuffle else np.arange(len(self.longest))
            order = np.lexsort((ties, self.tgt_lengths, self.src_lengths, self.longest))
            batches = _split_for_ranks(_pack(order, self.longest[order], self.max_tokens), self.world_size)
            if self.shuffle:
                batches = [batches[i] for i in rng.permutation(len(batches))]
            self._cached = (self.epoch, batches[self.rank :: self.world_size])
        return self._cached[1]

    def __len__(self) -> int:
        return len(self._batches())

    def __iter__(self) -> Iterator[list[int]]:
        """The remaining batches of the current epoch; afterwards epoch += 1 and position = 0."""
        batches = self._batches()
        while self.position < len(batches):
            self.position += 1
            yield batches[self.position - 1].tolist()
        self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("world_size", self.world_size) != self.world_size:
            raise DataError(f"the saved batch order was made for {state['world_size']} ranks, this run has "
                            f"{self.world_size}; resume with the same number of ranks")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


@dataclasses.dataclass
class Batch:
    """Right-padded torch.long tensors; tgt_in = BOS + ids, tgt_out = ids + EOS (teacher forcing)."""

    src: torch.Tensor  # (B, S)  ids..., EOS, PAD...
    tgt_in: torch.Tensor  # (B, T)  BOS, ids..., PAD...
    tgt_out: torch.Tensor  # (B, T)  ids..., EOS, PAD...
    n_src_tokens: int  # real (non-pad) tokens
    n_tgt_tokens: int

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        return self._map(lambda t: t.to(device, non_blocking=True))

    def pin_memory(self) -> Batch:  # called by DataLoader(pin_memory=True)
        return self._map(torch.Tensor.pin_memory)

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
        return dataclasses.replace(self, src=fn(self.src), tgt_in=fn(self.tgt_in), tgt_out=fn(self.tgt_out))


def collate(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> Batch:
    """Pad a list of (src_ids, tgt_ids) into a Batch."""
    n = len(pairs)
    src_len = [len(s) + 1 for s, _ in pairs]
    tgt_len = [len(t) + 1 for _, t in pairs]
    src = np.full((n, max(src_len)), PAD_ID, np.int64)
    tgt_in = np.full((n, max(tgt_len)), PAD_ID, np.int64)
    tgt_out = np.full((n, max(tgt_len)), PAD_ID, np.int64)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)], src[i, len(s)] = s, EOS_ID
        tgt_in[i, 0], tgt_in[i, 1 : len(t) + 1] = BOS_ID, t
        tgt_out[i, : len(t)], tgt_out[i, len(t)] = t, EOS_ID
    return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out),
                 sum(src_len), sum(tgt_len))


# ---------------------------------------------------------------------------------------------------
# Corpora: the shipped Bible, and WMT14 from HuggingFace for users who are online
# ---------------------------------------------------------------------------------------------------

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
        try:
            import datasets
        except ModuleNotFoundError:
            raise DataError("load_wmt14 needs the `datasets` package: pip install datasets") from None
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


# ---------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "prepare", help="clean parallel text, build the shared vocabulary, cache token ids",
        description="Clean parallel text (Moses clean-corpus-n), train one shared SentencePiece BPE "
                    "vocabulary and cache token ids in a prepared-data directory (see docs/data.md).",
    )
    p.add_argument("--src", help="training source text, one sentence per line")
    p.add_argument("--tgt", help="training target text, line-aligned with --src")
    p.add_argument("--tsv", help="training pairs as one file of source TAB target (instead of --src/--tgt)")
    p.add_argument("--out", required=True, help="prepared-data directory to write")
    p.add_argument("--vocab-size", type=int, default=PAPER_VOCAB,
                   help="BPE pieces (default: %(default)s, the paper's; small corpora need fewer)")
    p.add_argument("--vocab", help="reuse this vocabulary (.model file, prepared-data or run directory)")
    for split in ("valid", "test"):
        p.add_argument(f"--{split}-src", help=f"{split} source text")
        p.add_argument(f"--{split}-tgt", help=f"{split} target text")
    p.add_argument("--max-len", type=int, default=250,
                   help="drop training pairs with a side longer than this many words (default: %(default)s)")
    p.add_argument("--max-ratio", type=float, default=9.0,
                   help="drop training pairs whose word counts differ by more than this factor "
                        "(default: %(default)s, as Moses)")
    p.add_argument("--seed", type=int, default=1, help="seed of the vocabulary's training sample")
    p.add_argument("--vocab-sample", type=int, default=1_000_000,
                   help="sentences (both sides) the vocabulary is trained on (default: %(default)s)")
    p.set_defaults(func=_prepare_command)


def _prepare_command(args: argparse.Namespace) -> int:
    held_out = {}
    for split in ("valid", "test"):
        src, tgt = getattr(args, f"{split}_src"), getattr(args, f"{split}_tgt")
        if (src is None) != (tgt is None):
            print(f"aiayn prepare: error: give both --{split}-src and --{split}-tgt", file=sys.stderr)
            return 1
        held_out[split] = (src, tgt) if src else None
    try:
        prepare(args.src, args.tgt, args.out, vocab_size=args.vocab_size, max_len=args.max_len,
                max_ratio=args.max_ratio, seed=args.seed, tsv=args.tsv, vocab=args.vocab,
                vocab_sample=args.vocab_sample, **held_out)
    except DataError as e:
        print(f"aiayn prepare: error: {e}", file=sys.stderr)
        return 1
    return 0
