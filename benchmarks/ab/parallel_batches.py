"""Batches side by side (`aiayn translate --parallel-batches 2`, the default on a CPU with two threads or more)
against one batch at a time on all of the threads, interleaved in one process on real text.

    python -m benchmarks.ab.parallel_batches --run RUN --src test.src.txt [--precision fp32] [--beam 4] [--threads 2] \
        [--rounds 3]

Two engines of one model are loaded, one per side; each round translates the whole file on each, wall seconds of
translate_nbest (each side's threads compute at once, so wall time is what a user waits for), and prints both sides'
CPU seconds too. The outputs (words and score of each line's best) are compared with a translation on one thread: a
batch side by side runs on its share of the threads, one thread each here. Search: beam 4 (--beam; 1: greedy),
|Y|^0.6 (power), patience 1, aiayn's default batches, no scores asked (as `aiayn translate`). Not a test.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path

import torch

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import PAPER_SEARCH
from benchmarks.ab import print_interleaved, real_text_options


def main() -> None:
    args = real_text_options(__doc__, rounds=3, threads=2)
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1.0, scores=False)
    sides = {f"{args.threads} batches side by side": args.threads, f"one batch on {args.threads} threads": 1}
    engines = {name: open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision=args.precision,
                                                         device="cpu", parallel_batches=n))
               for name, n in sides.items()}
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()

    def best(engine) -> list:
        return [(hyps[0].tokens, repr(hyps[0].score)) for hyps in engine.translate_nbest(lines)]

    torch.set_num_threads(1)
    one_thread = best(next(iter(engines.values())))  # also the warm-up
    torch.set_num_threads(args.threads)
    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    outputs: dict[str, list] = {}
    for _ in range(args.rounds):
        for name, engine in engines.items():
            start, clock = time.perf_counter(), time.process_time()
            outputs[name] = best(engine)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - clock)
    print(f"{args.run}: {len(lines)} lines, {args.precision}, beam {args.beam}, {args.threads} threads, "
          f"{args.rounds} rounds; wall seconds of translate_nbest; a line: its words and score")
    print_interleaved(wall, outputs)
    for name in sides:
        same = sum(a == b for a, b in zip(outputs[name], one_thread))
        print(f"  {name}: CPU seconds min {min(cpu[name]):.3f} median {statistics.median(cpu[name]):.3f}; "
              f"{same} of {len(lines)} lines those of one thread")


if __name__ == "__main__":
    main()
