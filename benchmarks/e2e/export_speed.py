"""Decoding speed of a trained model's CTranslate2 exports (int8, float32) beside aiayn's own fp32 / bf16 / int8
decoding, in one run, on one thread each.

    python -m benchmarks.e2e.export_speed --checkpoint runs/multi30k --data data-bin/multi30k [--n 300] [--reps 3]

The first --n test sentences (test.src.txt) are translated by every engine, greedy and beam 4 (alpha 0.6, the
|Y|^alpha penalty all of them have, max length = source + 50), --reps times, interleaved (engine after engine,
so drift on a shared machine hits all alike); the table shows median sentences/s and the ratio to aiayn fp32 of
the same search (> 1 = faster than aiayn fp32). Model loading and export are not timed. CTranslate2 runs with
its default patience 1: its beam search may stop earlier than aiayn's (DECODING_NOTES in aiayn/decoding/ct2.py);
the last column counts the lines equal to aiayn fp32's.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.export.ct2 import export_ct2
from aiayn.rundir import inference_checkpoint, load_for_inference
from benchmarks.timing import compare, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="run directory or checkpoint file")
    ap.add_argument("--data", required=True, help="prepared-data directory with test.src.txt")
    ap.add_argument("--n", type=int, default=300, help="sentences (default 300)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)

    lines = (Path(args.data) / "test.src.txt").read_text(encoding="utf-8").splitlines()[: args.n]
    checkpoint = inference_checkpoint(Path(args.checkpoint))
    model, vocab, _ = load_for_inference(checkpoint)
    searches = {"greedy": SearchConfig(beam=1, lp="power"), "beam 4": SearchConfig(beam=4, alpha=0.6, lp="power")}

    with tempfile.TemporaryDirectory() as tmp:
        fp32_dir, int8_dir = export_ct2(model, vocab, Path(tmp) / "fp32"), export_ct2(model, vocab,
                                                                                     Path(tmp) / "int8", "int8")
        engines = {}
        for label, search in searches.items():
            fp32, bf16, int8 = (Translator(model, vocab, search, precision=w, batch_size=args.batch_size)
                                for w in ("fp32", "bf16", "int8"))
            ct2 = EngineOptions(engine="ct2", search=search, threads=1, device="cpu", batch_size=args.batch_size)
            ct2_fp32, ct2_int8 = (open_engine(folder, ct2) for folder in (fp32_dir, int8_dir))
            engines[label] = {
                "aiayn fp32": fp32.translate,
                "aiayn bf16": bf16.translate,
                "aiayn int8": int8.translate,
                "CTranslate2 float32": ct2_fp32.translate,
                "CTranslate2 int8": ct2_int8.translate,
            }
        runs = {(label, name): (lambda run=run: run(lines)) for label, engines_ in engines.items()
                for name, run in engines_.items()}
        t = compare(runs, repeats=args.reps, warmup=0, each=lambda key, rep, seconds: print(
            f"rep {rep + 1} {key[0]:7s} {key[1]:20s} {seconds:6.2f} s", flush=True))

    print(f"\n{checkpoint}: {len(lines)} sentences, batch {args.batch_size}, 1 thread each, median of {args.reps}\n")
    rows = []
    for label, engines_ in engines.items():
        base = t[label, "aiayn fp32"]
        for name in engines_:
            same = sum(a == b for a, b in zip(t[label, name].result, base.result))
            rows.append([label, name, f"{len(lines) / t[label, name].median:.1f}",
                         f"{base.median / t[label, name].median:.2f}x", f"{same}/{len(lines)}"])
    print(table(["search", "engine", "sentences/s", "vs aiayn fp32", "lines as aiayn fp32"], rows))


if __name__ == "__main__":
    main()
