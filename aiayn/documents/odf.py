"""OpenDocument text (.odt) and presentations (.odp): every text:p and text:h a reader sees, and alt text.

Body text, tables, frames and text boxes, slides and their speaker notes (presentation:notes), a text's headers and
footers (styles.xml's master pages; a presentation's master pages hold its layouts' prompts, left as they are),
footnotes and endnotes (a text:note inside a paragraph stays at its place, its own paragraphs are blocks of their
own), comments; svg:title and svg:desc (alt text). text:span and text:a are "wrap" spans (a link keeps its
xlink:href); spaces are read by ODF's rules (runs of white space collapse, text:s c="N" is N spaces) and written back
the same way; tabs, line breaks, bookmarks, frames and notes stay at their place (void spans), and a field (a page
number, a date) keeps the text it shows in the sentence (a keep span). Deleted text kept by change tracking
(text:tracked-changes) is not translated. The language of the styles (fo:language) and meta.xml's dc:language become
the target's. The zip is written with `mimetype` first and stored, as ODF requires.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from aiayn.documents.blocks import BlockBuilder, is_code_style, nest
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

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
SVG = "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
DC = "http://purl.org/dc/elements/1.1/"
_MIMETYPES = {".odt": "application/vnd.oasis.opendocument.text",
              ".odp": "application/vnd.oasis.opendocument.presentation"}
_WRAPS = ("span", "a")
_DROPPED = ("soft-page-break",)  # where a page broke when last laid out: stale once the text changes
_NOT_FIELDS = ("note", "ruby", "tab", "line-break")  # text-namespace elements whose text is not a field's
_SPACE = re.compile(r"[ \t\r\n]")


@dataclass
class OdfParagraph:
    element: etree._Element
    voids: list = field(default_factory=list)
    shells: list = field(default_factory=list)
    spacing: set = field(default_factory=set)  # voids a reader sees as white space (text:tab, text:line-break)


class _Reader:
    """A paragraph's mixed content as a Block, white space read as ODF says (collapsed; text:s is N spaces)."""

    def __init__(self, para: OdfParagraph, code) -> None:
        self.para, self.b, self.code = para, BlockBuilder(), code
        self.after_space = True  # the paragraph's start counts as a space: leading white space is dropped

    def text(self, s: str | None) -> None:
        out = []
        for ch in s or "":
            if _SPACE.match(ch):
                if not self.after_space:
                    out.append(" ")
                self.after_space = True
            else:
                out.append(ch)
                self.after_space = False
        self.b.text("".join(out))

    def walk(self, element) -> None:
        self.text(element.text)
        for child in element:
            self.child(child)
            self.text(child.tail)

    def child(self, child) -> None:
        if not isinstance(child.tag, str):
            return
        q = etree.QName(child)
        name = q.localname if q.namespace == TEXT else None
        if name in _WRAPS:
            shell = child.makeelement(child.tag, child.attrib, child.nsmap)
            self.para.shells.append(shell)
            self.b.open(("c", len(self.para.shells) - 1))
            start, free, voids = self.b.pos, self.b.free, len(self.b.spans)
            self.walk(child)
            if self.code(child.get(f"{{{TEXT}}}style-name"), False) and len(self.b.spans) == voids:
                self.b.free = free  # inline code (Source Text ...): kept verbatim
                self.b.mark_keep(start, ("code",))
            self.b.close()
        elif name == "s":
            self.b.text(" " * int(child.get(f"{{{TEXT}}}c") or 1))
            self.after_space = True
        elif name not in _DROPPED:
            self.para.voids.append(child)
            shown = "".join(child.itertext()) if name is not None and name not in _NOT_FIELDS else ""
            if shown.strip():  # a field (page number, date, reference): what it shows stays in the sentence, kept
                self.b.keep(shown, ("v", len(self.para.voids) - 1))
                self.after_space = shown[-1].isspace()
            else:
                self.b.void(("v", len(self.para.voids) - 1))
            if name in ("tab", "line-break"):  # a space in the sentence: the words on either side are two
                self.para.spacing.add(len(self.para.voids) - 1)
                self.b.text(" ")
                self.after_space = True


def read_paragraph(element, code=lambda name, paragraph: False) -> tuple[Block, OdfParagraph] | None:
    """The paragraph as a Block and what rebuilding it needs; None when it holds nothing to translate or is code.
    code(style name, paragraph?): whether a style marks code."""
    if code(element.get(f"{{{TEXT}}}style-name"), True):
        return None
    para = OdfParagraph(element)
    reader = _Reader(para, code)
    reader.walk(element)
    return (reader.b.block(), para) if reader.b.has_text() else None


