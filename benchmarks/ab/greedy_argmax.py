"""Greedy search's pick, each row's most probable token, by aiayn.native's one pass a row (aiayn.fast.row_argmax,
the default where the kernels are built) against row_topk's five kernels (what it took before, and takes without
a compiler), interleaved in one process on real text.

    python -m benchmarks.ab.greedy_argmax --run RUN --src test.src.txt [--precision int8] [--rounds 4]
        [--threads 1] [--shapes]

One engine is loaded; each round translates the whole file with one pick, then the other, CPU seconds of
translate_nbest (`time.process_time`), so the machine's drift hits both alike. Prints each side's minimum and
median, one pass over row_topk (< 1: one pass is faster), and how many lines have the same words (the same indices
but where a row holds equal maxima). --shapes first prints one call of each (and torch.argmax) over a step's
logits at 1 to 256 rows, microseconds, best of 5. Search: greedy (--beam is 1 whatever is given), no scores asked
(as `aiayn translate`), aiayn's default batches. Not a test.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

import aiayn.decoding.search as search_module
from aiayn import native
from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import PAPER_SEARCH
from aiayn.fast import row_argmax, row_topk
from benchmarks.ab import interleave, print_interleaved, real_text_options
from benchmarks.timing import compare, table


def by_row_topk(x: torch.Tensor) -> torch.Tensor:
    return row_topk(x, 1)[1].squeeze(1)


def main() -> None:
    args = real_text_options(__doc__, rounds=4, threads=1, more=lambda ap: ap.add_argument(
        "--shapes", action="store_true", help="first one call of each over a step's logits at 1 to 256 rows"))
    torch.set_num_threads(args.threads)
    if not native.available():
        raise SystemExit(f"aiayn.native: {native.status()}")
    search = dataclasses.replace(PAPER_SEARCH, beam=1, lp="power", scores=False)
    engine = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision=args.precision,
                                                 device="cpu"))
    if args.shapes:
        print_shapes(engine.model.cfg.vocab_size)
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sides = {"one pass": lambda: setattr(search_module, "row_argmax", row_argmax),
             "row_topk": lambda: setattr(search_module, "row_argmax", by_row_topk)}
    seconds, outputs = interleave(engine, lines, sides, args.rounds)
    print(f"{args.run}: {len(lines)} lines, {args.precision}, greedy, {args.threads} thread(s), {args.rounds} "
          f"rounds; CPU seconds of translate_nbest; a line: its words")
    print_interleaved(seconds, outputs)


def print_shapes(vocab: int) -> None:
    torch.manual_seed(0)
    rows = []
    for n in (1, 16, 64, 128, 256):
        x = torch.randn(n, vocab)
        t = compare({"one pass": lambda x=x: native.row_argmax(x), "row_topk": lambda x=x: by_row_topk(x),
                     "torch.argmax": lambda x=x: x.argmax(1)}, repeats=5, number=50)
        rows.append([f"{n} x {vocab}", *(f"{t[k].best * 1e6:.0f}" for k in ("one pass", "row_topk", "torch.argmax")),
                     str(torch.equal(native.row_argmax(x), x.argmax(1)))])
    print(f"one pick over a step's logits, {torch.get_num_threads()} thread(s); us a call, best of 5")
    print(table(["logits", "one pass", "row_topk", "torch.argmax", "same as torch.argmax"], rows))
    print()


if __name__ == "__main__":
    main()
