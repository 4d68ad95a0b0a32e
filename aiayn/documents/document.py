"""One entry point for every format: translate_document(path_in, path_out, translate, source, target, limits).

The format comes from the file name's extension (FORMATS). A document is read whole and checked first (size, zip,
XML, macros, the text budget), all its blocks are translated in one call of aiayn.markup.spans.translate_blocks (so a
server batches every sentence of the document), and the output is written atomically: a bad file raises one DataError
line naming the file and what is wrong, and leaves nothing at path_out.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from aiayn.documents.blocks import Translate, source_chars, translate_all
from aiayn.documents.formats import FORMATS, MACRO_ENABLED, SUPPORTED
from aiayn.documents.safe import DocumentLimits
from aiayn.errors import DataError, UsageError


def format_of(path: str | Path) -> str:
    """The format of a file name (its extension, lower case); an extension not supported is a UsageError."""
    suffix = Path(path).suffix.lower()
    if suffix in MACRO_ENABLED:
        raise UsageError(f"{path}: macro-enabled files ({suffix}) are not translated; save it as "
                         f"{suffix[:-1] + 'x'} without macros")
    if suffix not in FORMATS:
        raise UsageError(f"{path}: files of type {suffix or '(no extension)'} are not supported; "
                         f"supported: {', '.join(SUPPORTED)}")
    return suffix


def open_document(path: str | Path, limits: DocumentLimits | None = None):
    """The document read and checked, its blocks ready (`.blocks`), for write(path_out, translated, target)."""
    path = Path(path)
    module, name = FORMATS[format_of(path)]
    cls = getattr(importlib.import_module(f"aiayn.documents.{module}"), name)
    return cls(path, limits or DocumentLimits())


def document_chars(path: str | Path, limits: DocumentLimits | None = None) -> int:
    """The characters a document sends to translation (what its text budget counts), without translating."""
    return source_chars(open_document(path, limits).blocks)


def translate_document(path_in: str | Path, path_out: str | Path, translate: Translate, source_lang: str,
                       target_lang: str, limits: DocumentLimits | None = None,
                       detect: Callable[[str], str] | None = None) -> int:
    """Translate a document into path_out (same format; written atomically) and return the characters translated.
    translate(sentences) -> [(translation, word alignment or None)] is called once, with every sentence. source_lang
    "auto": detect(text) names it, from the document's first SAMPLE_CHARS characters of text."""
    limits = limits or DocumentLimits()
    fmt = format_of(path_in)
    if format_of(path_out) != fmt and not {format_of(path_out), fmt} <= {".html", ".htm", ".xhtml"}:
        raise UsageError(f"{path_out}: the translation of {Path(path_in).name} is written in its format: "
                         f"name the output *{fmt}")
    document = open_document(path_in, limits)
    chars = source_chars(document.blocks)
    if chars > limits.max_chars:
        raise DataError(f"{path_in}: the text is {chars} characters, over the limit of {limits.max_chars}")
    if source_lang == "auto":
        if detect is None:
            raise UsageError(f"{path_in}: the source language is auto, and nothing here detects languages")
        source_lang = detect(text_sample(document.blocks))
    translated = translate_all(document.blocks, translate, source_lang)
    document.write(Path(path_out), translated, target_lang)
    return chars


SAMPLE_CHARS = 2000


def text_sample(blocks, most: int = SAMPLE_CHARS) -> str:
    """The document's first `most` characters of text (blocks joined by newlines): what a detector reads."""
    out, size = [], 0
    for b in blocks:
        if size >= most:
            break
        if any(ch.isalnum() for ch in b.text):
            out.append(b.text.strip())
            size += len(out[-1]) + 1
    return "\n".join(out)[:most]
