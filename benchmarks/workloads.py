"""What the micro-benchmarks run: the shared peer harness's shapes and synthetic batches, in aiayn's own ids, so that a
benchmark here times the same work as `bench_train.py` / `bench_infer.py` do through benchmarks/peers/aiayn_adapter.py,
without importing the harness.

    model_config("base" | "small")     the harness's CONFIGS as an aiayn ModelConfig (base: 32,000 shared pieces)
    train_batch(vocab, tokens, ...)    sentences of 25-30 tokens until `tokens` target tokens (src, tgt_in, tgt_out)
    src_batch(vocab, n)                n sources of 23-27 tokens, as the harness's decoding batch
    forward_flops(cfg, src, tgt)       the harness's model FLOPs of one forward (training = 3x)
    search_fixed_length(...)           the harness's decoding rule: exactly n_tokens steps, EOS banned before
"""

from __future__ import annotations

import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from aiayn.decoding.search import SearchConfig, beam_search, greedy_search

HARNESS_VOCAB = {"base": 32_000, "small": 8_000}
FIRST_WORD = 4  # ids below are special (PAD, UNK, BOS, EOS)


def model_config(name: str, **overrides) -> ModelConfig:
    """The harness's `name` shape (../shared/bench/peers/common.py CONFIGS) as aiayn's preset of that name."""
    return ModelConfig.preset(name, vocab_size=HARNESS_VOCAB[name], **overrides)


def train_batch(vocab: int, tokens: int, device: str | torch.device = "cpu", seed: int = 0, lo: int = 25,
                hi: int = 30) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[int]]:
    """Random sentences (lengths uniform in [lo, hi], EOS included) until `tokens` target tokens:
    (src, tgt_in, tgt_out, source lengths, target lengths), right-padded."""
    g = torch.Generator().manual_seed(seed)
    src_l, tgt_l = [], []
    while sum(tgt_l) < tokens:
        src_l.append(int(torch.randint(lo, hi + 1, (1,), generator=g)))
        tgt_l.append(int(torch.randint(lo, hi + 1, (1,), generator=g)))
    b, s, t = len(src_l), max(src_l), max(tgt_l)
    src, tgt_in, tgt_out = (torch.full((b, n), PAD_ID) for n in (s, t, t))
    for i, (ls, lt) in enumerate(zip(src_l, tgt_l)):
        src[i, : ls - 1] = torch.randint(FIRST_WORD, vocab, (ls - 1,), generator=g)
        src[i, ls - 1] = EOS_ID
        words = torch.randint(FIRST_WORD, vocab, (lt - 1,), generator=g)
        tgt_in[i, 0], tgt_in[i, 1:lt] = BOS_ID, words
        tgt_out[i, : lt - 1], tgt_out[i, lt - 1] = words, EOS_ID
    return src.to(device), tgt_in.to(device), tgt_out.to(device), src_l, tgt_l


def src_batch(vocab: int, n: int = 64, device: str | torch.device = "cpu", seed: int = 1) -> torch.Tensor:
    """n right-padded sources of 23-27 tokens (EOS included)."""
    return train_batch(vocab, n * 27, device, seed=seed, lo=23, hi=27)[0][:n]


def forward_flops(cfg: ModelConfig, src_lens: list[int], tgt_lens: list[int]) -> float:
    """2 FLOPs per matmul weight per token (the tied output projection once, on the target side), plus 4*d*n*m per
    attention (scores and context, causal not halved), as the harness counts."""
    d, f = cfg.d_model, cfg.d_ff
    per_src = cfg.n_enc_layers * (4 * d * d + 2 * d * f) + cfg.n_dec_layers * 2 * d * d
    per_tgt = cfg.n_dec_layers * (6 * d * d + 2 * d * f) + d * cfg.vocab_size
    total = 0.0
    for s, t in zip(src_lens, tgt_lens):
        total += 2 * per_src * s + 2 * per_tgt * t
        total += 4 * d * (cfg.n_enc_layers * s * s + cfg.n_dec_layers * (t * t + t * s))
    return total


def search_fixed_length(model, src: torch.Tensor, beam: int, n_tokens: int, lenpen: float = 0.6) -> list:
    """Every hypothesis exactly n_tokens decoder steps (n_tokens - 1 words, EOS banned before, then EOS)."""
    n = n_tokens - 1
    if beam == 1:
        return greedy_search(model, src, SearchConfig(beam=1, max_len_a=0.0, max_len_b=n, min_len=n))
    return beam_search(model, src, SearchConfig(beam=beam, alpha=lenpen, max_len_a=0.0, max_len_b=n, min_len=n))
