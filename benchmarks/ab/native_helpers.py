"""One of aiayn.native's helpers beside a decoding step's attention, against what torch runs in its place, interleaved
in one process on real text:

    argmax     greedy search's pick, each row's most probable token, in one pass a row (aiayn.fast.row_argmax)
               against row_topk's five kernels (what it took before, and takes without a compiler)
    move_rows  a reorder's copies of cache rows (beam search's self-attention cache; the rows of sentences that stay
               when others leave) by memcpy of whole rows (aiayn.decoding.cache.move_rows) against torch's
               index_copy_ of index_select

    python -m benchmarks.ab.native_helpers --helper argmax --run RUN --src test.src.txt [--precision int8]
        [--beam 4] [--rounds 4] [--threads 1] [--shapes]

One engine is loaded; each round translates the whole file with the helper, then with torch's ops, CPU seconds of
translate_nbest (`time.process_time`), so the machine's drift hits both alike. Prints each side's minimum and
median, the helper over torch (< 1: the helper is faster), and how many lines have the same words (both compute
the same: argmax the same indices but where a row holds equal maxima, move_rows the same bytes). --shapes first
prints one call of each over typical shapes, microseconds, best of 5. Search: --beam (argmax: greedy whatever is
given), |Y|^0.6 (power), patience 1, no scores asked (as `aiayn translate`), aiayn's default batches. Not a test.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

import aiayn.decoding.cache as cache_module
import aiayn.decoding.search as search_module
from aiayn import native
from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import PAPER_SEARCH
from aiayn.fast import row_argmax, row_topk
from benchmarks.ab import interleave, print_interleaved, real_text_options
from benchmarks.timing import compare, table


def by_row_topk(x: torch.Tensor) -> torch.Tensor:
    return row_topk(x, 1)[1].squeeze(1)


def by_torch_copies(x: torch.Tensor, into: torch.Tensor, source: torch.Tensor) -> None:
    x.index_copy_(0, into, x.index_select(0, source))


HELPERS = {"argmax": (search_module, "row_argmax", row_argmax, by_row_topk),
           "move_rows": (cache_module, "move_rows", cache_module.move_rows, by_torch_copies)}


def main() -> None:
    def more(ap):
        ap.add_argument("--helper", required=True, choices=list(HELPERS))
        ap.add_argument("--shapes", action="store_true", help="first one call of each over typical shapes")

    args = real_text_options(__doc__, rounds=4, threads=1, more=more)
    torch.set_num_threads(args.threads)
    if not native.available():
        raise SystemExit(f"aiayn.native: {native.status()}")
    beam = 1 if args.helper == "argmax" else args.beam
    search = dataclasses.replace(PAPER_SEARCH, beam=beam, lp="power", beam_patience=1.0, scores=False)
    engine = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision=args.precision,
                                                 device="cpu"))
    if args.shapes:
        (print_argmax_shapes if args.helper == "argmax" else print_move_shapes)(engine.model.cfg)
    module, name, helper, by_torch = HELPERS[args.helper]
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sides = {args.helper: lambda: setattr(module, name, helper), "torch": lambda: setattr(module, name, by_torch)}
    seconds, outputs = interleave(engine, lines, sides, args.rounds)
    print(f"{args.run}: {len(lines)} lines, {args.precision}, beam {beam}, {args.threads} thread(s), {args.rounds} "
          f"rounds; CPU seconds of translate_nbest; a line: its words")
    print_interleaved(seconds, outputs)


def print_argmax_shapes(cfg) -> None:
    torch.manual_seed(0)
    rows = []
    for n in (1, 16, 64, 128, 256):
        x = torch.randn(n, cfg.vocab_size)
        t = compare({"one pass": lambda x=x: native.row_argmax(x), "row_topk": lambda x=x: by_row_topk(x),
                     "torch.argmax": lambda x=x: x.argmax(1)}, repeats=5, number=50)
        rows.append([f"{n} x {cfg.vocab_size}", *(f"{t[k].best * 1e6:.0f}" for k in t),
                     str(torch.equal(native.row_argmax(x), x.argmax(1)))])
    print(f"one pick over a step's logits, {torch.get_num_threads()} thread(s); us a call, best of 5")
    print(table(["logits", "one pass", "row_topk", "torch.argmax", "same as torch.argmax"], rows))
    print()


def print_move_shapes(cfg) -> None:
    torch.manual_seed(0)
    rows = []
    for length, n, share in ((10, 256, 0.3), (30, 256, 0.3), (30, 64, 0.3), (30, 256, 0.05)):
        past = torch.randn(length * n, cfg.n_heads, cfg.d_k)  # a time-major cache's positions x rows, flattened
        moved = int(length * n * share)
        into, source = torch.randperm(length * n)[:moved], torch.randint(0, length * n, (moved,))
        args = (past, into, source)
        t = compare({"move_rows": lambda args=args: native.move_rows(*args),
                     "torch": lambda args=args: by_torch_copies(*args)}, repeats=5, number=50)
        rows.append([f"{moved} of {length} x {n} rows of {cfg.n_heads} x {cfg.d_k}",
                     *(f"{t[k].best * 1e6:.0f}" for k in t)])
    print(f"one reorder's copies of a cache's keys, {torch.get_num_threads()} thread(s); us a call, best of 5")
    print(table(["rows moved", "move_rows", "torch"], rows))
    print()


if __name__ == "__main__":
    main()
