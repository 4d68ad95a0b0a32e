"""Batching a prepared split: PreparedSplit (aiayn.data.folder) --TokenBatchSampler--> lists of example indices
--collate--> Batch of padded tensors (token-based batches, section 5.1: ~25,000 source and target tokens)
--pack--> PackedBatch (the same sentences without padding, for `aiayn train --packed`: aiayn.training.packed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.errors import DataError
from aiayn.training.packed import Sentences

# ---------------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------------


def _cut_batches(order: np.ndarray, longest: np.ndarray, max_tokens: int) -> list[np.ndarray]:
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
            batches = _split_for_ranks(_cut_batches(order, self.longest[order], self.max_tokens), self.world_size)
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
        if state["world_size"] != self.world_size:
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

    def inputs(self) -> tuple[torch.Tensor, ...]:
        """What aiayn.training.losses.TrainingObjective takes."""
        return self.src, self.tgt_in, self.tgt_out

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


@dataclasses.dataclass
class PackedBatch:
    """The sentences of a Batch one after another, no padding: sentence i is src[src_sentences.cu_seqlens[i]:
    src_sentences.cu_seqlens[i+1]], and likewise on the target side (aiayn.training.packed)."""

    src: torch.Tensor  # (Ns,)  ids..., EOS of each sentence in turn
    tgt_in: torch.Tensor  # (Nt,)  BOS, ids... of each sentence
    tgt_out: torch.Tensor  # (Nt,)  ids..., EOS of each sentence
    src_sentences: Sentences
    tgt_sentences: Sentences
    n_src_tokens: int
    n_tgt_tokens: int

    def __len__(self) -> int:
        return len(self.src_sentences)

    def to(self, device: torch.device | str) -> PackedBatch:
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return dataclasses.replace(self, src=move(self.src), tgt_in=move(self.tgt_in), tgt_out=move(self.tgt_out),
                                   src_sentences=self.src_sentences.to(device),
                                   tgt_sentences=self.tgt_sentences.to(device))

    def inputs(self) -> tuple[torch.Tensor | Sentences, ...]:
        """What aiayn.training.losses.TrainingObjective takes."""
        return self.src, self.tgt_in, self.tgt_out, self.src_sentences, self.tgt_sentences


def pack(batch: Batch) -> PackedBatch:
    """The padded batch's sentences without their padding (rows in order; PAD never occurs inside a sentence)."""
    src_real, tgt_real = batch.src.ne(PAD_ID), batch.tgt_out.ne(PAD_ID)  # (B, S), (B, T)
    return PackedBatch(batch.src[src_real], batch.tgt_in[tgt_real], batch.tgt_out[tgt_real],
                       Sentences.from_lengths(src_real.sum(1), batch.src.device),
                       Sentences.from_lengths(tgt_real.sum(1), batch.src.device), batch.n_src_tokens,
                       batch.n_tgt_tokens)
