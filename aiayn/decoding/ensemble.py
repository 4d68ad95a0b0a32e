"""Several models of one vocabulary decoded as one: `aiayn translate --checkpoint A B` (fairseq's `--path A:B`).

At every step the next token's distribution is the mean of the members' distributions,

    log p(y | prefix) = logsumexp_m log p_m(y | prefix) - log M,

as fairseq's EnsembleModel does (probabilities averaged, not logits). `Ensemble` has the three methods the searches
call on a model (aiayn.decoding.search): `encode` (the members' memories side by side on the feature axis, so that the
search's row selections apply to all at once), `decode` (the mixed log-probabilities: already normalized, so the
search's log_softmax leaves them as they are) and `new_cache` (one decoder cache per member, reordered together).
The members may differ in shape (layers, width, heads) but not in vocabulary; checkpoint averaging
(`aiayn average`) is the cheaper alternative for checkpoints of one run: one model's cost, not M.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from aiayn.decoding.cache import SentenceMoves
from aiayn.errors import UsageError


class EnsembleCache:
    """One decoder cache per member, reordered together (the search's `cache.reorder(rows, sentences)`)."""

    def __init__(self, caches: list) -> None:
        self.caches = caches

    def reorder(self, rows: Tensor, sentences: Tensor | SentenceMoves | None = None) -> None:
        for cache in self.caches:
            cache.reorder(rows, sentences)


class Ensemble(nn.Module):
    """Decoding models of one vocabulary, searched as one model whose next-token probabilities are their mean."""

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if len(members) < 2:
            raise UsageError(f"an ensemble needs two or more models, got {len(members)}")
        sizes = {m.cfg.vocab_size for m in members}
        if len(sizes) != 1:
            raise UsageError("the models of an ensemble must share one vocabulary; their sizes differ: "
                             f"{sorted(sizes)}")
        self.members = nn.ModuleList(members)
        self.widths = [m.cfg.d_model for m in members]
        first = members[0].cfg
        # What the translator reads from cfg: the longest output any member can position.
        learned = [m.cfg for m in members if m.cfg.positional == "learned"]
        if learned:
            self.cfg = dataclasses.replace(first, positional="learned",
                                           max_positions=min(c.max_positions for c in learned))
        else:
            self.cfg = dataclasses.replace(first, max_positions=min(m.cfg.max_positions for m in members))

    def encode(self, src: Tensor) -> Tensor:
        """src (B, S) -> the members' memories concatenated on the feature axis, (B, S, sum of d_model)."""
        return torch.cat([m.encode(src) for m in self.members], dim=-1)

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor | None,
               cache: EnsembleCache | None = None) -> Tensor:
        """Log of the members' mean next-token probabilities, (N, T, V) in fp32 (normalized log-probabilities, which
        a search may treat as logits: their log_softmax is themselves)."""
        memories = memory.split(self.widths, dim=-1)
        caches = cache.caches if cache is not None else [None] * len(self.members)
        logps = [torch.log_softmax(m.decode(tgt_in, mem, src_pad, cache=c).float(), dim=-1)
                 for m, mem, c in zip(self.members, memories, caches)]
        return torch.logsumexp(torch.stack(logps), dim=0) - math.log(len(logps))

    def new_cache(self) -> EnsembleCache:
        return EnsembleCache([m.new_cache() for m in self.members])


def check_same_vocabulary(vocabs: Sequence, names: Sequence[str]) -> None:
    """Refuse models whose SentencePiece vocabularies differ: an ensemble mixes distributions over the same ids."""
    first = [vocabs[0].piece(i) for i in range(len(vocabs[0]))]
    for vocab, name in zip(vocabs[1:], names[1:]):
        pieces = [vocab.piece(i) for i in range(len(vocab))]
        if pieces != first:
            at = next((i for i, (a, b) in enumerate(zip(first, pieces)) if a != b), min(len(first), len(pieces)))
            raise UsageError(
                f"{name}: its vocabulary differs from {names[0]}'s ({len(pieces):,} vs {len(first):,} pieces, first "
                f"difference at id {at}); an ensemble needs models trained on the same prepared data")
