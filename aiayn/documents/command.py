"""`aiayn translate --input report.docx --output report.es.docx`: a document translated by the command's engine.

aiayn/cli/translate.py asks is_document(args.input) and, when it is one, check_document_args(args) (before loading a
model) and translate_file_command(args, engine) with the engine it opened with alignments (any engine with
translate_nbest). A .txt input stays the
command's own line-by-line job; every other format of aiayn.documents.FORMATS is a document.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiayn.documents.formats import FORMATS, MACRO_ENABLED
from aiayn.errors import UsageError

LINE_FORMATS = (".txt",)  # what `aiayn translate` reads line by line, as it always has


def is_document(path: str | Path | None) -> bool:
    """Whether `aiayn translate --input PATH` translates PATH as a document (by its extension)."""
    if path is None or str(path) == "-":
        return False
    suffix = Path(path).suffix.lower()
    return suffix not in LINE_FORMATS and (suffix in FORMATS or suffix in MACRO_ENABLED)


# flags that shape the line-by-line output, and what they would mean for a document
_LINE_ONLY = {"print_alignment": "--print-alignment", "print_scores": "--print-scores", "prefix": "--prefix",
              "buffer_size": "--buffer-size", "glossary": "--glossary"}


def check_document_args(args: argparse.Namespace) -> None:
    """The flags a document cannot take, refused in one line before any model is loaded."""
    from aiayn.documents.document import format_of

    if args.output in (None, "-"):
        raise UsageError(f"--input {args.input}: a document is written whole to a file: give --output FILE"
                         f"{Path(args.input).suffix}")
    for name, flag in _LINE_ONLY.items():
        if getattr(args, name, None) not in (None, False):
            raise UsageError(f"{flag} is for text translated line by line, not for a document ({args.input})")
    if getattr(args, "nbest", 1) not in (None, 1):
        raise UsageError(f"--nbest is for text translated line by line, not for a document ({args.input})")
    format_of(args.input)


def translate_file_command(args: argparse.Namespace, engine) -> int:
    """Translate the document args.input into args.output (same format, written whole) with `engine` (opened with
    alignments, where it gives them). Languages: the pair the model's run records (--source-lang/--target-lang where
    a caller's args have them)."""
    from aiayn.documents.document import translate_document
    from aiayn.markup.engines import translate_fn

    check_document_args(args)
    source, target = _languages(args)
    chars = translate_document(args.input, args.output, translate_fn(engine), source, target)
    if not getattr(args, "no_progress", False):
        print(f"translated {args.input} ({chars} characters, {source} -> {target}) into {args.output}",
              file=sys.stderr)
    return 0


def _languages(args: argparse.Namespace) -> tuple[str, str]:
    """(source, target): the flags where given, else the model's recorded pair."""
    source, target = getattr(args, "source_lang", None), getattr(args, "target_lang", None)
    if source and target:
        return source, target
    from aiayn.data.folder import run_languages

    checkpoint = args.checkpoint[0] if isinstance(args.checkpoint, list) else args.checkpoint
    pair = run_languages(checkpoint)
    if pair is None:
        raise UsageError(f"{checkpoint}: its run records no language pair, which a document needs (sentence rules, "
                         "the language written into the file); record it with aiayn prepare (or aiayn import) "
                         "--source-lang/--target-lang")
    return source or pair[0], target or pair[1]
