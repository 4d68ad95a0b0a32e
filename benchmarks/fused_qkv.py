"""Does fusing W^Q, W^K, W^V into one projection pay? Time the self-attention input projections forward +
backward as one (D, 3D) Linear versus three (D, D) Linears, on a ~4k-token batch, fp32 and bf16 autocast.

    python benchmarks/fused_qkv.py [--tokens 4096 --d-model 512 --reps 20 --threads 0]
"""

import argparse
import contextlib
import time

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    d = args.d_model
    x = torch.randn(args.tokens, d, requires_grad=True)
    fused = nn.Linear(d, 3 * d)
    separate = nn.ModuleList(nn.Linear(d, d) for _ in range(3))

    def run_fused():
        q, k, v = fused(x).split(d, dim=-1)
        return q, k, v

    def run_separate():
        return tuple(lin(x) for lin in separate)

    print(f"Q,K,V projections fwd+bwd, {args.tokens} tokens x d_model {d}, {torch.get_num_threads()} threads; "
          "ms per call, best of 3 interleaved rounds")
    print("| dtype | fused (D x 3D) | three (D x D) | fused speed-up |")
    print("|---|---|---|---|")
    for dtype in ("fp32", "bf16"):
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bf16" else contextlib.nullcontext
        best = {"fused": float("inf"), "separate": float("inf")}
        for _ in range(3):
            for name, fn in (("fused", run_fused), ("separate", run_separate)):
                t = time.perf_counter()
                for _ in range(args.reps):
                    with ctx():
                        out = fn()
                    sum(o.float().sum() for o in out).backward()
                best[name] = min(best[name], (time.perf_counter() - t) / args.reps * 1000)
        print(f"| {dtype} | {best['fused']:.2f} | {best['separate']:.2f} | {best['separate'] / best['fused']:.2f}x |")


if __name__ == "__main__":
    main()
