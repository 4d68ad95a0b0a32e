"""The decoder's self-attention cache during search, three layouts, one layer's steps timed alone.

    python -m benchmarks.ab.self_attention_cache --threads 2 [--rows 256,64] [--steps 30] [--dtypes fp32,bf16] \
        [--reps 5]

(a) grow: keys/values per row (N, h, t, d), `torch.cat` of the past with the new position at every step (a copy of
    the whole past), and beam search's reorder an `index_select` of rows (a second copy of the past);
(b) time-major: a buffer (T, N, h, d) with room to grow; a step writes its position in place, attention reads a
    strided view (N, h, t, d) of the buffer (copied contiguous first in bf16), and a reorder copies the past once,
    into a new buffer (one index_select over a (T*N, h*d) view);
(c) rows with room: (N, h, T, d) with room to grow, written in place, read contiguously per row, reordered whole
    (room included) with one index_select over an (N, h*T*d) view.
aiayn.decoding.cache.LayerCache runs (b) in fp32 until the first reorder and (a) after it, (a) throughout in CPU bf16:
the last columns. Rows 256 = beam 4 over 64 sentences, reordered every step (each row picks one of its sentence's 4);
rows 64 = greedy, never reordered. Each step: write this position's keys/values, attention of one query per row
over the t cached positions (eq. 1, two matmuls and an fp32 softmax), then (beam) the reorder. Prints ms per layer
for the whole search (--steps steps; best of --reps rounds, the layouts interleaved) and the ratios to (a); all
layouts' outputs are checked equal first. Last, a table of one step's q K^T on a contiguous K against the
time-major view (why CPU bf16 keeps (a)).
"""

from __future__ import annotations

import argparse
import math

import torch

from aiayn.decoding.cache import LayerCache
from aiayn.fast import keep_freed_memory
from benchmarks.timing import compare


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


def doubled(buf, t, dim):
    """A copy of buf with twice the room along `dim` (the time axis), holding its first t positions."""
    shape = list(buf.shape)
    shape[dim] *= 2
    new = buf.new_empty(shape)
    new.narrow(dim, 0, t).copy_(buf.narrow(dim, 0, t))
    return new


def run_time_major(qs, ks, vs, rows):
    """(b) time-major throughout, reordered with one index_select over a (T*N, h*d) view of the buffer."""
    n, h, _, d = ks[0].shape
    room = 16
    k_buf = torch.empty(room, n, h, d, dtype=ks[0].dtype)
    v_buf = torch.empty_like(k_buf)
    outs = []
    for t, (q, kn, vn) in enumerate(zip(qs, ks, vs)):
        if t + 1 > room:
            room, k_buf, v_buf = 2 * room, doubled(k_buf, t, 0), doubled(v_buf, t, 0)
        k_buf[t], v_buf[t] = kn[:, :, 0], vn[:, :, 0]
        k_view, v_view = k_buf[: t + 1].permute(1, 2, 0, 3), v_buf[: t + 1].permute(1, 2, 0, 3)
        if k_buf.dtype != torch.float32:  # as aiayn would have to: bf16 matmuls on the strided view are slower still
            k_view, v_view = k_view.contiguous(), v_view.contiguous()
        outs.append(attend(q, k_view, v_view))
        if rows is not None:
            index = (torch.arange(t + 1)[:, None] * k_buf.size(1) + rows).reshape(-1)
            k_new, v_new = k_buf.new_empty((room, rows.numel(), h, d)), v_buf.new_empty((room, rows.numel(), h, d))
            for src, dst in ((k_buf, k_new), (v_buf, v_new)):
                torch.index_select(src.view(-1, h * d)[: index.numel()], 0, index,
                                   out=dst.view(-1, h * d)[: index.numel()])
            k_buf, v_buf = k_new, v_new
    return outs


def run_aiayn(qs, ks, vs, rows):
    cache = LayerCache()
    outs = []
    for q, kn, vn in zip(qs, ks, vs):
        outs.append(attend(q, *cache.append(kn, vn)))
        if rows is not None:
            cache.reorder(rows)
    return outs


def run_rows_with_room(qs, ks, vs, rows):
    """(c) per row (N, h, T, d) with room to grow: in-place writes and contiguous per-row reads, but a reorder moves
    whole rows, room included (one index_select over an (N, h*T*d) view)."""
    n, h, _, d = ks[0].shape
    room = 16
    k_buf = torch.empty(n, h, room, d, dtype=ks[0].dtype)
    v_buf = torch.empty_like(k_buf)
    outs = []
    for t, (q, kn, vn) in enumerate(zip(qs, ks, vs)):
        if t + 1 > room:
            room, k_buf, v_buf = 2 * room, doubled(k_buf, t, 2), doubled(v_buf, t, 2)
        k_buf[:, :, t], v_buf[:, :, t] = kn[:, :, 0], vn[:, :, 0]
        outs.append(attend(q, k_buf[:, :, : t + 1], v_buf[:, :, : t + 1]))
        if rows is not None:
            k_buf = k_buf.view(k_buf.size(0), -1).index_select(0, rows).view(-1, h, room, d)
            v_buf = v_buf.view(v_buf.size(0), -1).index_select(0, rows).view(-1, h, room, d)
    return outs


