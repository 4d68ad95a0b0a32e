"""HTML pages (.html, .htm, .xhtml) and EPUB books (.epub), through aiayn.markup.html.

A page is aiayn.markup.html's HtmlDocument: its blocks, then its alt and title values, each a block. An .xhtml page
(and every XHTML file of a book) must parse as XML first (safely: no entity declared, no DTD fetched; HTML's named
entities such as &nbsp;, which an XHTML 1.1 DOCTYPE declares, are accepted) and is written back as XML (a no-break
space the translation holds as &#160;).

An EPUB: every XHTML file its package document (OPF) lists, the navigation document among them (nav.xhtml: the table
of contents of EPUB 3), the EPUB 2 table of contents (toc.ncx: its navLabel, docTitle and docAuthor texts), and the
book's title and description (dc:title, dc:description); dc:language and the package's and the table of contents'
xml:lang become the target's. A book protected by DRM (META-INF/rights.xml, or encryption.xml naming anything but
fonts) is refused. The zip is written with `mimetype` first and stored, as EPUB requires; every other file is copied
as it was.
"""

from __future__ import annotations

import posixpath
import re
from html.entities import name2codepoint
from pathlib import Path

from lxml import etree

from aiayn.documents.safe import (
    DocumentLimits,
    parse_xml,
    read_zip,
    refuse_macros,
    serialize_xml,
    write_zip,
    xml_safe,
)
from aiayn.documents.text import read_text
from aiayn.errors import DataError
from aiayn.files import write_text
from aiayn.markup.html import HtmlDocument
from aiayn.markup.spans import Block

OPF = "http://www.idpf.org/2007/opf"
NCX = "http://www.daisy.org/z3986/2005/ncx/"
DC = "http://purl.org/dc/elements/1.1/"
CONTAINER = "urn:oasis:names:tc:opendocument:xmlns:container"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_FONT_OBFUSCATION = ("http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC")


class Page:
    """One HTML or XHTML text: its blocks (text blocks, then its alt/title values), rendered back with render()."""

    def __init__(self, source: str, where: str, xml: bool) -> None:
        if xml:  # it must be XML; HTML's named entities count as declared (an XHTML DOCTYPE declares them)
            parse_xml(_HTML_ENTITY.sub(_numeric, source).encode("utf-8"), where, allow_doctype=True)
        self.xml = xml
        self.document = HtmlDocument(source)
        self.blocks = self.document.blocks + [Block(value) for value in self.document.attributes]

    def render(self, translated: list[Block], target_lang: str) -> str:
        n = len(self.document.blocks)
        out = self.document.render(translated[:n], [b.text for b in translated[n:]], target_lang)
        return xml_safe(out.replace("&nbsp;", "&#160;")) if self.xml else out


_HTML_ENTITY = re.compile(r"&([A-Za-z][A-Za-z0-9]*);")


def _numeric(m: re.Match) -> str:
    """An HTML named entity as a character reference, for the XML check (XML's own five stay as they are)."""
    name = m.group(1)
    if name in ("amp", "lt", "gt", "quot", "apos") or name not in name2codepoint:
        return m.group(0)
    return f"&#{name2codepoint[name]};"


class HtmlFile:
    """An .html/.htm/.xhtml file read for translation."""

    def __init__(self, path: Path, limits: DocumentLimits) -> None:
        self.page = Page(read_text(path, limits), str(path), xml=path.suffix.lower() == ".xhtml")
        self.blocks = self.page.blocks

    def write(self, path_out: Path, translated: list[Block], target_lang: str) -> None:
        write_text(path_out, self.page.render(translated, target_lang))


