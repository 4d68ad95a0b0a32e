"""Does fusing W^Q, W^K, W^V into one projection pay? Time the self-attention input projections forward +
backward as one (D, 3D) Linear versus three (D, D) Linears, on a ~4k-token batch, fp32 and bf16 autocast.

    python -m benchmarks.ab.fused_qkv [--tokens 4096 --d-model 512 --reps 20 --threads 0]
"""

import argparse
import contextlib

import torch
from torch import nn

from benchmarks.timing import compare, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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

    def fwd_bwd(fn, ctx):
        def run():
            with ctx():
                out = fn()
            sum(o.float().sum() for o in out).backward()
        return run

    print(f"Q,K,V projections fwd+bwd, {args.tokens} tokens x d_model {d}, {torch.get_num_threads()} threads; "
          f"ms per call (mean of {args.reps}), best of 3 interleaved rounds")
    rows = []
    for dtype in ("fp32", "bf16"):
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bf16" else contextlib.nullcontext
        t = compare({"fused": fwd_bwd(run_fused, ctx), "separate": fwd_bwd(run_separate, ctx)}, repeats=3,
                    warmup=0, number=args.reps)
        one, three = t["fused"].best, t["separate"].best
        rows.append([dtype, f"{one * 1e3:.2f}", f"{three * 1e3:.2f}", f"{three / one:.2f}x"])
    print(table(["dtype", "fused (D x 3D)", "three (D x D)", "fused speed-up"], rows))

if __name__ == "__main__":
    main()
