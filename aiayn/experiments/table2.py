"""Table 2's training cost, the paper's way, for your own run; and the model FLOPs a run must compute.

The paper (section 6.1, Table 2) estimates training cost as

    training time x number of GPUs x sustained single-precision FLOPS per GPU
    base: 12 h x 8 P100 x 9.5 TFLOPS = 3.3e18      big: 3.5 days x 8 x 9.5 TFLOPS = 2.3e19

`paper_cost` is that product. `run_cost` applies it to a run of ours: the run's measured target tokens/s (from its
log.jsonl) gives the time the paper's schedule (100K steps of ~25,000 target tokens, or what you give) would take
at that speed, which times the GPUs and their FLOPS is the cost as the paper would have reported it.
`training_flops_per_token` counts what the model actually computes (2 FLOPs per multiply-add of every matmul, the
attention matmuls included, training = 3 x forward), which, divided by a device's sustained FLOPS, gives the
time the same schedule needs on that device at a given utilisation.

    python -m aiayn.experiments.table2 RUN_DIR --gpus 8 --tflops 9.5 [--steps 100000] [--tokens-per-step 25000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from aiayn.config import ModelConfig

P100_TFLOPS = 9.5  # the paper's figure for the P100 (single precision); K80 2.8, K40 3.7, M40 6.0
PAPER_HOURS = {"base": 12.0, "big": 3.5 * 24}  # 8 P100s, section 5.2
PAPER_COST = {"base": 3.3e18, "big": 2.3e19}  # Table 2


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
    lines = [json.loads(x) for x in (Path(run) / "log.jsonl").read_text().splitlines() if x.strip()]
    speeds = [r["tokens_per_s"] for r in lines if r["kind"] == "train"][1:]
    if not speeds:
        raise ValueError(f"{run}/log.jsonl has too few training log lines to measure a speed")
    saved = json.loads((Path(run) / "config.json").read_text())
    return {"tokens_per_s": statistics.median(speeds), "log_lines": len(speeds), "model": saved["model"],
            "train": saved["train"]}


def run_cost(run: Path, gpus: int, tflops: float, steps: int = 100_000, tokens_per_step: int = 25_000
             ) -> dict[str, Any]:
    """The paper's cost estimate for `steps` updates of `tokens_per_step` target tokens at the run's speed."""
    speed = run_speed(run)
    cfg = ModelConfig.from_dict(speed["model"])
    hours = steps * tokens_per_step / speed["tokens_per_s"] / 3600
    model_flops = steps * tokens_per_step * training_flops_per_token(cfg)
    return {"tokens_per_s": speed["tokens_per_s"], "hours": hours, "gpus": gpus, "tflops": tflops,
            "paper_way_flops": paper_cost(hours, gpus, tflops), "model_flops": model_flops,
            "utilisation": model_flops / paper_cost(hours, gpus, tflops)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Table 2's training cost, the paper's way, from a run's tokens/s")
    p.add_argument("run", type=Path, help="a run directory of aiayn train (its log.jsonl and config.json)")
    p.add_argument("--gpus", type=int, required=True, help="devices the run used")
    p.add_argument("--tflops", type=float, required=True, help="sustained single-precision TFLOPS per device "
                   "(the paper: P100 9.5)")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--tokens-per-step", type=int, default=25_000)
    args = p.parse_args(argv)
    c = run_cost(args.run, args.gpus, args.tflops, args.steps, args.tokens_per_step)
    print(f"{c['tokens_per_s']:,.0f} target tokens/s -> {args.steps:,} steps x {args.tokens_per_step:,} tokens take "
          f"{c['hours']:.1f} h; cost the paper's way: {c['hours']:.1f} h x {args.gpus} x {args.tflops} TFLOPS = "
          f"{c['paper_way_flops']:.2g} FLOPs (Table 2: base {PAPER_COST['base']:.2g}, big {PAPER_COST['big']:.2g}); "
          f"model FLOPs computed {c['model_flops']:.2g} ({c['utilisation']:.0%} of that)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