class EpubDocument:
    """An .epub read for translation: the pages, the NCX's labels and the OPF's title and description as blocks."""

    def __init__(self, path: Path, limits: DocumentLimits) -> None:
        self.path = path
        self.infos, self.entries = read_zip(path, limits)
        if self.entries.get("mimetype", b"").strip() != b"application/epub+zip":
            raise DataError(f"{path}: not an EPUB (its mimetype entry is not application/epub+zip)")
        refuse_macros(path, list(self.entries))
        self._refuse_drm()
        self.opf_name = self._rootfile()
        self.opf = parse_xml(self.entries[self.opf_name], f"{path}: {self.opf_name}")
        self.parts: list[tuple[str, object, int]] = []  # (entry, Page | tree, its number of blocks)
        self.blocks: list[Block] = []
        self.meta = [e for e in self.opf.iter(f"{{{DC}}}title", f"{{{DC}}}description") if (e.text or "").strip()]
        self._add("", None, [Block(e.text) for e in self.meta])
        for name, media in self._manifest():
            if media == "application/xhtml+xml":
                page = Page(self._text(name), f"{path}: {name}", xml=True)
                self._add(name, page, page.blocks)
            elif media == "application/x-dtbncx+xml":
                ncx = parse_xml(self.entries[name], f"{path}: {name}", allow_doctype=True)
                self._add(name, ncx, [Block(t.text) for t in _ncx_texts(ncx)])

    def _add(self, name: str, part, blocks: list[Block]) -> None:
        self.parts.append((name, part, len(blocks)))
        self.blocks.extend(blocks)

    def _refuse_drm(self) -> None:
        if "META-INF/rights.xml" in self.entries:
            raise DataError(f"{self.path}: the book is protected by DRM (META-INF/rights.xml); it cannot be translated")
        data = self.entries.get("META-INF/encryption.xml")
        if data is not None:
            tree = parse_xml(data, f"{self.path}: META-INF/encryption.xml")
            methods = [e.get("Algorithm") for e in tree.iter() if isinstance(e.tag, str)
                       and etree.QName(e).localname == "EncryptionMethod"]
            if any(m not in _FONT_OBFUSCATION for m in methods):
                raise DataError(f"{self.path}: the book is encrypted (DRM, META-INF/encryption.xml); "
                                "it cannot be translated")

    def _rootfile(self) -> str:
        name = "META-INF/container.xml"
        if name not in self.entries:
            raise DataError(f"{self.path}: not an EPUB (it has no {name})")
        container = parse_xml(self.entries[name], f"{self.path}: {name}")
        rootfile = container.find(f".//{{{CONTAINER}}}rootfile")
        full = rootfile.get("full-path") if rootfile is not None else None
        if not full or full not in self.entries:
            raise DataError(f"{self.path}: {name} names no package document (OPF) that the book holds")
        return full

    def _manifest(self) -> list[tuple[str, str]]:
        """The manifest's entries (zip names) and media types, in manifest order, those the book holds."""
        base = posixpath.dirname(self.opf_name)
        out = []
        for item in self.opf.iter(f"{{{OPF}}}item"):
            href = (item.get("href") or "").split("#")[0]
            name = posixpath.normpath(posixpath.join(base, _unquote(href)))
            if name in self.entries:
                out.append((name, item.get("media-type", "")))
        return out

    def _text(self, name: str) -> str:
        try:
            return self.entries[name].decode("utf-8-sig")
        except UnicodeDecodeError:
            raise DataError(f"{self.path}: {name} is not UTF-8") from None

    def write(self, path_out: Path, translated: list[Block], target_lang: str) -> None:
        at = 0
        for name, part, n in self.parts:
            mine, at = translated[at:at + n], at + n
            if part is None:
                for element, block in zip(self.meta, mine):
                    element.text = xml_safe(block.text)
            elif isinstance(part, Page):
                self.entries[name] = part.render(mine, target_lang).encode("utf-8")
            else:
                for element, block in zip(_ncx_texts(part), mine):
                    element.text = xml_safe(block.text)
                if part.getroot().get(XML_LANG) is not None:
                    part.getroot().set(XML_LANG, target_lang)
                self.entries[name] = serialize_xml(part)
        for language in self.opf.iter(f"{{{DC}}}language"):
            language.text = target_lang
        if self.opf.getroot().get(XML_LANG) is not None:
            self.opf.getroot().set(XML_LANG, target_lang)
        self.entries[self.opf_name] = serialize_xml(self.opf)
        write_zip(path_out, self.infos, self.entries, stored_first="mimetype")


def _ncx_texts(ncx) -> list:
    """The NCX's visible texts: the book's title and author, every navLabel (and pageList's labels)."""
    return [t for t in ncx.iter(f"{{{NCX}}}text") if (t.text or "").strip()]


def _unquote(href: str) -> str:
    from urllib.parse import unquote

    return unquote(href)
