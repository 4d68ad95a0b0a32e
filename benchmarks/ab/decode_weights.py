"""aiayn's decoding with fp32, bf16 and int8 weights (`aiayn translate --precision`) on a trained model: speed
(sentences/s, ratios to fp32 in the same run, repetitions interleaved so drift hits every variant alike) and quality
(sacreBLEU of each against the references, and how many lines are identical to fp32's).

    python -m benchmarks.ab.decode_weights --checkpoint runs/multi30k --src data-bin/multi30k/test.src.txt \
        --ref data-bin/multi30k/test.tgt.txt --threads 2 [--precision fp32,fp32-unpacked,bf16,bf16-unpacked,int8]

"-unpacked": the same weights with F.linear on plain weight matrices instead of aiayn.decoding.inference.PrepackedLinear
(the default on CPU): Translator(..., prepack=False), to see what packing the weights gives.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.fast import keep_freed_memory
from aiayn.metrics import corpus_bleu
from aiayn.rundir import load_for_inference
from aiayn.runtime import cpu_flags
from benchmarks.timing import compare, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", help="references, for BLEU")
    ap.add_argument("--n", type=int, default=0, help="first N sentences only (0 = all)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--precision", "--weights", default="fp32,bf16,int8",
                    help="comma separated; fp32-unpacked, bf16-unpacked too (--weights: its old name)")
    ap.add_argument("--reps", type=int, default=2, help="timed rounds (best reported; no warm-up round)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    src = Path(args.src).read_text(encoding="utf-8").splitlines()
    refs = Path(args.ref).read_text(encoding="utf-8").splitlines() if args.ref else None
    if args.n:
        src, refs = src[: args.n], refs and refs[: args.n]
    model, vocab, _ = load_for_inference(args.checkpoint)
    variants = args.precision.split(",")
    search = SearchConfig(beam=args.beam)
    translators = {v: Translator(model, vocab, search, precision=v.removesuffix("-unpacked"),
                                 prepack=False if v.endswith("-unpacked") else None) for v in variants}
    t = compare({v: (lambda tr=translators[v]: tr.translate(src)) for v in variants}, repeats=args.reps, warmup=0)
    flags = cpu_flags()
    native = [f for f in ("avx512_bf16", "amx_bf16", "avx512_vnni", "amx_int8") if f in flags]
    print(f"{len(src)} sentences, beam {args.beam}, {args.threads} thread(s), torch {torch.__version__}; "
          f"CPU flags: {', '.join(native) or 'no bf16/int8 matmul extensions'}")
    base = t["fp32"].best if "fp32" in t else None
    fp32_out = t["fp32"].result if "fp32" in t else None
    rows = []
    for v in variants:
        out, best = t[v].result, t[v].best
        same = sum(a == b for a, b in zip(out, fp32_out or out))
        rows.append([v, f"{best:.1f}", f"{len(src) / best:.1f}", f"{base / best:.2f}x" if base else "",
                     f"{corpus_bleu(out, refs).score:.2f}" if refs else "", f"{same}/{len(src)}"])
    print(table(["precision", "best time (s)", "sentences/s", "vs fp32", "BLEU", "lines identical to fp32"], rows))


if __name__ == "__main__":
    main()
