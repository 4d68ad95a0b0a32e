"""`aiayn export`: a checkpoint -> an HF transformers (MarianMTModel) or CTranslate2 model folder (aiayn.export)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn.errors import UsageError
from aiayn.extras import require


def run(args: argparse.Namespace) -> int:
    from aiayn.checkpoint import load_for_inference
    from aiayn.export.card import provenance
    from aiayn.rundir import inference_checkpoint

    if args.to == "hf" and args.quantization:
        raise UsageError("--quantization applies to --to ct2 only (an HF export keeps float32 weights)")
    require(f"aiayn export --to {args.to}", "export", ("transformers",) if args.to == "hf" else ("ctranslate2",))
    checkpoint = inference_checkpoint(Path(args.checkpoint))
    model, vocab, _ = load_for_inference(checkpoint)
    prov = provenance(checkpoint, bleu=args.bleu or "")
    if args.to == "hf":
        from aiayn.export.hf import export_hf

        export_hf(model, vocab, args.out, prov)
    else:
        from aiayn.export.ct2 import export_ct2

        export_ct2(model, vocab, args.out, args.quantization, prov)
    print(f"exported {checkpoint} -> {args.out} ({args.to}{', ' + args.quantization if args.quantization else ''})")
    return 0


def register(sub) -> None:
    from aiayn.export.ct2 import QUANTIZATIONS

    p = sub.add_parser("export", help="export a trained model to HF transformers or CTranslate2",
                       description="Write a model folder that HF transformers (MarianMTModel, MarianTokenizer) "
                                   "or CTranslate2 loads without aiayn, with a README model card. The float32 "
                                   "export gives aiayn's log-probs and translations (docs/export.md). Marian "
                                   "cannot hold pre-norm, learned positions or h*d_k != d_model; CTranslate2 "
                                   "takes every preset.")
    p.add_argument("--checkpoint", required=True,
                   help="run directory (its averaged, else best, else newest checkpoint) or a checkpoint file")
    p.add_argument("--to", required=True, choices=["hf", "ct2"], help="hf: MarianMTModel folder; ct2: CTranslate2")
    p.add_argument("out", type=Path, help="output folder (must not exist, or be empty)")
    p.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                   help="CTranslate2 weight type (default: float32)")
    p.add_argument("--bleu", help="a measured score to quote in the model card, e.g. '38.1 sacreBLEU, Multi30k "
                                  "test2016'")
    p.set_defaults(func=run)
