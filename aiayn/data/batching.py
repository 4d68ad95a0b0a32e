"""Loading a prepared-data directory and batching it: PreparedSplit --TokenBatchSampler--> lists of example
indices --collate--> Batch of padded tensors (token-based batches, section 5.1: ~25,000 source and target tokens).

Prepared data are checked when opened, so damage is an error, never a silently different corpus: the index must be
well formed, each id file exactly as long as the index says, and every file as large as meta.json records (and
equal to its recorded SHA-256 where hashing is cheap, or when asked: `open_prepared(dir, full=True)`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.data.prepare import read_meta, sha256_file
from aiayn.errors import DataError

# Files of a split below this size together are hashed whenever the split is opened (~0.1 s); larger ones only have
# their sizes checked, unless a full check is asked for (they were hashed once, by prepare).
HASH_BELOW_BYTES = 64 << 20

# ---------------------------------------------------------------------------------------------------
# Loading a prepared split
# ---------------------------------------------------------------------------------------------------


class PreparedSplit:
    """One split of a prepared-data directory: ds[i] -> (src_ids, tgt_ids), subword ids without specials."""

    def __init__(self, data_dir: Path, split: str, dtype: str) -> None:
        self.data_dir, self.split, self.dtype = data_dir, split, np.dtype(dtype)
        self.offsets = _load_index(data_dir / f"{split}.idx.npy")  # (2, n + 1)
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


def _load_index(path: Path) -> np.ndarray:
    """{split}.idx.npy: int64 (2, n + 1), rows starting at 0 and never decreasing; anything else is a clear error."""
    try:
        offsets = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"{path} is missing; prepare the data again (aiayn prepare)") from None
    except (ValueError, OSError, EOFError):  # not .npy, truncated, or pickled objects (never loaded)
        raise DataError(f"{path} is damaged (not a readable .npy array); prepare the data again (aiayn prepare)"
                        ) from None
    if (offsets.dtype != np.int64 or offsets.ndim != 2 or offsets.shape[0] != 2 or offsets.shape[1] < 1
            or offsets[:, 0].any() or (np.diff(offsets, axis=1) < 0).any()):
        raise DataError(f"{path} is not an index of token ids (int64, 2 x (pairs + 1), starting at 0, never "
                        "decreasing); it was damaged: prepare the data again (aiayn prepare)")
    return offsets


def _check_file(path: Path, record: dict[str, Any] | None, full: bool | None) -> None:
    """A file of prepared data against its meta.json record: the size always, the SHA-256 if `full` (None: if small)."""
    if record is None:  # prepared by aiayn < format 2: nothing recorded
        return
    if not path.is_file():
        raise DataError(f"{path} is missing; prepare the data again (aiayn prepare)")
    size = path.stat().st_size
    if size != record["bytes"]:
        raise DataError(f"{path} has {size:,} bytes, but {path.parent / 'meta.json'} records {record['bytes']:,}: "
                        "it was truncated or replaced since `aiayn prepare` wrote it; prepare the data again")
    if (full or (full is None and size < HASH_BELOW_BYTES)) and sha256_file(path) != record["sha256"]:
        raise DataError(f"{path} differs from what `aiayn prepare` wrote (its SHA-256 is not the one in "
                        f"{path.parent / 'meta.json'}): it was changed since; prepare the data again")


def _verify_split(ds: PreparedSplit, meta: dict[str, Any], full: bool | None) -> None:
    """The id files are exactly as long as the index says; every file of the split is as meta.json records it."""
    kept = meta["splits"][ds.split].get("kept") if isinstance(meta["splits"][ds.split], dict) else None
    if kept is not None and kept != len(ds):
        raise DataError(f"{ds.data_dir / f'{ds.split}.idx.npy'} indexes {len(ds):,} pairs but meta.json says "
                        f"{kept:,}; the data were damaged: prepare them again")
    files = meta.get("files", {})
    for row, side in enumerate(("src", "tgt")):
        path = ds.data_dir / f"{ds.split}.{side}.bin"
        if not path.is_file():
            raise DataError(f"{path} is missing; prepare the data again (aiayn prepare)")
        expected, size = int(ds.offsets[row, -1]) * ds.dtype.itemsize, path.stat().st_size
        if size != expected:
            raise DataError(f"{path} has {size:,} bytes but {ds.split}.idx.npy indexes {int(ds.offsets[row, -1]):,} "
                            f"{ds.dtype.name} token ids ({expected:,} bytes): the file was truncated or replaced; "
                            "prepare the data again (aiayn prepare)")
    names = [f"{ds.split}.{kind}" for kind in ("idx.npy", "src.bin", "tgt.bin", "src.txt", "tgt.txt")]
    cheap = sum(files[n]["bytes"] for n in names if n in files) < HASH_BELOW_BYTES
    for name in names:
        _check_file(ds.data_dir / name, files.get(name), full if full is not None else cheap)


def has_split(data_dir: str | Path, split: str) -> bool:
    """Whether the prepared data lists `split` (a listed but corrupt split still raises when loaded)."""
    return split in read_meta(data_dir)["splits"]


def load_split(data_dir: str | Path, split: str, full_check: bool | None = None) -> PreparedSplit:
    """A split ("train", "valid", "test") of a directory written by `prepare`, checked against its index and
    meta.json (full_check: also hash large files; False: sizes only; default: hash when cheap)."""
    data_dir = Path(data_dir)
    meta = read_meta(data_dir)
    if split not in meta["splits"]:
        raise DataError(f"{data_dir} has no {split!r} split (it has: {', '.join(meta['splits'])}); "
                        f"prepare it with `aiayn prepare ... --{split}-src FILE --{split}-tgt FILE`")
    ds = PreparedSplit(data_dir, split, meta["dtype"])
    _verify_split(ds, meta, full_check)
    return ds


def open_prepared(data_dir: str | Path, full_check: bool | None = None) -> dict[str, PreparedSplit]:
    """Every split of a prepared-data directory, after checking it all: the vocabulary against meta.json (always
    hashed: it is small) and each split as `load_split` does."""
    data_dir = Path(data_dir)
    meta = read_meta(data_dir)
    vocab = data_dir / "vocab.model"
    if not vocab.is_file():
        raise DataError(f"{vocab} is missing; prepare the data again (aiayn prepare)")
    _check_file(vocab, meta.get("files", {}).get("vocab.model"), full=True)
    return {split: load_split(data_dir, split, full_check) for split in meta["splits"]}


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
