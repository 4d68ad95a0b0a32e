"""Forced decoding: the log-probability a model gives a given translation (`aiayn score`). (How translate prints the
scores of its own outputs, `--print-scores`, is aiayn.decoding.lines'.)

A pair's score is the sum of log p(y_t | y_<t, x) over the target's tokens, EOS included, under teacher forcing: the
negative of the training objective's NLL on that pair without label smoothing (aiayn.training.losses). Its per-token
mean divides by the same count (words + 1). Sentences are scored in length-sorted batches; padding changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding.attention import padded
from aiayn.decoding.lines import encode_sources
from aiayn.errors import DataError


class PairScore(NamedTuple):
    """One pair's forced-decoding score: the sum of its target tokens' log-probs (EOS included) and their count."""

    total: float
    tokens: int

    @property
    def mean(self) -> float:
        return self.total / self.tokens


def encode_targets(vocab, lines: Sequence[str], max_len: int | None) -> list[list[int]]:
    """Target ids + EOS per line; a DataError naming the line if one is longer than the model can place."""
    out = []
    for n, line in enumerate(lines, 1):
        ids = vocab.target.encode(line) + [EOS_ID]
        if max_len is not None and len(ids) > max_len:
            raise DataError(f"target line {n} has {len(ids)} tokens (EOS included), more than this model's "
                            f"{max_len} positions; it cannot be scored")
        out.append(ids)
    return out


def score_pairs(model, vocab, sources: Sequence[str], targets: Sequence[str], batch_size: int = 64,
                max_input_len: int | None = None) -> list[PairScore]:
    """The forced-decoding score of each (source, target) pair (the lists line-aligned), in input order. A blank
    source reads as EOS alone; a source longer than max_input_len tokens is cut (with a warning), as translate does."""
    cfg = model.cfg
    src_ids = [s or [EOS_ID] for s in encode_sources(vocab, sources, max_input_len or cfg.max_positions)]
    tgt_ids = encode_targets(vocab, targets, cfg.max_positions if cfg.positional == "learned" else None)
    return score_ids(model, src_ids, tgt_ids, batch_size)


def score_ids(model, src_ids: Sequence[list[int]], tgt_ids: Sequence[list[int]], batch_size: int = 64
              ) -> list[PairScore]:
    """score_pairs on ids: sources and targets each ending with EOS."""
    device = next(model.parameters()).device
    out: list[PairScore | None] = [None] * len(src_ids)
    order = sorted(range(len(src_ids)), key=lambda i: -(len(src_ids[i]) + len(tgt_ids[i])))
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start: start + batch_size]
            src = padded([src_ids[i] for i in idx], device)  # (B, S)
            tgt_out = padded([tgt_ids[i] for i in idx], device)  # (B, T): words + EOS
            tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], BOS_ID), tgt_out[:, :-1]], 1)  # (B, T): BOS + words
            tgt_in = tgt_in.masked_fill(tgt_in.eq(EOS_ID), PAD_ID)  # a shorter row's EOS is never an input
            lprobs = F.log_softmax(model(src, tgt_in).float(), -1)  # (B, T, V)
            token = lprobs.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
            real = tgt_out.ne(PAD_ID)
            totals = token.masked_fill(~real, 0.0).sum(1)
            for row, i in enumerate(idx):
                out[i] = PairScore(float(totals[row]), int(real[row].sum()))
    return out
