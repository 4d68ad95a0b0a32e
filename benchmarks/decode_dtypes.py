"""aiayn's decoding in fp32, bf16 and int8 on a trained model: speed (sentences/s, ratios to fp32 in the same run,
repetitions interleaved so drift hits every dtype alike) and quality (sacreBLEU of each against the references,
and how many lines are identical to fp32's).

    python benchmarks/decode_dtypes.py --checkpoint runs/multi30k --src data-bin/multi30k/test.src.txt \
        --ref data-bin/multi30k/test.tgt.txt --threads 2 [--dtypes fp32,fp32-unpacked,bf16,bf16-unpacked,int8]

"-unpacked": the same dtype with F.linear on plain weight matrices instead of aiayn.fast.PackedLinear (the
default on CPU), to see what packing the weights gives.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn.checkpoint import load_for_inference  # noqa: E402
from aiayn.fast import keep_freed_memory  # noqa: E402
from aiayn.metrics import corpus_bleu  # noqa: E402
from aiayn.runtime import cpu_flags  # noqa: E402
from aiayn.search import SearchConfig  # noqa: E402
from aiayn.translate import Translator  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", help="references, for BLEU")
    ap.add_argument("--n", type=int, default=0, help="first N sentences only (0 = all)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--dtypes", default="fp32,bf16,int8", help="comma separated; fp32-unpacked, bf16-unpacked too")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    src = Path(args.src).read_text(encoding="utf-8").splitlines()
    refs = Path(args.ref).read_text(encoding="utf-8").splitlines() if args.ref else None
    if args.n:
        src, refs = src[: args.n], refs and refs[: args.n]
    model, vocab, _ = load_for_inference(args.checkpoint)
    dtypes = args.dtypes.split(",")
    translators = {d: Translator(model, vocab, SearchConfig(beam=args.beam, dtype=d.removesuffix("-unpacked")),
                                 packed=False if d.endswith("-unpacked") else None) for d in dtypes}
    times: dict[str, list[float]] = {d: [] for d in dtypes}
    outputs: dict[str, list[str]] = {}
    for _ in range(args.reps):
        for d in dtypes:
            t = time.perf_counter()
            outputs[d] = translators[d].translate(src)
            times[d].append(time.perf_counter() - t)
    flags = cpu_flags()
    native = [f for f in ("avx512_bf16", "amx_bf16", "avx512_vnni", "amx_int8") if f in flags]
    print(f"{len(src)} sentences, beam {args.beam}, {args.threads} thread(s), torch {torch.__version__}; "
          f"CPU flags: {', '.join(native) or 'no bf16/int8 matmul extensions'}")
    print("| dtype | best time (s) | sentences/s | vs fp32 | BLEU | lines identical to fp32 |")
    print("|---|---|---|---|---|---|")
    base = min(times["fp32"]) if "fp32" in times else None
    for d in dtypes:
        best = min(times[d])
        bleu = f"{corpus_bleu(outputs[d], refs).score:.2f}" if refs else ""
        same = sum(a == b for a, b in zip(outputs[d], outputs.get("fp32", outputs[d])))
        ratio = f"{base / best:.2f}x" if base else ""
        print(f"| {d} | {best:.1f} | {len(src) / best:.1f} | {ratio} | {bleu} | {same}/{len(src)} |")


if __name__ == "__main__":
    main()
