"""`aiayn export`: a checkpoint -> an HF transformers (MarianMTModel) or CTranslate2 model folder, or an Argos Translate
package (aiayn.export)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn.cli.common import add_checkpoint_arg, add_language_args
from aiayn.errors import UsageError
from aiayn.extras import require


def export_command(args: argparse.Namespace) -> int:
    from aiayn.decoding.shortlist import load as load_shortlist
    from aiayn.export.card import provenance
    from aiayn.rundir import RunDir, inference_checkpoint, load_for_inference

    if args.to == "hf" and args.quantization:
        raise UsageError("--quantization applies to --to ct2 and argos only (an HF export keeps float32 weights)")
    from aiayn.data.folder import run_languages
    from aiayn.languages import check_code

    languages = (args.source_lang, args.target_lang)  # the pair given, else the run's: every target records it
    try:
        for code, side in zip(languages, ("source", "target")):
            if code is not None:
                check_code(code, side)
    except ValueError as e:
        raise UsageError(str(e)) from None
    recorded = run_languages(args.checkpoint) or (None, None)
    languages = tuple(given or found for given, found in zip(languages, recorded))
    if args.to == "argos" and None in languages:
        raise UsageError("--to argos needs --source-lang and --target-lang (ISO 639 codes such as en, de): a "
                         "package names its language pair, and the run's prepared data record none (aiayn "
                         "prepare --source-lang/--target-lang records them)")
    if languages.count(None) == 1:
        raise UsageError("give both --source-lang and --target-lang: the run records no language pair")
    pair = None if None in languages else languages
    modules = {"hf": ("transformers",), "ct2": ("ctranslate2",), "argos": ("ctranslate2", "spacy")}[args.to]
    require(f"aiayn export --to {args.to}", "export", modules)
    checkpoint = inference_checkpoint(Path(args.checkpoint))
    model, vocab, _ = load_for_inference(checkpoint)
    shortlist = None  # the run's, written as CTranslate2's vocabulary map where it has one
    if args.to == "ct2" and RunDir.of(checkpoint).shortlist.is_file():
        shortlist = load_shortlist(RunDir.of(checkpoint).shortlist, vocab)
    prov = provenance(checkpoint, bleu=args.bleu or "")
    if args.to == "hf":
        from aiayn.export.hf import export_hf

        export_hf(model, vocab, args.out, prov, pair)
    elif args.to == "argos":
        from aiayn.export.argos import export_argos

        export_argos(model, vocab, args.out, *languages, args.quantization, prov)
    else:
        from aiayn.decoding.aligner import run_file
        from aiayn.decoding.ct2 import VMAP_FILE
        from aiayn.export.ct2 import export_ct2

        aligner = run_file(checkpoint)  # the run's lexical aligner, which CTranslate2's engine aligns with too
        export_ct2(model, vocab, args.out, args.quantization, prov, shortlist, pair, aligner)
        notes = [f"its shortlist as {VMAP_FILE} (use_vmap)"] if shortlist is not None else []
        notes += [f"its lexical aligner as {aligner.name}"] if aligner is not None else []
    print(f"exported {checkpoint} -> {args.out} ({args.to}{', ' + args.quantization if args.quantization else ''})"
          + "".join(f"; {note}" for note in (notes if args.to == "ct2" else [])))
    return 0


# What --source-lang/--target-lang do, per target (tests/test_export.py reads the help for each).
LANGUAGES_HELP = ("The language pair is --source-lang and --target-lang, else the run's (recorded by `aiayn prepare` "
                  "or `aiayn import`); every target records it: --to argos names it in the package's metadata.json "
                  "(and needs one); --to ct2 writes it to the folder's aiayn.json, which serve reads; --to hf writes "
                  "it as tokenizer_config.json's source_lang and target_lang, as HF's Marian converter does, which "
                  "`aiayn import` reads back.")


def register(sub) -> None:
    from aiayn.export.ct2 import QUANTIZATIONS

    p = sub.add_parser("export", help="export a trained model to HF transformers, CTranslate2 or Argos Translate",
                       description="Write a model folder that HF transformers (MarianMTModel, MarianTokenizer) "
                                   "or CTranslate2 loads without aiayn, with a README model card. The float32 "
                                   "export gives aiayn's log-probs and translations (docs/export.md). Marian "
                                   "cannot hold pre-norm, learned positions or h*d_k != d_model; CTranslate2 "
                                   "takes every preset. --to argos writes an Argos Translate package (the "
                                   "CTranslate2 model, its SentencePiece model, a spaCy sentence splitter) that "
                                   "argostranslate and LibreTranslate install. --to ct2 also writes the run's "
                                   "shortlist (aiayn shortlist), if it has one, as CTranslate2's vocabulary map. "
                                   f"{LANGUAGES_HELP}")
    add_checkpoint_arg(p)
    p.add_argument("--to", required=True, choices=["hf", "ct2", "argos"],
                   help="hf: MarianMTModel folder; ct2: CTranslate2 folder; argos: Argos Translate package file")
    p.add_argument("out", type=Path, help="output folder (must not exist, or be empty); for argos a new "
                                          "NAME.argosmodel file, e.g. translate-en_de-1_0.argosmodel")
    p.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                   help="CTranslate2 weight type, ct2 and argos (default: float32)")
    add_language_args(p)
    p.add_argument("--bleu", help="a measured score to quote in the model card, e.g. '38.1 sacreBLEU, Multi30k "
                                  "test2016'")
    p.set_defaults(func=export_command)