class _Writer:
    """Mixed content appended to a parent: text to the last child's tail (or the parent's text), spaces as ODF needs
    them (a run of N > 1 spaces: one space and text:s c="N-1"; a space at the paragraph's start: text:s)."""

    def __init__(self) -> None:
        self.at_start = True
        self.trim = False  # a tab or line break was just written: the space standing for it is dropped

    def text(self, parent, s: str) -> None:
        for piece in re.split(r"( {2,})", s):
            if self.at_start and piece.startswith(" "):
                n = len(piece) - len(piece.lstrip(" "))
                self._spaces(parent, n)
                piece = piece[n:]
            if piece.startswith("  "):  # a run of spaces (the split's separator)
                self._append(parent, " ")
                self._spaces(parent, len(piece) - 1)
            elif piece:
                self._append(parent, piece)
                self.at_start = False

    def _spaces(self, parent, n: int) -> None:
        element = etree.SubElement(parent, f"{{{TEXT}}}s")
        if n > 1:
            element.set(f"{{{TEXT}}}c", str(n))
        self.at_start = False

    @staticmethod
    def _append(parent, s: str) -> None:
        s = xml_safe(s)
        if not s:
            return
        if len(parent):
            parent[-1].tail = (parent[-1].tail or "") + s
        else:
            parent.text = (parent.text or "") + s

    def nodes(self, parent, items: list, para: OdfParagraph) -> None:
        for item in items:
            if isinstance(item, str):
                text = item[1:] if self.trim and item.startswith(" ") else item
                self.trim = self.trim and not text
                self.text(parent, text)
                continue
            kind, key = item.span.kind, item.span.key
            if kind in ("void", "keep") and isinstance(key, tuple) and key[0] == "v":
                void = para.voids[key[1]]
                void.tail = None
                parent.append(void)
                self.trim = key[1] in para.spacing
            elif kind == "wrap" and isinstance(key, tuple) and key[0] == "c":
                shell = copy.deepcopy(para.shells[key[1]])
                parent.append(shell)
                self.nodes(shell, item.children, para)
            else:
                self.nodes(parent, item.children or ([item.span.text] if item.span.text else []), para)


def write_paragraph(block: Block, para: OdfParagraph) -> None:
    element = para.element
    for child in list(element):
        element.remove(child)
    element.text = None
    _Writer().nodes(element, nest(block), para)


class OdfDocument:
    """An .odt or .odp read for translation: `blocks`, then write(path, translated blocks, target language)."""

    def __init__(self, path: Path, limits: DocumentLimits) -> None:
        self.path = path
        self.infos, self.entries = read_zip(path, limits)
        want = _MIMETYPES[path.suffix.lower()]
        if self.entries.get("mimetype", b"").strip() != want.encode() or "content.xml" not in self.entries:
            raise DataError(f"{path}: not a {path.suffix} file (its mimetype is not {want})")
        manifest = self.entries.get("META-INF/manifest.xml", b"")
        if b"encryption-data" in manifest:
            raise DataError(f"{path}: the file is encrypted (password-protected); save it without a password")
        refuse_macros(path, list(self.entries))
        self.trees = {name: parse_xml(self.entries[name], f"{path}: {name}")
                      for name in ("content.xml", "styles.xml", "meta.xml") if name in self.entries}
        self.parents = {s.get(f"{{{STYLE}}}name"): s.get(f"{{{STYLE}}}parent-style-name")
                        for tree in self.trees.values() for s in tree.iter(f"{{{STYLE}}}style")}
        self.blocks: list[Block] = []
        self.plans: list = []
        # a text's master pages hold its headers and footers; a presentation's, the prompts of its layouts
        skipped = (f"{{{TEXT}}}tracked-changes",) + ((f"{{{STYLE}}}master-page",) if path.suffix == ".odp" else ())
        for name in ("content.xml", "styles.xml"):
            if name in self.trees:
                self._read_part(self.trees[name], skipped)

    def _read_part(self, tree, skipped: tuple[str, ...]) -> None:
        for element in list(tree.iter(f"{{{TEXT}}}p", f"{{{TEXT}}}h", f"{{{SVG}}}title", f"{{{SVG}}}desc")):
            if any(a.tag in skipped for a in element.iterancestors()):
                continue
            if etree.QName(element).namespace == SVG:
                if element.text and any(ch.isalnum() for ch in element.text) and not len(element):
                    self.blocks.append(Block(element.text, []))
                    self.plans.append(element)
                continue
            found = read_paragraph(element, self._code)
            if found:
                self.blocks.append(found[0])
                self.plans.append(found[1])

    def _code(self, name: str | None, paragraph: bool) -> bool:
        """Whether a style, or one it inherits from (automatic styles name their parent), marks code."""
        for _ in range(8):
            if name is None or is_code_style(name, paragraph):
                return name is not None
            name = self.parents.get(name)
        return False

    def write(self, path_out: Path, translated: list[Block], target_lang: str) -> None:
        for block, plan in zip(translated, self.plans):
            if isinstance(plan, OdfParagraph):
                write_paragraph(block, plan)
            else:
                plan.text = xml_safe(block.text)
        for name, tree in self.trees.items():
            _set_language(tree.getroot(), target_lang)
            self.entries[name] = serialize_xml(tree)
        write_zip(path_out, self.infos, self.entries, stored_first="mimetype")


def _set_language(root, lang: str) -> None:
    """fo:language of every style to the target (its country and RFC tag dropped: they named the source's), and
    meta.xml's dc:language."""
    for element in root.iter():
        if isinstance(element.tag, str) and element.get(f"{{{FO}}}language") is not None:
            element.set(f"{{{FO}}}language", lang)
            for attr in (f"{{{FO}}}country", f"{{{STYLE}}}rfc-language-tag"):
                element.attrib.pop(attr, None)
    for element in root.iter(f"{{{DC}}}language"):
        element.text = lang
