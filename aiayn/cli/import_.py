"""`aiayn import`: an HF MarianMTModel folder (an OPUS-MT model, or aiayn's own HF export) -> an aiayn run directory
(aiayn.export.marian; docs/import.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn.cli.common import add_language_args
from aiayn.errors import UsageError


def import_command(args: argparse.Namespace) -> int:
    from aiayn.data.folder import run_languages
    from aiayn.export.marian import import_run
    from aiayn.languages import pair_record

    try:
        languages = pair_record(args.source_lang, args.target_lang)
    except ValueError as e:
        raise UsageError(str(e)) from None
    checkpoint, cfg = import_run(args.folder, args.out, languages)
    pair = run_languages(args.out)
    said = (f"{pair[0]} -> {pair[1]}{'' if languages else ' (as the folder names them)'}" if pair else
            "none recorded (the folder names no pair: give --source-lang and --target-lang)")
    print(f"imported {args.folder} -> {args.out} ({cfg.n_enc_layers}+{cfg.n_dec_layers} layers, d_model "
          f"{cfg.d_model}, {cfg.n_heads} heads, {cfg.activation}, {cfg.vocab_size:,} pieces; languages {said}): "
          f"{checkpoint}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("import", help="import an HF MarianMTModel folder (OPUS-MT) as an aiayn run",
                       description="Read a MarianMTModel folder (config.json, weights, source.spm, target.spm, "
                                   "vocab.json), e.g. a Helsinki-NLP opus-mt-* model you downloaded, and write an "
                                   "aiayn run directory that translate, serve, export, shortlist and train "
                                   "--init-from take. aiayn never downloads it: fetch the folder yourself, e.g. "
                                   "`huggingface-cli download Helsinki-NLP/opus-mt-en-de --local-dir opus-mt-en-de`. "
                                   "The run records its language pair (serve and export read it): "
                                   "--source-lang/--target-lang, else the folder's tokenizer_config.json "
                                   "(source_lang, target_lang), else a folder name such as opus-mt-en-de or en-de. "
                                   "Every file is checked before anything is written: a model_type other than "
                                   "marian, weights that are not the model config.json describes (a layer more or "
                                   "less, another d_model, a tensor missing or unknown), a damaged weights file, a "
                                   "pytorch_model.bin holding pickled objects other than tensors (never run), a "
                                   "junk source.spm or target.spm are each one error line naming the file; so are "
                                   "untied or separate source/target embeddings, unscaled embeddings, an activation "
                                   "other than swish or relu (docs/import.md). Nothing is left at --out on failure.")
    p.add_argument("--from", dest="source_format", required=True, choices=["hf"],
                   help="the folder's format: hf (a transformers MarianMTModel folder)")
    p.add_argument("folder", type=Path, help="the model folder to read")
    p.add_argument("--out", type=Path, required=True, help="the run directory to write (new, or an empty folder)")
    add_language_args(p)
    p.set_defaults(func=import_command)
