"""fp32 decoding's projections on MKL's GEMM with the plain weights against oneDNN's on weights packed once, and
what aiayn does by default on this CPU (aiayn.runtime.fp32_gemm for the layers, fp32_output_gemm for the tied
output projection: on an AMD CPU with AVX2 alone, the layers on MKL's and the output projection on oneDNN's),
interleaved in one process on real text.

    python -m benchmarks.ab.fp32_gemm --run RUN --src test.src.txt [--rounds 6] [--threads 1] [--beam 4]

The engines are loaded once (`prepack=True`: oneDNN's packed weights; `prepack=False`: MKL's sgemm on the plain
weights, F.linear; `prepack=None`: the default); each round translates the whole file with each in turn, in
process (CPU seconds of translate_nbest, `time.process_time`), so the machine's drift hits all alike. Then the first
line alone, a few times each: CPU milliseconds per translation, every decoder step at a few rows (one sentence's
beams), where a step's fixed cost shows. Prints each side's minimum and median, each over oneDNN's (< 1: faster),
and how many output lines are the same. Search: beam 4, |Y|^0.6 (power), patience 1, batch 64, as
benchmarks/e2e/realtext.py. Not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import torch

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import PAPER_SEARCH
from aiayn.runtime import configure_process, fp32_gemm, fp32_output_gemm

SIDES = {"onednn packed": True, "mkl plain": False, "default": None}  # name -> Translator's prepack=


def one_line_ms(engine, line: str, repeats: int) -> float:
    """Best CPU milliseconds to translate `line` alone (a decoder step at the beam's few rows: its fixed cost)."""
    best = float("inf")
    for _ in range(repeats):
        cpu = time.process_time()
        for _ in range(10):
            engine.translate_nbest([line])
        best = min(best, (time.process_time() - cpu) / 10 * 1e3)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="a run directory or checkpoint")
    ap.add_argument("--src", required=True, help="source text, one sentence per line")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--beam", type=int, default=4)
    args = ap.parse_args()
    configure_process(kernel_cache=True, keep_freed_memory=True)  # as `aiayn`'s main sets it for every command
    torch.set_num_threads(args.threads)
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1)
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    engines = {name: open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision="fp32",
                                                         device="cpu", batch_size=64, prepack=prepack))
               for name, prepack in SIDES.items()}
    for engine in engines.values():
        engine.translate_nbest(lines[:40])  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    texts: dict[str, list[str]] = {}
    for _ in range(args.rounds):
        for name, engine in engines.items():
            cpu = time.process_time()
            texts[name] = [hyps[0].text for hyps in engine.translate_nbest(lines)]
            seconds[name].append(time.process_time() - cpu)
    per_step = {name: one_line_ms(engine, lines[0], repeats=5) for name, engine in engines.items()}
    base = next(iter(SIDES))
    print(f"{torch.__version__}, {args.threads} thread(s), {len(lines)} lines, beam {args.beam}, {args.rounds} rounds; "
          f"default: the layers {fp32_gemm()}, the output projection {fp32_output_gemm()}")
    print("| side | CPU s min | CPU s median | CPU ms, first line alone | lines = onednn packed |")
    print("|---|---|---|---|---|")
    for name in engines:
        same = sum(a == b for a, b in zip(texts[name], texts[base]))
        print(f"| {name} | {min(seconds[name]):.3f} | {statistics.median(seconds[name]):.3f} | {per_step[name]:.3f} "
              f"| {same} / {len(lines)} |")
    for other in list(SIDES)[1:]:
        print(f"{other} / {base}: CPU s min {min(seconds[other]) / min(seconds[base]):.3f}, median "
              f"{statistics.median(seconds[other]) / statistics.median(seconds[base]):.3f}, first line alone "
              f"{per_step[other] / per_step[base]:.3f}")


if __name__ == "__main__":
    main()
