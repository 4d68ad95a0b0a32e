"""int8 decoding's projections packed for fbgemm against oneDNN (aiayn.runtime.int8_engine, int8_step_engine), at
decoding shapes and on real text.

    python -m benchmarks.ab.int8_engine --threads 1
    python -m benchmarks.ab.int8_engine --run runs/quickstart/run --src runs/quickstart/data/test.src.txt \
        --ref runs/quickstart/data/test.tgt.txt  # + real text

Each shape is one decoding step's projection: rows = sentences x beams (1: one sentence's greedy step), (d_model ->
d_model), (d_model -> d_ff), (d_ff -> d_model) and the tied output projection (d_model -> vocabulary); a dynamically
quantized nn.Linear (per-channel int8 weights, activations quantized per call, as `aiayn translate --precision int8`)
is packed once under each engine and called as aiayn decodes with it (inference._int8_linear_class), timed
interleaved (benchmarks.timing.compare), beside torch's own module's call on oneDNN's packing and the fp32 and bf16
nn.Linear. With --run, the same model's int8 translation of --src in process (--beam, default 4) with every projection
on fbgemm's, every one on oneDNN's (AIAYN_INT8_ENGINE), and aiayn's default for this CPU (`aiayn doctor`: oneDNN's with
the decoder's on fbgemm's where the CPU has VNNI but no AMX), interleaved, the lines each shares with the default,
and with --ref their BLEU. Run it under the five AVX2 variables (docs/speed-peers.md) for the AVX2 case: oneDNN is
then capped too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings
from functools import partial
from pathlib import Path

import sacrebleu
import torch
from torch import nn

from benchmarks.timing import compare, table

SHAPES = [(1, 256, 256), (1, 256, 8000), (64, 256, 256), (64, 256, 1024), (64, 1024, 256), (64, 256, 8000),
          (256, 256, 256), (256, 256, 1024), (256, 1024, 256), (256, 256, 8000), (64, 512, 2048), (256, 512, 32000),
          (2048, 256, 256), (2048, 256, 1024)]


def packed_linear(linear: nn.Linear, engine: str, lean: bool = True) -> nn.Module:
    """linear as int8 decoding makes it, packed for `engine`: aiayn's Int8Linear (its operator called directly), or
    with lean=False torch.ao's own dynamic quantized module."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    from aiayn.decoding.inference import _int8_linear
    from aiayn.runtime import int8_packing

    with warnings.catch_warnings(), int8_packing(engine):
        warnings.simplefilter("ignore")
        if lean:
            return _int8_linear(linear.weight, linear.bias)
        linear.qconfig = per_channel_dynamic_qconfig
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
        if "onednn" in torch.backends.quantized.supported_engines:
            fns["int8 onednn, torch's module"] = partial(packed_linear(linear, "onednn", lean=False), x)
        with torch.no_grad():
            ts = compare(fns, repeats=repeats, warmup=3, number=5)
        us = {name: t.median * 1e6 for name, t in ts.items()}
        rows.append([f"{m} x {k} -> {n}", *(f"{us[v]:,.1f}" for v in fns),
                     f"{us['int8 fbgemm'] / us['int8 onednn']:.2f}x" if "int8 onednn" in us else ""])
    print(table(["rows x in -> out", *fns, "oneDNN / fbgemm (speed)"], rows))


VARIANTS = {"default": None, "onednn": "onednn", "fbgemm": "fbgemm"}  # AIAYN_INT8_ENGINE of each (None: unset)


def real_text(run: str, src: str, ref: str | None, rounds: int, threads: int, beam: int) -> None:
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for variant, engine in VARIANTS.items():
            env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
            env.pop("AIAYN_INT8_ENGINE", None)
            if engine:
                env["AIAYN_INT8_ENGINE"] = engine
            cell = subprocess.run([sys.executable, "-m", "benchmarks.e2e.realtext", "inprocess", "--run", run, "--src",
                                   src, "--output", f"/tmp/int8-{variant}.txt", "--precision", "int8",
                                   "--beam-patience", "1", "--beam", str(beam)],
                                  env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
            seconds[variant].append(json.loads(cell)["translate_cpu_s"])
            print(f"round {r} {variant}: {seconds[variant][-1]:.2f} CPU s", flush=True)
    lines = {v: Path(f"/tmp/int8-{v}.txt").read_text(encoding="utf-8").splitlines() for v in VARIANTS}
    refs = Path(ref).read_text(encoding="utf-8").splitlines() if ref else None
    best = {v: min(s) for v, s in seconds.items()}
    print(f"\nreal text, int8, beam {beam}, {threads} thread(s), in process, CPU seconds, best of {rounds}:")
    for v in VARIANTS:
        same = sum(a == b for a, b in zip(lines[v], lines["default"]))
        bleu = f", BLEU {sacrebleu.corpus_bleu(lines[v], [refs]).score:.2f}" if refs else ""
        print(f"  {v:8s} {best[v]:.2f} s ({best[v] / best['default']:.3f}x the default's){bleu}; "
              f"{same} of {len(lines[v])} lines as the default's")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--run", help="a run directory: also time its int8 translation of --src under each engine")
    ap.add_argument("--src", help="source text, one sentence per line (with --run)")
    ap.add_argument("--ref", help="references of --src: BLEU of each engine's translation (with --run)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--beam", type=int, default=4, help="beam size of the real-text translation (1: greedy)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from aiayn.runtime import int8_engine, int8_step_engine

    print(f"torch {torch.__version__}, {args.threads} thread(s), ONEDNN_MAX_CPU_ISA="
          f"{os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}; aiayn's default here: int8 {int8_engine()}, the "
          f"decoder's {int8_step_engine()}; microseconds a call, median\n")
    shapes(args.repeats)
    if args.run:
        real_text(args.run, args.src, args.ref, args.rounds, args.threads, args.beam)


if __name__ == "__main__":
    main()
