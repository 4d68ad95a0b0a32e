"""The decoder's self-attention cache during search, two layouts, one layer's steps timed alone.

    python benchmarks/self_attention_cache.py --threads 2 [--rows 256,64] [--steps 30] [--dtypes fp32,bf16]

(a) grow: keys/values per row (N, h, t, d), `torch.cat` of the past with the new position at every step (a copy of
    the whole past), and beam search's reorder an `index_select` of rows (a second copy of the past);
(b) time-major (aiayn.model.LayerCache): a buffer (T, N, h, d) with room to grow; a step writes its position in
    place, attention reads a strided view (N, h, t, d) of the buffer (copied contiguous first in CPU bf16), and the
    reorder copies the past once, into a new buffer.

aiayn's LayerCache picks (b) in fp32 and (a) in CPU bf16; the table has both layouts forced and what aiayn runs.
Each step: write this position's keys/values, attention of one query per row over the t cached positions (eq. 1,
two matmuls and an fp32 softmax), then (beam) the reorder. Prints ms per layer for the whole search (--steps steps)
and the ratio; the two layouts' outputs are checked equal first.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from aiayn.fast import keep_freed_memory
from aiayn.model import LayerCache


def attend(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return scores.softmax(-1, dtype=torch.float32).to(v.dtype) @ v


def run_grow(qs, ks, vs, rows):
    k = v = None
    outs = []
    for q, kn, vn in zip(qs, ks, vs):
        k = kn if k is None else torch.cat([k, kn], 2)
        v = vn if v is None else torch.cat([v, vn], 2)
        outs.append(attend(q, k, v))
        if rows is not None:
            k, v = k.index_select(0, rows), v.index_select(0, rows)
    return outs


def run_aiayn(qs, ks, vs, rows, time_major=None):
    cache = LayerCache(time_major=time_major)
    outs = []
    for q, kn, vn in zip(qs, ks, vs):
        outs.append(attend(q, *cache.append(kn, vn)))
        if rows is not None:
            cache.reorder(rows)
    return outs


def timed(fn, *args, reps=3):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="256,64", help="decoder rows: 256 = beam 4 over 64 sentences, 64 = greedy")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-k", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as every aiayn command: a new buffer each step would otherwise page-fault its memory in
    g = torch.Generator().manual_seed(0)
    print("| rows | search | dtype | grow (cat + index_select) ms | time-major ms | ratio | aiayn uses | aiayn ms "
          "| ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (int(r) for r in args.rows.split(",")):
        for dtype in args.dtypes.split(","):
            dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
            shape = (n, args.heads, 1, args.d_k)
            qs, ks, vs = ([torch.randn(shape, generator=g).to(dt) for _ in range(args.steps)] for _ in range(3))
            beam = n % 4 == 0 and n > 64
            # beam: every step's rows are a random choice among the same sentence's 4 rows
            rows = (torch.arange(n) // 4 * 4 + torch.randint(0, 4, (n,), generator=g)) if beam else None
            with torch.inference_mode():
                for a, b, c in zip(run_grow(qs, ks, vs, rows), run_aiayn(qs, ks, vs, rows),
                                   run_aiayn(qs, ks, vs, rows, True)):
                    torch.testing.assert_close(a, b, rtol=0, atol=0)
                    torch.testing.assert_close(a, c, rtol=0, atol=0)
                t_grow = timed(run_grow, qs, ks, vs, rows)
                t_ours = timed(run_aiayn, qs, ks, vs, rows)
                t_tm = timed(run_aiayn, qs, ks, vs, rows, True)
            probe = LayerCache()
            probe.append(ks[0], vs[0])
            layout = "time-major" if probe.time_major else "grow"
            print(f"| {n} | {'beam' if beam else 'greedy'} | {dtype} | {t_grow * 1e3:.1f} | {t_tm * 1e3:.1f} | "
                  f"{t_grow / t_tm:.2f}x | {layout} | {t_ours * 1e3:.1f} | {t_grow / t_ours:.2f}x |")


if __name__ == "__main__":
    main()
