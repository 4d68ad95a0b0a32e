"""int8 decoding on aiayn's own int8 kernel (each row of a projection's input over its own range: aiayn/native_int8.c,
the default on a CPU with AVX2 and no VNNI) against torch's fbgemm (the batch's input over one range) or another
engine (--against: onednn; default, what int8_engine() picks with AIAYN_INT8_ENGINE unset), interleaved in one
process on real text, each beside the model's fp32 translations:

    python -m benchmarks.ab.int8_rows --run RUN --src test.src.txt --ref test.tgt.txt [--beam 4] [--rounds 4]
        [--threads 1] [--more RUN ...] [--shapes] [--against fbgemm|onednn|default]

The model is loaded once per engine (AIAYN_INT8_ENGINE=aiayn, =fbgemm) and once in fp32. Each round translates the
whole file with each engine in turn, so the machine's drift hits both alike: wall and CPU seconds of translate_nbest
(at --threads 2, aiayn's two batches side by side). Prints each side's minimum and median and aiayn's over fbgemm's,
then per side its test BLEU, how many lines are fp32's to the word and its BLEU against fp32's translations. --more:
other runs, translated once by each side (no timing). --shapes: one projection per call at decoding shapes, microseconds
(median of 5 timings), fp32's F.linear beside. Search: --beam, |Y|^0.6 (power), patience 1, no scores asked (as
`aiayn translate`), aiayn's default batches. Not a test.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from pathlib import Path

import sacrebleu
import torch

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import PAPER_SEARCH
from benchmarks.ab import real_text_options

SHAPES = ((1, 256, 256), (4, 192, 576), (64, 192, 576), (128, 192, 576), (128, 768, 192), (128, 192, 4000),
          (256, 256, 1024), (256, 192, 4000), (2048, 192, 768), (2048, 768, 192))


def engines(run: str, search, sides: tuple[str, str]) -> dict[str, object]:
    out = {}
    for side in ("fp32", *sides):
        os.environ.pop("AIAYN_INT8_ENGINE", None)
        if side != "default":
            os.environ["AIAYN_INT8_ENGINE"] = "fbgemm" if side == "fp32" else side
        out[side] = open_engine(run, EngineOptions(engine="aiayn", search=search, device="cpu",
                                                   precision="fp32" if side == "fp32" else "int8"))
    os.environ.pop("AIAYN_INT8_ENGINE", None)
    return out


def texts_of(engine, lines: list[str]) -> list[str]:
    return [h[0].text for h in engine.translate_nbest(lines)]


def near_fp32(run: str, texts: dict[str, list[str]], refs: list[str], sides: tuple[str, str]) -> None:
    fp32 = texts["fp32"]
    print(f"{run}: fp32 BLEU {sacrebleu.corpus_bleu(fp32, [refs]).score:.2f}")
    for side in sides:
        out = texts[side]
        print(f"  int8 {side:7s} BLEU {sacrebleu.corpus_bleu(out, [refs]).score:.2f}, "
              f"{sum(a == b for a, b in zip(out, fp32))} of {len(fp32)} lines fp32's, "
              f"BLEU against fp32's {sacrebleu.corpus_bleu(out, [fp32]).score:.1f}")


def shapes(against: str) -> None:
    from aiayn.decoding.inference import _int8_projection

    other = "fbgemm" if against == "default" else against  # a projection alone: default names no engine
    print(f"| rows x in -> out | fp32 us | int8 {other} us | int8 aiayn us | aiayn / {other} (speed) |")
    print("|---|---|---|---|---|")
    for rows, n_in, n_out in SHAPES:
        torch.manual_seed(0)
        linear = torch.nn.Linear(n_in, n_out)
        x = torch.randn(rows, n_in)
        calls = {"fp32": linear, **{side: _int8_projection(linear.weight, linear.bias, side) for side in
                                     (other, "aiayn")}}
        us = {}
        for name, f in calls.items():
            reps = max(3, int(2e7 / (rows * n_in * n_out)))
            with torch.inference_mode():
                f(x)
                times = []
                for _ in range(5):
                    start = time.perf_counter()
                    for _ in range(reps):
                        f(x)
                    times.append((time.perf_counter() - start) / reps * 1e6)
            us[name] = statistics.median(times)
        print(f"| {rows} x {n_in} -> {n_out} | {us['fp32']:,.1f} | {us[other]:,.1f} | {us['aiayn']:,.1f} | "
              f"{us[other] / us['aiayn']:.2f}x |")


def main() -> None:
    def more(ap):
        ap.add_argument("--ref", required=True)
        ap.add_argument("--more", nargs="*", default=[], help="other runs: BLEU and nearness to fp32 only")
        ap.add_argument("--shapes", action="store_true", help="also time one projection per call at decoding shapes")
        ap.add_argument("--against", choices=("fbgemm", "onednn", "default"), default="fbgemm",
                        help="the engine aiayn's is measured against (default: int8_engine()'s own choice)")

    args = real_text_options(__doc__, rounds=4, threads=1, more=more)
    torch.set_num_threads(args.threads)
    sides = ("aiayn", args.against)
    if args.shapes:
        shapes(args.against)
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1.0, scores=False)
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    refs = Path(args.ref).read_text(encoding="utf-8").splitlines()
    loaded = engines(args.run, search, sides)
    for side in sides:
        loaded[side].translate_nbest(lines[:64])  # warm-up
    wall, cpu = {side: [] for side in sides}, {side: [] for side in sides}
    for _ in range(args.rounds):
        for side in sides:
            w, c = time.perf_counter(), time.process_time()
            loaded[side].translate_nbest(lines)
            wall[side].append(time.perf_counter() - w)
            cpu[side].append(time.process_time() - c)
    print(f"\n{args.run}: {len(lines)} lines, int8, beam {args.beam}, {args.threads} thread(s), {args.rounds} rounds "
          f"interleaved; seconds of translate_nbest")
    for name, seconds in (("wall", wall), ("CPU", cpu)):
        for side in sides:
            print(f"  {name:4s} {side:7s} min {min(seconds[side]):.3f} median {statistics.median(seconds[side]):.3f}")
        other = sides[1]
        print(f"  {name:4s} aiayn / {other}: min {min(seconds['aiayn']) / min(seconds[other]):.3f}, median "
              f"{statistics.median(seconds['aiayn']) / statistics.median(seconds[other]):.3f} (< 1: aiayn's faster)")
    near_fp32(args.run, {side: texts_of(e, lines) for side, e in loaded.items()}, refs, sides)
    for run in args.more:
        near_fp32(run, {side: texts_of(e, lines) for side, e in engines(run, search, sides).items()}, refs, sides)


if __name__ == "__main__":
    main()
