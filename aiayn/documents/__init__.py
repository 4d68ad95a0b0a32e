"""Documents translated whole, each in its own format: .txt, .md, .srt, .html/.xhtml, .docx, .pptx, .odt, .odp, .epub.

A reading guide, from the entry point down:

    document.py     translate_document(path_in, path_out, translate, source_lang, target_lang, limits): the format
                    from the extension, the checks, one translation call, an atomic write; FORMATS, format_of,
                    document_chars, text_sample (for a detector)
    formats.py      the extensions and the module reading each (imports nothing)
    command.py      `aiayn translate --input FILE.docx`: is_document, translate_file_command(args, engine)
    blocks.py       what the formats share: BlockBuilder (a walk -> Block), translate_all, nest (a translated Block
                    -> a tree to rebuild from), distribute (a block cut back into lines or cues)
    ooxml.py        .docx and .pptx packages: which parts, alt text, the language settings
    ooxml_text.py   a w:p or a:p paragraph as a Block, and back (runs, links, fields, text boxes, tracked changes)
    odf.py          .odt and .odp (text:p/text:h, text:span, text:a, text:s, notes)
    epub.py         .html/.xhtml pages (aiayn.markup.html) and .epub books (OPF, nav, NCX)
    srt.py          subtitles: sentences across cues, cut back into the cues
    markdown.py     Markdown written back as it was, only its text changed
    text.py         plain text by paragraph, and the line-based formats' shared parts
    safe.py         untrusted input: bounded zips, XML without entities or network, macros refused, DocumentLimits

Spans and blocks are aiayn.markup's; this package never imports torch.
"""

from __future__ import annotations

_EXPORTS = {"translate_document": "document", "open_document": "document", "document_chars": "document",
            "format_of": "document", "FORMATS": "formats", "SUPPORTED": "formats",
            "translate_file_command": "command", "DocumentLimits": "safe"}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"aiayn.documents.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'aiayn.documents' has no attribute {name!r}")
