"""int8 decoding's projections packed for fbgemm against oneDNN (aiayn.runtime.int8_engine), at decoding shapes.

    python -m benchmarks.ab.int8_engine --threads 1
    python -m benchmarks.ab.int8_engine --run runs/quickstart/run --src runs/quickstart/data/test.src.txt  # + real text

Each shape is one decoding step's projection: rows = sentences x beams, (d_model -> d_model), (d_model -> d_ff),
(d_ff -> d_model) and the tied output projection (d_model -> vocabulary); a dynamically quantized nn.Linear
(per-channel int8 weights, activations quantized per call, as `aiayn translate --precision int8`) is packed once under
each engine and timed interleaved (benchmarks.timing.compare), the fp32 and bf16 nn.Linear beside them. With --run,
the same model's int8 translation of --src in process under each engine (AIAYN_INT8_ENGINE), interleaved, and the
lines they share. Run it under the five AVX2 variables (docs/speed-peers.md) for the AVX2 case: oneDNN is then capped
too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import warnings
from functools import partial

import torch
from torch import nn

from benchmarks.timing import compare, table

SHAPES = [(256, 256, 256), (256, 256, 1024), (256, 1024, 256), (256, 256, 8000), (64, 512, 2048), (256, 512, 32000)]


def packed_linear(linear: nn.Linear, engine: str) -> nn.Module:
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    from aiayn.runtime import int8_packing

    linear.qconfig = per_channel_dynamic_qconfig
    with warnings.catch_warnings(), int8_packing(engine):
        warnings.simplefilter("ignore")
        return DynamicLinear.from_float(linear)


def shapes(repeats: int) -> None:
    rows = []
    for m, k, n in SHAPES:
        torch.manual_seed(0)
        x, linear = torch.randn(m, k), nn.Linear(k, n)
        bf16, xb = nn.Linear(k, n).bfloat16(), x.bfloat16()
        # each lambda binds this shape's tensors as defaults (they are called within the iteration anyway)
        fns = {"fp32": lambda f=linear, x=x: f(x), "bf16": lambda f=bf16, x=xb: f(x)}
        for e in ("fbgemm", "onednn"):
            if e in torch.backends.quantized.supported_engines:
                fns[f"int8 {e}"] = partial(packed_linear(linear, e), x)
        with torch.no_grad():
            ts = compare(fns, repeats=repeats, warmup=3, number=5)
        us = {name: t.median * 1e6 for name, t in ts.items()}
        rows.append([f"{m} x {k} -> {n}", *(f"{us[v]:,.0f}" for v in fns),
                     f"{us['int8 fbgemm'] / us['int8 onednn']:.2f}x" if "int8 onednn" in us else ""])
    print(table(["rows x in -> out", *fns, "oneDNN / fbgemm (speed)"], rows))


def real_text(run: str, src: str, rounds: int, threads: int) -> None:
    seconds: dict[str, list[float]] = {"fbgemm": [], "onednn": []}
    for r in range(rounds):
        for engine in seconds:
            out = f"/tmp/int8-{engine}.txt"
            env = {**os.environ, "AIAYN_INT8_ENGINE": engine, "OMP_NUM_THREADS": str(threads)}
            cell = subprocess.run([sys.executable, "-m", "benchmarks.e2e.realtext", "inprocess", "--run", run, "--src",
                                   src, "--output", out, "--precision", "int8", "--beam-patience", "1"],
                                  env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
            seconds[engine].append(__import__("json").loads(cell)["translate_s"])
            print(f"round {r} {engine}: {seconds[engine][-1]:.2f} s", flush=True)
    a, b = (open(f"/tmp/int8-{e}.txt", encoding="utf-8").read().splitlines() for e in seconds)
    best = {e: min(s) for e, s in seconds.items()}
    print(f"\nreal text, int8, {threads} thread(s), in process, best of {rounds}: fbgemm {best['fbgemm']:.2f} s, "
          f"oneDNN {best['onednn']:.2f} s ({best['fbgemm'] / best['onednn']:.2f}x); "
          f"{sum(x == y for x, y in zip(a, b))} of {len(a)} lines the same")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--run", help="a run directory: also time its int8 translation of --src under each engine")
    ap.add_argument("--src", help="source text, one sentence per line (with --run)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), ONEDNN_MAX_CPU_ISA="
          f"{os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}; microseconds a call, median\n")
    shapes(args.repeats)
    if args.run:
        real_text(args.run, args.src, args.rounds, args.threads)


if __name__ == "__main__":
    main()
