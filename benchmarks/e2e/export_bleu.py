"""BLEU of a trained model through aiayn, its HF transformers export and its CTranslate2 exports (float32, int8),
with the number of test lines each gives identical to aiayn's own (same search rules: beam, alpha, |Y|^alpha).

    python -m benchmarks.e2e.export_bleu --checkpoint runs/multi30k --data data-bin/multi30k [--n 1000]

Exports into a temporary folder (or --keep DIR), translates the test split (test.src.txt, scored against
test.tgt.txt with sacreBLEU), and prints one markdown table. aiayn decodes with --lp power (the length penalty
HF and CTranslate2 have) and, for reference, with the paper's GNMT penalty. HF generate takes one length limit
per call, so HF batches hold sentences of equal limit. CTranslate2 is run with
patience 1 (its default: stops after `beam` finished hypotheses) and with a patience that lets it search as
long as aiayn (aiayn/decoding/ct2.py: DECODING_NOTES). Every engine runs on one thread (--threads).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from aiayn.config import PAD_ID
from aiayn.decoding.batches import own_limits
from aiayn.decoding.ct2 import translate_ct2
from aiayn.decoding.lines import encode_sources
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.export.ct2 import export_ct2
from aiayn.export.hf import export_hf
from aiayn.metrics import corpus_bleu
from aiayn.rundir import inference_checkpoint, load_for_inference
from benchmarks.timing import once, table


def translate_hf(folder: Path, vocab, lines: list[str], search: SearchConfig, batch_size: int) -> list[str]:
    """HF generate on an exported folder, batches of equal aiayn length limit; ids detokenized as aiayn does."""
    from transformers import MarianMTModel

    model = MarianMTModel.from_pretrained(folder).eval()
    sources = encode_sources(vocab, lines, model.config.max_position_embeddings)
    out = [""] * len(lines)
    with torch.inference_mode():
        limits = own_limits(sources, search, None)
        by_limit = sorted(limits, key=lambda i: (limits[i], i))  # batches of equal limit, at most batch_size each
        batches = [[i for i in by_limit if limits[i] == limit] for limit in sorted(set(limits.values()))]
        for idx in (b[start: start + batch_size] for b in batches for start in range(0, len(b), batch_size)):
            limit = limits[idx[0]]
            x = torch.full((len(idx), max(len(sources[i]) for i in idx)), PAD_ID)
            for row, i in enumerate(idx):
                x[row, : len(sources[i])] = torch.tensor(sources[i])
            ys = model.generate(input_ids=x, attention_mask=x.ne(PAD_ID), num_beams=search.beam,
                                length_penalty=search.alpha, max_length=limit + 2,  # + decoder start + EOS
                                min_new_tokens=search.min_len)
            for i, y in zip(idx, ys.tolist()):
                out[i] = vocab.decode(y[1:])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="run directory or checkpoint file")
    ap.add_argument("--data", required=True, help="prepared-data directory with test.src.txt / test.tgt.txt")
    ap.add_argument("--n", type=int, default=0, help="first N test lines (default all)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=0.6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--keep", type=Path, help="export into this folder (kept) instead of a temporary one")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    data = Path(args.data)
    src = (data / "test.src.txt").read_text(encoding="utf-8").splitlines()
    ref = (data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()
    if args.n:
        src, ref = src[: args.n], ref[: args.n]
    checkpoint = inference_checkpoint(Path(args.checkpoint))
    model, vocab, _ = load_for_inference(checkpoint)
    power = SearchConfig(beam=args.beam, alpha=args.alpha, lp="power")
    gnmt = SearchConfig(beam=args.beam, alpha=args.alpha, lp="gnmt")

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        hf_dir, fp32, int8 = root / "hf", root / "ct2-float32", root / "ct2-int8"
        export_hf(model, vocab, hf_dir)
        export_ct2(model, vocab, fp32)
        export_ct2(model, vocab, int8, "int8")

        runs = {
            f"aiayn, lp power (beam {args.beam}, alpha {args.alpha})":
                lambda: Translator(model, vocab, power, batch_size=args.batch_size).translate(src),
            "aiayn, lp gnmt (the paper's)": lambda: Translator(model, vocab, gnmt,
                                                               batch_size=args.batch_size).translate(src),
            "HF MarianMTModel generate": lambda: translate_hf(hf_dir, vocab, src, power, args.batch_size),
            "CTranslate2 float32, patience 1": lambda: translate_ct2(fp32, src, power, threads=args.threads),
            "CTranslate2 float32, as long as aiayn": lambda: translate_ct2(fp32, src, power, patience=1000,
                                                                            threads=args.threads),
            "CTranslate2 int8, patience 1": lambda: translate_ct2(int8, src, power, threads=args.threads),
        }
        rows, reference = [], None
        for name, run in runs.items():
            hyps, seconds = once(run)
            reference = reference or hyps  # aiayn with lp power
            same = sum(h == r for h, r in zip(hyps, reference))
            rows.append((name, corpus_bleu(hyps, ref).score, same, seconds))
            print(f"{name}: BLEU {rows[-1][1]:.2f}, {same}/{len(src)} lines as aiayn's, {seconds:.1f} s", flush=True)

    print(f"\n{checkpoint}, {len(src)} test lines, sacreBLEU; identical = lines equal to aiayn's (lp power); "
          f"{args.threads} thread(s)\n")
    print(table(["engine", "BLEU", "identical lines", "seconds"],
                [[name, f"{bleu:.2f}", f"{same}/{len(src)}", f"{seconds:.1f}"] for name, bleu, same, seconds in rows]))


if __name__ == "__main__":
    main()
