"""fp32 decoding's projections on MKL's GEMM with the plain weights against oneDNN's on weights packed once, and
what aiayn does by default on this CPU (aiayn.runtime.fp32_gemm, by weight size: on a CPU with AVX2 alone, MKL's
up to 512 x 512 numbers, oneDNN's above, the tied output projection among those),
interleaved in one process on real text.

    python -m benchmarks.ab.fp32_gemm --run RUN --src test.src.txt [--rounds 6] [--threads 1] [--beam 4] [--shapes]

The engines are loaded once (`prepack=True`: oneDNN's packed weights; `prepack=False`: MKL's sgemm on the plain
weights, F.linear; `prepack=None`: the default); each round translates the whole file with each in turn, in
process (CPU seconds of translate_nbest, `time.process_time`), so the machine's drift hits all alike. Then the first
line alone, a few times each: CPU milliseconds per translation, every decoder step at a few rows (one sentence's
beams), where a step's fixed cost shows. Prints each side's minimum and median, each over oneDNN's (< 1: faster),
and how many output lines are the same. Search: beam 4, |Y|^0.6 (power), patience 1, batch 64, as
benchmarks/e2e/realtext.py. --shapes first prints one projection's call, y = x W^T + b, on each GEMM at a decoder
step's rows (256: 64 sentences x 4 beams, down to one sentence's 4), microseconds, best of 5: the quickstart model's
(192 wide, 768 inside the feed-forward, 4,000 pieces) and a base-sized one's (512, 2,048, 8,000). Not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.inference import PrepackedLinear
from aiayn.decoding.search import PAPER_SEARCH
from aiayn.runtime import FP32_MKL_LARGEST, configure_process, fp32_gemm
from benchmarks.timing import compare, table

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
    ap.add_argument("--shapes", action="store_true", help="first each GEMM's call at decoding shapes")
    args = ap.parse_args()
    configure_process(kernel_cache=True, keep_freed_memory=True)  # as `aiayn`'s main sets it for every command
    torch.set_num_threads(args.threads)
    if args.shapes:
        print_shapes()
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
          f"default: weights up to {FP32_MKL_LARGEST:,} numbers {fp32_gemm()}, larger "
          f"{fp32_gemm(FP32_MKL_LARGEST + 1)}")
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


def print_shapes() -> None:
    torch.manual_seed(0)
    rows = []
    for d_in, d_out in ((192, 192), (192, 768), (768, 192), (192, 4000), (512, 512), (512, 2048), (2048, 512),
                        (512, 8000)):
        weight, bias = torch.randn(d_out, d_in), torch.randn(d_out)
        packed = PrepackedLinear(weight, bias)
        cells = []
        for n in (256, 64, 16, 4):
            x = torch.randn(n, d_in)
            t = compare({"onednn": lambda x=x, p=packed: p(x),
                         "mkl": lambda x=x, w=weight, b=bias: F.linear(x, w, b)}, repeats=5, number=20)
            a, b = t["onednn"].best, t["mkl"].best
            cells.append(f"{a * 1e6:.0f} / {b * 1e6:.0f} ({b / a:.2f})")
        rows.append([f"{d_in} -> {d_out}", *cells])
    print(f"y = x W^T + b, {torch.get_num_threads()} thread(s); us a call, oneDNN packed / MKL plain (MKL / oneDNN)")
    print(table(["projection", "256 rows", "64 rows", "16 rows", "4 rows"], rows))
    print()


if __name__ == "__main__":
    main()
