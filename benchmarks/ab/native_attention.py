"""A decoding step's attention by aiayn.native's compiled kernels against torch's (what aiayn.decoding.step runs with
them off: two matmuls and a softmax over the same cache), interleaved in one process.

    python -m benchmarks.ab.native_attention --run RUN --src test.src.txt [--precision fp32] [--beam 4]
        [--rounds 4] [--threads 1] [--shapes]

One engine is loaded; each round translates the whole file with the kernels, then without
(aiayn.native.set_enabled; greedy search's argmax goes with them: benchmarks/ab/native_helpers.py measures it alone),
CPU seconds of translate_nbest (`time.process_time`), so the machine's drift hits both alike. Prints each side's
minimum and median, kernels over torch (< 1: the kernels are faster), and how many lines have the same words
(fp32: the scores differ in the last bits; int8 quantizes each step's activations per tensor, so a last-bit
difference can move a rounding and change words). --shapes first prints one layer's attention at the quickstart
model's shapes (4 heads of 48), microseconds a call, best of 5: self-attention over a time-major cache of `t`
positions, cross-attention of g rows per sentence over 30 source positions. Search: |Y|^0.6 (power), patience 1,
aiayn's default batches, no scores asked for greedy search (as `aiayn translate`). Not a test.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from aiayn import native
from aiayn.decoding.cache import by_sentence, keys_for_queries
from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import PAPER_SEARCH
from aiayn.model import attention
from benchmarks.ab import interleave, print_interleaved, real_text_options
from benchmarks.timing import compare, table


def main() -> None:
    args = real_text_options(__doc__, rounds=4, threads=1, more=lambda ap: ap.add_argument(
        "--shapes", action="store_true", help="first one layer's attention at the quickstart model's shapes"))
    torch.set_num_threads(args.threads)
    if not native.available():
        raise SystemExit(f"aiayn.native: {native.status()}")
    if args.shapes:
        print_shapes()
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1.0, scores=False)
    engine = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision=args.precision,
                                                 device="cpu"))
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sides = {"kernels": lambda: native.set_enabled(True), "torch": lambda: native.set_enabled(False)}
    seconds, outputs = interleave(engine, lines, sides, args.rounds)
    print(f"{args.run}: {len(lines)} lines, {args.precision}, beam {args.beam}, {args.threads} thread(s), "
          f"{args.rounds} rounds; CPU seconds of translate_nbest; a line: its words")
    print_interleaved(seconds, outputs)


def print_shapes(heads: int = 4, d: int = 48) -> None:
    torch.manual_seed(0)
    rows = []
    for n in (256, 64, 16):
        keys, values, q = torch.randn(64, n, heads, d), torch.randn(64, n, heads, d), torch.randn(n, 1, heads * d)
        for t in (1, 4, 8, 16, 32):
            def by_torch(t=t, q=q, keys=keys, values=values, n=n):
                k, v = (x[:t].permute(1, 2, 0, 3) for x in (keys, values))  # LayerCache's view (N, h, t, d)
                heads_out = attention(q.view(n, 1, heads, d).transpose(1, 2), k, v, None, False, True)
                return heads_out.transpose(1, 2).reshape(n, 1, heads * d)

            def by_kernel(t=t, q=q, keys=keys, values=values, n=n):
                return native.self_attention(q, keys, values, n, t)

            rows.append(_row(f"self, {n} rows, t {t}", by_torch, by_kernel))
    for b, g in ((64, 4), (16, 4), (64, 1)):
        keys, values, q = torch.randn(b, heads, 30, d), torch.randn(b, heads, 30, d), torch.randn(b * g, 1, heads * d)
        mask = torch.ones(b, 1, 1, 30, dtype=torch.bool)
        mask[::3, ..., 25:] = False  # a third of the sentences padded

        def by_torch(q=q, keys=keys, values=values, mask=mask, b=b, g=g):
            kt = keys if g < 4 else keys.transpose(-2, -1).contiguous().transpose(-2, -1)  # keys_for_queries's
            out = by_sentence(attention, q.view(b * g, 1, heads, d).transpose(1, 2), kt, values, mask, False, True)
            return out.transpose(1, 2).reshape(b * g, 1, heads * d)

        held = keys_for_queries(keys, g)  # as the cache holds them for the kernel: K^T, padded to whole vectors

        def by_kernel(q=q, held=held, values=values, mask=mask):
            return native.cross_attention(q, held, values, mask)

        rows.append(_row(f"cross, {b} sentences x {g}, S 30", by_torch, by_kernel))
    print(f"one layer's attention, {heads} heads of {d}, {torch.get_num_threads()} thread(s); us a call, best of 5")
    print(table(["shape", "torch", "kernel", "kernel / torch", "max |difference|"], rows))
    print()


def _row(name: str, by_torch, by_kernel) -> list:
    t = compare({"torch": by_torch, "kernel": by_kernel}, repeats=5, number=50)
    diff = (by_torch() - by_kernel()).abs().max().item()
    a, b = t["torch"].best, t["kernel"].best
    return [name, f"{a * 1e6:.0f}", f"{b * 1e6:.0f}", f"{b / a:.2f}", f"{diff:.1e}"]


if __name__ == "__main__":
    main()
