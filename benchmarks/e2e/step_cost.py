"""What one training step of each quickstart shape costs on this machine, relative to a reference shape: the step
budgets of the recipe search's step-budgeted trials (a shape that costs half as much gets twice the steps in the
same minutes).

    python -m benchmarks.e2e.step_cost --data4k runs/qs-avx2/fp32-vocab4k/data --data8k runs/qs-avx2/fp32/data \
        --shapes v8k,v4k,v4k-ff512,v4k-2x2,v4k-d192 --ref v4k --ref-steps 820

Each shape trains `--steps` steps on `--threads` threads (fp32, the quickstart's recipe, its real prepared data)
with `aiayn train`, in interleaved rounds (shape A, B, C, A, B, C, ...: a machine that drifts affects every shape
alike); the cost is the median over rounds of the seconds per step between step 10 and the last (the first steps
warm the allocator and kernel caches). With --ref-steps S (the steps the reference made in the time budget, measured
by a time-budgeted trial), each shape's budget is S x cost(ref) / cost(shape).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from aiayn.rundir import RunDir
from benchmarks.timing import table

# name -> (vocabulary, `aiayn train` flags on top of the quickstart's: preset small, dropout 0, fairseq init)
SHAPES: dict[str, tuple[str, list[str]]] = {
    "v8k": ("8k", []),
    "v4k": ("4k", []),
    "v4k-ff512": ("4k", ["--set", "d_ff=512"]),
    "v4k-2x2": ("4k", ["--set", "n_enc_layers=2", "--set", "n_dec_layers=2"]),
    "v4k-3x2": ("4k", ["--set", "n_dec_layers=2"]),
    "v4k-d192": ("4k", ["--set", "d_model=192", "--set", "d_ff=768", "--set", "d_k=48", "--set", "d_v=48"]),
    "v4k-tok1k": ("4k", ["--max-tokens", "1024"]),
    "v4k-ff512-tok1k": ("4k", ["--set", "d_ff=512", "--max-tokens", "1024"]),
    "v4k-2x2-d192": ("4k", ["--set", "n_enc_layers=2", "--set", "n_dec_layers=2", "--set", "d_model=192",
                            "--set", "d_ff=768", "--set", "d_k=48", "--set", "d_v=48"]),
    "v4k-2x2-tok1k": ("4k", ["--set", "n_enc_layers=2", "--set", "n_dec_layers=2", "--max-tokens", "1024"]),
    "v4k-2x2-d128": ("4k", ["--set", "n_enc_layers=2", "--set", "n_dec_layers=2", "--set", "d_model=128",
                            "--set", "d_ff=512", "--set", "d_k=32", "--set", "d_v=32"]),
    "v4k-2x2-d192-tok1k": ("4k", ["--set", "n_enc_layers=2", "--set", "n_dec_layers=2", "--set", "d_model=192",
                                  "--set", "d_ff=768", "--set", "d_k=48", "--set", "d_v=48", "--max-tokens", "1024"]),
}
QUICKSTART = ["--preset", "small", "--set", "n_enc_layers=3", "--set", "n_dec_layers=3", "--set", "dropout=0.0",
              "--set", "init=fairseq", "--dtype", "fp32",
              "--max-tokens", "2048", "--warmup", "400", "--lr-factor", "0.45", "--log-every", "10"]


def step_seconds(data: Path, flags: list[str], steps: int, threads: int) -> float:
    """Seconds per step between step 10 and `steps` of a fresh run."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "aiayn", "train", "--data", str(data), "--out", f"{tmp}/run", "--no-progress",
               "--max-steps", str(steps), "--save-every-minutes", "0", "--threads", str(threads), *QUICKSTART, *flags]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        rows = {r["step"]: r["elapsed_s"] for r in RunDir(Path(tmp) / "run").log if r["kind"] == "train"}
    return (rows[steps] - rows[10]) / (steps - 10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data4k", type=Path, required=True, help="the quickstart's data prepared with 4,000 pieces")
    ap.add_argument("--data8k", type=Path, required=True, help="... with 8,000 pieces")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--ref", default="v4k")
    ap.add_argument("--ref-steps", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="threads of every run (default 2, the quickstart's on 2 "
                    "cores; 1 for a run pinned to a core of its own with `taskset -c 0`)")
    ap.add_argument("--json", type=Path, help="also write the costs here")
    args = ap.parse_args()
    names = args.shapes.split(",")
    data = {"4k": args.data4k, "8k": args.data8k}
    costs: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names:
            vocab, flags = SHAPES[n]
            costs[n].append(step_seconds(data[vocab], flags, args.steps, args.threads))
            print(f"round {r + 1}: {n} {costs[n][-1]:.3f} s/step", flush=True)
    med = {n: statistics.median(c) for n, c in costs.items()}
    rows = []
    for n in names:
        budget = round(args.ref_steps * med[args.ref] / med[n], -1) if args.ref_steps else ""
        rows.append([n, " ".join(SHAPES[n][1]) or "(the quickstart's)", " / ".join(f"{c:.3f}" for c in costs[n]),
                     f"{med[args.ref] / med[n]:.2f}", budget])
    isa = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
           if k in os.environ}
    print(f"\nseconds per step (rounds), {args.threads} thread(s), speed relative to {args.ref}; ISA caps: "
          f"{isa or 'none'}")
    print(table(["shape", "flags", "s/step", f"speed vs {args.ref}", f"steps for {args.ref_steps} of {args.ref}"],
                rows))
    if args.json:
        args.json.write_text(json.dumps({"costs": costs, "median": med, "isa_env": isa, "ref": args.ref,
                                         "threads": args.threads, "ref_steps": args.ref_steps}, indent=1))


if __name__ == "__main__":
    main()
