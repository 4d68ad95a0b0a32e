"""Sampling's draws: a token per row from the model's distribution, reshaped by temperature, top-k and top-p, with
random numbers that belong to the input line, not to the batch (aiayn.decoding.search.sample_search runs them).

    sentence_generator(seed, line)   the generator input line `line` draws from: the same in any batch or buffer
    sample_from(lprobs, uniforms)    one token per row by inverse CDF, after temperature, top-k and top-p
    Sampler                          what sample_search calls each step: each sentence's uniforms from its generator
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

NEG_INF = float("-inf")


def sentence_generator(seed: int, line: int) -> torch.Generator:
    """The random numbers sampling draws for input line `line`: the same whatever the batch the line is in."""
    digest = hashlib.blake2b(f"{seed}:{line}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)


def sample_from(lprobs: Tensor, uniforms: Tensor, top_k: int = 0, top_p: float = 1.0,
                temperature: float = 1.0) -> Tensor:
    """One token per row of log-probs (N, V) from softmax(lprobs / temperature), cut to the top_k most probable
    tokens (0: all), renormalized, then cut to the nucleus (the fewest most probable tokens whose mass is >= top_p),
    drawn by inverse CDF with one uniform in [0, 1) per row (N,). Ties in probability are ranked by token id, lower
    first (a stable sort), so which of equal tokens top-k and top-p keep is the lower ids. -> (N,) tokens."""
    # Banned tokens (-inf) stay banned at any temperature, also one past float32's range (-inf / inf would be NaN).
    scaled = ((lprobs - lprobs.amax(-1, keepdim=True)) / temperature).masked_fill(lprobs.isneginf(), NEG_INF)
    probs = torch.softmax(scaled, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)  # (N, V)
    if top_k:
        sorted_probs[:, top_k:] = 0.0
    if top_p < 1.0:
        sorted_probs = sorted_probs / sorted_probs.sum(-1, keepdim=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before.ge(top_p), 0.0)
    cdf = sorted_probs.cumsum(-1)  # (N, V)
    pick = torch.searchsorted(cdf, (uniforms.to(cdf) * cdf[:, -1])[:, None], right=True).squeeze(1)
    last = sorted_probs.gt(0).sum(-1) - 1  # the last token with probability > 0 (rounding may reach past it)
    return order.gather(1, torch.minimum(pick, last)[:, None]).squeeze(1)


class Sampler:
    """Draws for sample_search: sentence i's uniforms come from sentence_generator(seed, lines[i]), `n` per step (one
    per sample, finished or not), so each sentence's samples depend on nothing else in its batch."""

    def __init__(self, search, lines: Tensor, n: int):
        self.search, self.n = search, n
        self.generators = [sentence_generator(search.seed, line) for line in lines.tolist()]

    def __call__(self, lprobs: Tensor, sent: Tensor, sample: Tensor) -> Tensor:
        sent, sample = sent.cpu(), sample.cpu()
        alive = sent.unique()  # sorted
        draws = torch.stack([torch.rand(self.n, generator=self.generators[i]) for i in alive.tolist()])  # (b, n)
        uniforms = draws[torch.searchsorted(alive, sent), sample]  # (N,)
        s = self.search
        return sample_from(lprobs, uniforms.to(lprobs.device), s.top_k, s.top_p, s.temperature)
