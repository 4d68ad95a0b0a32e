"""Pre-packed weights for the CPU GEMM at decoding shapes: is `F.linear` (which lets the BLAS pack the weight
matrix again at every call) slower than a linear whose weight was packed once?

    python -m benchmarks.ab.packed_linear [--threads 2] [--rows 64,256] [--reps 30]

Shapes are base's decoding projections (K x N: 512 x 512 attention, 512 x 2048 and 2048 x 512 feed-forward,
512 x 32000 the tied output projection) at M rows (64: greedy over 64 sentences; 256: beam 4). Candidates:

    fp32  F.linear                     torch's default (MKL sgemm, the weight packed inside every call)
    fp32  mkl packed                   torch.ops.mkl._mkl_reorder_linear_weight once + torch.ops.mkl._mkl_linear
    fp32  onednn packed                torch.ops.mkldnn._reorder_linear_weight once + mkldnn._linear_pointwise
    bf16  F.linear                     torch's default for bf16 (oneDNN)
    bf16  onednn packed                as fp32, bf16 weights

Prints GFLOP/s (2 M K N / median time) and the ratio to F.linear of the same dtype. Not a test: numbers drift
with the machine's load; run on idle cores.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from benchmarks.timing import measure, table

SHAPES = [(512, 512), (512, 2048), (2048, 512), (512, 32000)]  # (K, N)


def rates(m: int, k: int, n: int, reps: int) -> list[float]:
    """GFLOP/s of the five candidates (module docstring) for an (m, k) x (k, n) linear."""
    w, b = torch.randn(n, k) / k ** 0.5, torch.randn(n)
    x = torch.randn(m, k)
    wb, bb, xb = w.bfloat16(), b.bfloat16(), x.bfloat16()
    mkl_w = torch.ops.mkl._mkl_reorder_linear_weight(w, m)
    dnn_w = torch.ops.mkldnn._reorder_linear_weight(w, m)
    dnn_wb = torch.ops.mkldnn._reorder_linear_weight(wb, m)
    cands = [
        lambda: F.linear(x, w, b),
        lambda: torch.ops.mkl._mkl_linear(x, mkl_w, w, b, m),
        lambda: torch.ops.mkldnn._linear_pointwise(x, dnn_w, b, "none", [], ""),
        lambda: F.linear(xb, wb, bb),
        lambda: torch.ops.mkldnn._linear_pointwise(xb, dnn_wb, bb, "none", [], ""),
    ]
    return [2 * m * k * n / measure(c, repeats=reps, warmup=3).median / 1e9 for c in cands]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="64,256")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} thread(s); GFLOP/s (ratio to F.linear of the same dtype)")
    rows = []
    for m in (int(r) for r in args.rows.split(",")):
        for k, n in SHAPES:
            r = rates(m, k, n, args.reps)
            rows.append([m, f"{k} x {n}", f"{r[0]:.0f}", f"{r[1]:.0f} ({r[1] / r[0]:.2f}x)",
                         f"{r[2]:.0f} ({r[2] / r[0]:.2f}x)", f"{r[3]:.0f}", f"{r[4]:.0f} ({r[4] / r[3]:.2f}x)"])
    print(table(["M", "K x N", "fp32 F.linear", "fp32 mkl packed", "fp32 onednn packed", "bf16 F.linear",
                 "bf16 onednn packed"], rows))

if __name__ == "__main__":
    main()
