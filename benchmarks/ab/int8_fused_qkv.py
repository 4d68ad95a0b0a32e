"""int8 decoding's decoder step with each self-attention's W^Q, W^K, W^V as one GEMM (aiayn.decoding.inference's
_Int8Fused, the default) against three, interleaved in one process on real text.

    python -m benchmarks.ab.int8_fused_qkv --run RUN --src test.src.txt [--beam 4] [--rounds 4] [--threads 1]
        [--shapes]

One int8 engine is loaded; each round translates the whole file with the stacked projection, then with the three
(the model's `fused_qkv` set aside), CPU seconds of translate_nbest (`time.process_time`), so the machine's drift
hits both alike. Prints each side's minimum and median, one GEMM over three (< 1: one is faster), and how many
lines have the same words (all of them: the products are the same to the bit). --shapes first prints the three
projections' call at a decoder step's rows, one call against three, microseconds, best of 5, on the model's first
decoder layer. Search: |Y|^0.6 (power), patience 1, aiayn's default batches, no scores asked for greedy search
(as `aiayn translate`). Not a test.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import PAPER_SEARCH
from benchmarks.ab import interleave, print_interleaved, real_text_options
from benchmarks.timing import compare, table


def main() -> None:
    args = real_text_options(__doc__, rounds=4, threads=1, more=lambda ap: ap.add_argument(
        "--shapes", action="store_true", help="first the projections' call at a decoder step's rows"))
    if args.precision != "int8":
        raise SystemExit("the stacked projection is int8's: run with --precision int8")
    torch.set_num_threads(args.threads)
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1.0, scores=False)
    engine = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision="int8", device="cpu"))
    model, stacked = engine.model, engine.model.fused_qkv
    if args.shapes:
        print_shapes(model)
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sides = {"one GEMM": lambda: setattr(model, "fused_qkv", stacked),
             "three": lambda: setattr(model, "fused_qkv", None)}
    seconds, outputs = interleave(engine, lines, sides, args.rounds)
    print(f"{args.run}: {len(lines)} lines, int8, beam {args.beam}, {args.threads} thread(s), {args.rounds} rounds; "
          f"CPU seconds of translate_nbest; a line: its words")
    print_interleaved(seconds, outputs)


def print_shapes(model) -> None:
    attn, stacked = model.decoder.layers[0].self_attn, model.fused_qkv[0]
    d = attn.w_q.in_features
    rows = []
    torch.manual_seed(0)
    for n in (256, 128, 64, 16, 4, 1):
        x = torch.randn(n, 1, d)
        t = compare({"three": lambda x=x: (attn.w_q(x), attn.w_k(x), attn.w_v(x)), "one": lambda x=x: stacked(x)},
                    repeats=5, number=50)
        a, b = t["three"].best, t["one"].best
        rows.append([n, f"{a * 1e6:.0f}", f"{b * 1e6:.0f}", f"{b / a:.2f}"])
    print(f"W^Q, W^K, W^V of the first decoder layer ({d} wide), int8, {torch.get_num_threads()} thread(s); us a "
          f"call, best of 5")
    print(table(["rows", "three", "one", "one / three"], rows))
    print()


if __name__ == "__main__":
    main()
