"""Word (.docx) and PowerPoint (.pptx) files: every part a reader sees, translated paragraph by paragraph.

docx: the body (tables, text boxes, both copies of a text box Word keeps in mc:AlternateContent, which come back
translated alike), headers, footers, footnotes, endnotes, comments, charts and SmartArt; pptx: slides (titles,
bodies, tables, text boxes), speaker notes, charts and SmartArt. Pictures' and shapes' alt text (descr, title) is
translated too. Every other part (relationships, media, styles, settings) is copied byte for byte, but the language
of the text (w:lang, DrawingML's lang) is set to the target. Paragraphs: aiayn.documents.ooxml_text.
"""

from __future__ import annotations

import re
from pathlib import Path

from lxml import etree

from aiayn.documents.ooxml_text import DRAWING, WORD, W, read_paragraph, set_language, write_paragraph
from aiayn.documents.safe import (
    DocumentLimits,
    parse_xml,
    read_zip,
    refuse_macros,
    serialize_xml,
    write_zip,
    xml_safe,
)
from aiayn.errors import DataError
from aiayn.markup.spans import Block

_WORD_PARTS = re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml")
_DRAWING_PARTS = re.compile(r"(word|ppt)/(charts/chart\d*|diagrams/(data|drawing)\d*)\.xml"
                            r"|ppt/(slides/slide\d+|notesSlides/notesSlide\d+)\.xml")
_MAIN = {".docx": "word/document.xml", ".pptx": "ppt/presentation.xml"}
_ALT_TEXT = ("descr", "title")


class OfficeDocument:
    """A .docx or .pptx read for translation: `blocks`, then write(path, translated blocks, target language)."""

    def __init__(self, path: Path, limits: DocumentLimits) -> None:
        self.path = path
        self.infos, self.entries = read_zip(path, limits)
        refuse_macros(path, list(self.entries), self.entries.get("[Content_Types].xml"))
        main = self._main_part()
        words = {name for name in self.entries if _WORD_PARTS.fullmatch(name)} | (
            {main} if path.suffix.lower() == ".docx" else set())
        self.trees = {name: parse_xml(self.entries[name], f"{path}: {name}") for name in self.entries
                      if name in words or _DRAWING_PARTS.fullmatch(name)}  # (the parts only: media stay unread)
        self.blocks: list[Block] = []
        self.plans: list = []
        for name, tree in self.trees.items():
            self._read_part(tree, WORD if name in words else DRAWING)

    def _main_part(self) -> str:
        """The main part the package's relationships name (word/document.xml, ppt/presentation.xml as a rule)."""
        kind = self.path.suffix.lower()
        main = _MAIN[kind]
        if "_rels/.rels" in self.entries:
            rels = parse_xml(self.entries["_rels/.rels"], f"{self.path}: _rels/.rels")
            for rel in rels.getroot():
                if (rel.get("Type") or "").endswith("/officeDocument"):
                    main = (rel.get("Target") or main).lstrip("/")
        if main not in self.entries or not main.startswith(_MAIN[kind].split("/")[0] + "/"):
            raise DataError(f"{self.path}: not a {kind} file (it has no {_MAIN[kind]})")
        if b"purl.oclc.org/ooxml/" in self.entries[main][:4096]:
            raise DataError(f"{self.path}: the file is in Strict Open XML, which is not read; save it as an "
                            f"ordinary {kind} (Word or PowerPoint's default format)")
        return main

    def _read_part(self, tree, dialect) -> None:
        for p in list(tree.iter(dialect.q("p"))):
            found = read_paragraph(p, dialect)
            if found:
                self.blocks.append(found[0])
                self.plans.append(found[1])
        for element in tree.iter():
            if isinstance(element.tag, str) and etree.QName(element).localname in ("docPr", "cNvPr"):
                for attr in _ALT_TEXT:
                    value = element.get(attr)
                    if value and any(ch.isalnum() for ch in value):
                        self.blocks.append(Block(value, []))
                        self.plans.append((element, attr))

    def write(self, path_out: Path, translated: list[Block], target_lang: str) -> None:
        for block, plan in zip(translated, self.plans):
            if isinstance(plan, tuple):
                plan[0].set(plan[1], xml_safe(block.text))
            else:
                write_paragraph(block, plan, target_lang)
        for name, tree in self.trees.items():
            set_language(tree.getroot(), target_lang)
            self.entries[name] = serialize_xml(tree)
        for name, setter in (("word/styles.xml", _word_default_language), ("word/settings.xml", _theme_language),
                             ("ppt/presentation.xml", set_language)):
            if name in self.entries:
                tree = parse_xml(self.entries[name], f"{self.path}: {name}")
                setter(tree.getroot(), target_lang)
                self.entries[name] = serialize_xml(tree)
        write_zip(path_out, self.infos, self.entries)


def _theme_language(settings, lang: str) -> None:
    """settings.xml: the language Word picks theme fonts for (w:themeFontLang's w:val) becomes the target's."""
    for node in settings.iter(f"{{{W}}}themeFontLang"):
        if node.get(f"{{{W}}}val") is not None:
            node.set(f"{{{W}}}val", lang)


def _word_default_language(styles, lang: str) -> None:
    """styles.xml: every w:lang to the target, and the document default's language set (added if absent), so text
    typed later is checked in the target language."""
    set_language(styles, lang)
    defaults = styles.find(f"{{{W}}}docDefaults")
    if defaults is None:
        return
    rpr_default = defaults.find(f"{{{W}}}rPrDefault")
    if rpr_default is None:
        rpr_default = etree.SubElement(defaults, f"{{{W}}}rPrDefault")
        defaults.insert(0, rpr_default)
    rpr = rpr_default.find(f"{{{W}}}rPr")
    if rpr is None:
        rpr = etree.SubElement(rpr_default, f"{{{W}}}rPr")
    if rpr.find(f"{{{W}}}lang") is None:
        etree.SubElement(rpr, f"{{{W}}}lang").set(f"{{{W}}}val", lang)

