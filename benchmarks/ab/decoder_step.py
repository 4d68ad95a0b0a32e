"""A decoding step written out (aiayn.decoding.step) against the same step through the decoder's modules, interleaved
in one process on real text.

    python -m benchmarks.ab.decoder_step --run RUN --src test.src.txt [--precision fp32] [--beam 4] [--rounds 4]

One engine is loaded; each round translates the whole file with the written-out step, then through the modules
(aiayn.decoding.step.takes answering False), CPU seconds of translate_nbest (`time.process_time`), so the machine's
drift hits both alike. Prints each side's minimum and median, written out over modules (< 1: written out is faster),
and whether the words and scores of every line are the same to the bit (both sides with torch's attention:
aiayn.native's kernels off; benchmarks/ab/native_attention.py measures those). Search: |Y|^0.6 (power), patience 1,
aiayn's default batches, no scores asked for greedy search (as `aiayn translate`). Not a test.
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
from benchmarks.ab import print_interleaved, real_text_options


def main() -> None:
    args = real_text_options(__doc__, rounds=4, threads=1)
    torch.set_num_threads(args.threads)
    native.set_enabled(False)  # both sides' attention torch's, so that the lines can be the same to the bit
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1.0, scores=False)
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


if __name__ == "__main__":
    main()
