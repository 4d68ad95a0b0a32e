"""Per-token perplexity of a model on a prepared split (Table 3's PPL): exp(summed NLL / target tokens), every
target token and its EOS counted. The one loop for both the trainer's dev evaluation and `aiayn evaluate`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

from aiayn.runtime import Runtime
from aiayn.training.losses import batch_loss


class Perplexity(NamedTuple):
    ppl: float  # exp(nll / tokens)
    nll: float  # summed negative log-likelihood, nats
    loss: float  # summed label-smoothed loss (eps as given; = nll for eps 0)
    tokens: int  # target tokens scored, EOS included


@torch.no_grad()
def perplexity(model, pairs: Sequence, max_tokens: int = 4096, eps: float = 0.0,
               runtime: Runtime | None = None) -> Perplexity:
    """Score (src_ids, tgt_ids) pairs (ids without specials, e.g. a PreparedSplit) in token batches of at most
    max_tokens (raised to the longest pair, so no pair is ever refused). With a runtime of several processes, each
    scores its share and the sums are all-reduced."""
    from aiayn.data import TokenBatchSampler, collate

    rt = runtime or Runtime(next(model.parameters()).device)
    src_len = pairs.src_lengths if hasattr(pairs, "src_lengths") else [len(s) + 1 for s, _ in pairs]
    tgt_len = pairs.tgt_lengths if hasattr(pairs, "tgt_lengths") else [len(t) + 1 for _, t in pairs]
    longest = max(max(src_len, default=1), max(tgt_len, default=1))
    sampler = TokenBatchSampler(src_len, tgt_len, max(max_tokens, longest), shuffle=False, seed=0,
                                rank=rt.rank, world_size=rt.world_size)
    was_training = model.training
    model.eval()
    loss_sum = nll_sum = tokens = 0.0
    for idx in sampler:
        b = collate([pairs[i] for i in idx]).to(rt.device)
        with rt.autocast():
            loss, nll, n = batch_loss(model, b.src, b.tgt_in, b.tgt_out, eps)
        loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + n
    model.train(was_training)
    loss_sum, nll_sum, tokens = rt.all_reduce([loss_sum, nll_sum, tokens])
    if tokens == 0:
        raise ValueError("no target tokens to score")
    return Perplexity(math.exp(nll_sum / tokens), nll_sum, loss_sum, int(tokens))
