"""A decoding step written out (aiayn.decoding.step) against the same step through the decoder's modules, interleaved
in one process on real text.

    python -m benchmarks.ab.decoder_step --run RUN --src test.src.txt [--precision fp32] [--beam 4] [--rounds 4]
        [--steps]

One engine is loaded; each round translates the whole file with the written-out step, then through the modules
(aiayn.decoding.step.takes answering False), CPU seconds of translate_nbest (`time.process_time`), so the machine's
drift hits both alike. Prints each side's minimum and median, written out over modules (< 1: written out is faster),
and whether the words and scores of every line are the same to the bit (both sides with torch's attention:
aiayn.native's kernels off; benchmarks/ab/native_attention.py measures those). Search: |Y|^0.6 (power), patience 1,
aiayn's default batches, no scores asked for greedy search (as `aiayn translate`). --steps first prints one step's
time, written out and through the modules, at a search's 11th position over batches of 1, 16 and 64 sentences of the
file (x beam rows), the cache primed by the search itself and its positions restored after each call, microseconds,
best of 7 interleaved rounds: a step's fixed cost shows at a few rows. Not a test.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from aiayn import native
from aiayn.decoding import step
from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import PAPER_SEARCH
from aiayn.model import Transformer
from benchmarks.ab import print_interleaved, real_text_options
from benchmarks.timing import compare, table


def main() -> None:
    args = real_text_options(__doc__, rounds=4, threads=1, more=lambda ap: ap.add_argument(
        "--steps", action="store_true", help="first one step's time at a few batch sizes"))
    torch.set_num_threads(args.threads)
    native.set_enabled(False)  # both sides' attention torch's, so that the lines can be the same to the bit
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1.0, scores=False)
    if args.steps:
        print_steps(args, search)
    engine = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision=args.precision,
                                                 device="cpu"))
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sides = {"written out": step.takes, "modules": lambda *args: False}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    outputs: dict[str, list] = {}
    engine.translate_nbest(lines[:64])  # warm-up
    for _ in range(args.rounds):
        for name, takes in sides.items():
            step.takes = takes
            cpu = time.process_time()
            nbests = engine.translate_nbest(lines)
            seconds[name].append(time.process_time() - cpu)
            outputs[name] = [(hyps[0].tokens, repr(hyps[0].score)) for hyps in nbests]
    step.takes = sides["written out"]
    print(f"{args.run}: {len(lines)} lines, {args.precision}, beam {args.beam}, {args.threads} thread(s), "
          f"{args.rounds} rounds; CPU seconds of translate_nbest; a line: its words and score")
    print_interleaved(seconds, outputs)


def print_steps(args, search, sentences=(1, 16, 64), position: int = 10, calls: int = 50) -> None:
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    written_out, rows = step.step, []
    for n in sentences:
        seen: dict = {}

        def timed(model, tgt_in, src_pad, cache, seen=seen):
            if cache.length == position and not seen:  # time this step both ways, the cache as it is
                def run(kind):
                    for _ in range(calls):
                        lengths = [c.length for c in cache.layers]
                        if kind == "written out":
                            written_out(model, tgt_in, src_pad, cache)
                        else:  # the modules' path; a primed cache needs no memory
                            Transformer.decode_hidden(model, tgt_in, None, src_pad, cache)
                        cache.length = lengths[0]
                        for c, length in zip(cache.layers, lengths):
                            c.length = length

                t = compare({"written out": lambda: run("written out"), "modules": lambda: run("modules")},
                            repeats=7, number=1)
                seen.update(rows=tgt_in.size(0), **{k: v.best / calls for k, v in t.items()})
            return written_out(model, tgt_in, src_pad, cache)

        step.step = timed
        try:
            engine = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision=args.precision,
                                                         device="cpu", batch_size=n))
            engine.translate_nbest(lines[300: 300 + n])
        finally:
            step.step = written_out
        a, b = seen["written out"], seen["modules"]
        rows.append([n, seen["rows"], f"{a * 1e6:.0f}", f"{b * 1e6:.0f}", f"{a / b:.2f}"])
    print(f"one decoder step at position {position}, {args.precision}, beam {args.beam}, {torch.get_num_threads()} "
          f"thread(s), torch's attention; us a call, best of 7")
    print(table(["sentences", "rows", "written out", "modules", "written out / modules"], rows))
    print()


if __name__ == "__main__":
    main()
