"""Which attention kernel aiayn uses where: softmax(QK^T/sqrt(dk))V on the base shape of a ~4k-token batch, in the
model's layout (heads split from (B, n, h*dk) projections, as MultiHeadAttention does), forward and forward+backward:

* torch's SDPA flash kernel on fp32 inputs (bf16 projections cast to fp32 and back: the pre-2026-11-22 choice),
* the same kernel on the inputs' own dtype,
* `aiayn.model.scaled_dot_product_attention` (two batched matmuls, softmax in fp32).

    python -m benchmarks.ab.attention [--batch 149 --heads 8 --len 30 --dk 64 --reps 10]

aiayn takes the matmuls for bf16 on CPU (and for decoding steps) and the flash kernel for fp32.
"""

import argparse

import torch
import torch.nn.functional as F

from aiayn.model import scaled_dot_product_attention
from benchmarks.timing import compare, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=149)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--len", type=int, default=30)
    ap.add_argument("--dk", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)
    b, h, n, dk = args.batch, args.heads, args.len, args.dk
    mask = torch.ones(b, 1, 1, n, dtype=torch.bool)
    mask[::3, ..., n - 5:] = False  # a third of the sources padded

    def heads(x):
        return x.view(b, n, h, dk).transpose(1, 2)

    def flash(q, k, v, fp32_core: bool):
        q, k, v = map(heads, (q, k, v))
        dtype = q.dtype
        if fp32_core:
            q, k, v = q.float(), k.float(), v.float()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).to(dtype)

    def matmul(q, k, v):
        q, k, v = map(heads, (q, k, v))
        return scaled_dot_product_attention(q, k, v, mask)[0]

    kernels = {"flash, fp32 core": lambda *x: flash(*x, True), "flash": lambda *x: flash(*x, False),
               "two matmuls": matmul}

    def call(fn, inputs, backward: bool):
        def run():
            out = fn(*inputs)
            if backward:
                out.sum().backward()
        return run

    print(f"attention, (B, n, h, dk) = {(b, n, h, dk)}, key padding mask, {torch.get_num_threads()} threads; "
          f"ms per call (mean of {args.reps}), best of 3 rounds (interleaved)")
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        inputs = [torch.randn(b, n, h * dk, dtype=dtype, requires_grad=True) for _ in range(3)]
        for backward in (False, True):
            with torch.set_grad_enabled(backward):
                t = compare({name: call(fn, inputs, backward) for name, fn in kernels.items()}, repeats=3,
                            number=args.reps)
            rows.append(["bf16" if dtype == torch.bfloat16 else "fp32", "fwd+bwd" if backward else "fwd",
                         *(f"{t[name].best * 1e3:.1f}" for name in kernels)])
    print(table(["dtype", "pass", *kernels], rows))


if __name__ == "__main__":
    main()