def best_times(fns, *args, reps=5) -> list[float]:
    """Best time of each function over `reps` rounds, the functions interleaved within a round (the machine's drift
    then hits them alike)."""
    t = compare({str(i): (lambda fn=fn: fn(*args)) for i, fn in enumerate(fns)}, repeats=reps, warmup=0)
    return [t[str(i)].best for i in range(len(fns))]


def strided_matmul_table(rows: int, heads: int, d_k: int, positions: int, dtypes: list[str], reps: int) -> None:
    """Why CPU bf16 keeps (a): one step's scores q K^T over `positions` cached positions, K contiguous (N, h, t, d)
    against K a strided time-major view, interleaved, best of `reps` rounds of 20 calls."""
    print(f"\nq K^T, {rows} rows, {positions} cached positions, ms a call (best of {reps} rounds of 20):\n")
    print("| dtype | contiguous K | time-major view of K | ratio |")
    print("|---|---|---|---|")
    for dtype in dtypes:
        dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        q = torch.randn(rows, heads, 1, d_k).to(dt)
        k_contiguous = torch.randn(rows, heads, positions, d_k).to(dt)
        k_view = torch.randn(2 * positions, rows, heads, d_k).to(dt)[:positions].permute(1, 2, 0, 3)
        calls = [lambda k=k, q=q: [q @ k.transpose(-2, -1) for _ in range(20)] for k in (k_contiguous, k_view)]
        with torch.inference_mode():
            t_c, t_v = best_times(calls, reps=reps)
        print(f"| {dtype} | {t_c / 20 * 1e3:.2f} | {t_v / 20 * 1e3:.2f} | {t_v / t_c:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="256,64", help="decoder rows: 256 = beam 4 over 64 sentences, 64 = greedy")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--reps", type=int, default=5, help="rounds; each layout's best round is reported")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-k", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as every aiayn command: a new buffer each step would otherwise page-fault its memory in
    g = torch.Generator().manual_seed(0)
    print("| rows | search | dtype | grow (cat + index_select) ms | time-major ms | ratio | rows with room ms | ratio "
          "| aiayn uses | aiayn ms | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in (int(r) for r in args.rows.split(",")):
        for dtype in args.dtypes.split(","):
            dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
            shape = (n, args.heads, 1, args.d_k)
            qs, ks, vs = ([torch.randn(shape, generator=g).to(dt) for _ in range(args.steps)] for _ in range(3))
            beam = n % 4 == 0 and n > 64
            # beam: every step's rows are a random choice among the same sentence's 4 rows
            rows = (torch.arange(n) // 4 * 4 + torch.randint(0, 4, (n,), generator=g)) if beam else None
            with torch.inference_mode():
                for a, b, c, e in zip(run_grow(qs, ks, vs, rows), run_aiayn(qs, ks, vs, rows),
                                      run_time_major(qs, ks, vs, rows), run_rows_with_room(qs, ks, vs, rows)):
                    for other in (b, c, e):
                        torch.testing.assert_close(a, other, rtol=0, atol=0)
                t_grow, t_ours, t_tm, t_room = best_times([run_grow, run_aiayn, run_time_major, run_rows_with_room],
                                                     qs, ks, vs, rows, reps=args.reps)
            probe = LayerCache()
            probe.append(ks[0], vs[0])
            if rows is not None:
                probe.reorder(rows)
            layout = "time-major" if probe.time_major else ("time-major, then grow" if rows is not None and
                                                             dtype == "fp32" else "grow")
            print(f"| {n} | {'beam' if beam else 'greedy'} | {dtype} | {t_grow * 1e3:.1f} | {t_tm * 1e3:.1f} | "
                  f"{t_grow / t_tm:.2f}x | {t_room * 1e3:.1f} | {t_grow / t_room:.2f}x | {layout} | "
                  f"{t_ours * 1e3:.1f} | {t_grow / t_ours:.2f}x |")
    strided_matmul_table(max(int(r) for r in args.rows.split(",")), args.heads, args.d_k, 15,
                         args.dtypes.split(","), args.reps)


if __name__ == "__main__":
    main()
