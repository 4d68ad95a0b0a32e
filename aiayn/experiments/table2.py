"""Table 2's training cost, the paper's way, for your own run; and the model FLOPs a run must compute.

The paper (section 6.1, Table 2) estimates training cost as

    training time x number of GPUs x sustained single-precision FLOPS per GPU
    base: 12 h x 8 P100 x 9.5 TFLOPS = 3.3e18      big: 3.5 days x 8 x 9.5 TFLOPS = 2.3e19

`paper_cost` is that product. `training_cost` applies it to a run of ours: the run's measured target tokens/s (from its
log.jsonl) gives the time the paper's schedule (100K steps of ~25,000 target tokens, or what you give) would take
at that speed, which times the GPUs and their FLOPS is the cost as the paper would have reported it.
`training_flops_per_token` counts what the model actually computes (2 FLOPs per multiply-add of every matmul, the
attention matmuls included, training = 3 x forward), which, divided by a device's sustained FLOPS, gives the
time the same schedule needs on that device at a given utilisation. `aiayn table2` prints both for a run.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from aiayn import rundir
from aiayn.config import ModelConfig
from aiayn.errors import DataError
from aiayn.rundir import RunDir


def paper_cost(hours: float, gpus: int, tflops: float) -> float:
    """Training time x number of GPUs x sustained single-precision FLOPS per GPU (the paper's estimate)."""
    return hours * 3600 * gpus * tflops * 1e12


def forward_flops(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
    """Matmul FLOPs of one teacher-forced forward of one sentence pair (2 per multiply-add); causal attention
    counted in full, as the kernels compute it."""
    d, f, hk, hv = cfg.d_model, cfg.d_ff, cfg.n_heads * cfg.d_k, cfg.n_heads * cfg.d_v
    proj = d * (2 * hk + hv) + hv * d  # W^Q, W^K, W^V, W^O per token
    per_src = cfg.n_enc_layers * (proj + 2 * d * f) + cfg.n_dec_layers * d * (hk + hv)  # + cross-attention K, V
    per_tgt = cfg.n_dec_layers * (proj + d * hk + hv * d + 2 * d * f) + d * cfg.vocab_size  # + cross Q, O; output
    attn = cfg.n_enc_layers * src_len**2 + cfg.n_dec_layers * (tgt_len**2 + tgt_len * src_len)  # score pairs
    return 2.0 * (per_src * src_len + per_tgt * tgt_len + attn * (hk + hv))


def training_flops_per_token(cfg: ModelConfig, src_len: int = 27, tgt_len: int = 28) -> float:
    """Training FLOPs (forward + backward = 3 x forward) per target token for sentences of these lengths (defaults:
    ~WMT14 EN-DE subword lengths with EOS; the attention share grows with length)."""
    return 3 * forward_flops(cfg, src_len, tgt_len) / tgt_len


def run_speed(run: Path) -> dict[str, Any]:
    """Target tokens/s of a run (all processes together), the median over its log lines past the first."""
    speeds = [r["tokens_per_s"] for r in RunDir(run).log if r["kind"] == "train"][1:]
    if not speeds:
        raise DataError(f"{run}/{rundir.LOG} has too few training log lines to measure a speed")
    saved = RunDir(run).config
    return {"tokens_per_s": statistics.median(speeds), "log_lines": len(speeds), "model": saved["model"],
            "train": saved["train"]}


def training_cost(run: Path, gpus: int, tflops: float, steps: int = 100_000, tokens_per_step: int = 25_000
             ) -> dict[str, Any]:
    """The paper's cost estimate for `steps` updates of `tokens_per_step` target tokens at the run's speed."""
    speed = run_speed(run)
    cfg = ModelConfig.from_dict(speed["model"])
    hours = steps * tokens_per_step / speed["tokens_per_s"] / 3600
    model_flops = steps * tokens_per_step * training_flops_per_token(cfg)
    return {"tokens_per_s": speed["tokens_per_s"], "hours": hours, "gpus": gpus, "tflops": tflops,
            "paper_way_flops": paper_cost(hours, gpus, tflops), "model_flops": model_flops,
            "utilisation": model_flops / paper_cost(hours, gpus, tflops)}
