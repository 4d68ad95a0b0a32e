"""Why aiayn runs the attention core in fp32 under CPU bf16 autocast: time softmax(QK^T/sqrt(dk))V forward +
backward with torch's SDPA kernels (flash, math) in bf16 and fp32, on the base shape of a ~4k-token batch.

    python benchmarks/attention.py [--batch 149 --heads 8 --len 30 --dk 64 --reps 10]
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=149)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--len", type=int, default=30)
    ap.add_argument("--dk", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)
    shape = (args.batch, args.heads, args.len, args.dk)
    mask = torch.ones(args.batch, 1, 1, args.len, dtype=torch.bool)
    mask[::3, ..., args.len - 5:] = False  # a third of the sources padded
    print(f"attention fwd+bwd, shape (B, h, n, dk) = {shape}; ms per call, best of 3 rounds (interleaved)")
    print("| dtype | mask | flash | math |")
    print("|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float32):
        q, k, v = (torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(3))
        for causal in (True, False):
            best = {}
            for _ in range(3):
                for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
                    with sdpa_kernel(backend):
                        t = time.perf_counter()
                        for _ in range(args.reps):
                            if causal:
                                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            else:
                                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                            o.sum().backward()
                        ms = (time.perf_counter() - t) / args.reps * 1000
                    best[backend.name] = min(ms, best.get(backend.name, float("inf")))
            name = "bf16" if dtype == torch.bfloat16 else "fp32"
            print(f"| {name} | {'causal' if causal else 'key padding'} | {best['FLASH_ATTENTION']:.1f} | "
                  f"{best['MATH']:.1f} |")


if __name__ == "__main__":
    main()
