"""An Office Open XML paragraph (WordprocessingML's w:p, DrawingML's a:p) as one Block, and back.

A paragraph's runs become one text: the formatting most of its characters have (outside links) is the paragraph's
own, every other run's formatting (its w:rPr / a:rPr) a "wrap" span, so a sentence split across runs (by a bookmark,
a proofing mark, a spelling change) is translated whole and each formatting lands on the words aligned to the ones
it had. Containers of runs (w:hyperlink with its r:id, w:ins, w:smartTag, w:customXml, w:moveTo, an inline w:sdt)
are wrap spans too, rebuilt with their attributes, so a link's target in the part's .rels is untouched. Kept as they
are, at their place ("void" spans): tabs and breaks (a space in the sentence), drawings and text boxes (whose own
paragraphs are blocks of their own), footnote marks, bookmarks, whole fields (w:fldChar begin .. end, w:fldSimple,
a:fld: a field's code is not translated; the text it shows, a page number or a date, stays in the sentence as a
"keep" span, so "Page 7 of 9" reads whole), tracked deletions (w:del, w:moveFrom) and math. A paragraph styled as
code is left as it is, a run styled as code kept verbatim (blocks.is_code_style). Proofing marks and the
last-rendered page break are dropped (Word recomputes them). Every w:t written with edge spaces keeps them
(xml:space="preserve"); one read without that attribute shows none, as in Word."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from lxml import etree

from aiayn.documents.blocks import BlockBuilder, is_code_style, nest
from aiayn.documents.safe import xml_safe
from aiayn.markup.spans import Block

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


@dataclass(frozen=True)
class Dialect:
    ns: str
    prefix: tuple[str, ...]  # paragraph children kept first (properties)
    suffix: tuple[str, ...]  # kept last (a:endParaRPr)
    containers: tuple[str, ...]
    dropped: tuple[str, ...]

    def q(self, name: str) -> str:
        return f"{{{self.ns}}}{name}"


_SPACING = ("tab", "br", "cr")  # what a reader sees as white space between two words
WORD = Dialect(W, ("pPr",), (), ("hyperlink", "ins", "smartTag", "customXml", "moveTo", "sdt"),
               ("proofErr", "lastRenderedPageBreak", "softHyphen"))
DRAWING = Dialect(A, ("pPr",), ("endParaRPr",), (), ())


@dataclass
class Paragraph:
    """What rebuilding a paragraph needs beside its translated block: the tables its span keys index."""

    element: etree._Element
    dialect: Dialect
    prefix: list = field(default_factory=list)
    suffix: list = field(default_factory=list)
    rprs: list = field(default_factory=list)  # run properties (None: none), indexed by ("r", i) keys
    voids: list = field(default_factory=list)  # lists of elements kept as they are, ("v", i)
    shells: list = field(default_factory=list)  # container elements without their runs, ("c", i)
    spacing: set = field(default_factory=set)  # voids that a reader sees as white space (tabs, breaks)
    base: int | None = None


class _Walker:
    """Turns a paragraph's children into items: ("t", rpr index, text), ("v", pieces, shown text, spacing),
    ("open", container index), ("close",)."""

    def __init__(self, para: Paragraph) -> None:
        self.p, self.d = para, para.dialect
        self.items: list[tuple] = []
        self.rpr_index: dict[bytes, int] = {}
        self.field: list | None = None  # a complex field's elements, from its begin to its end
        self.depth = 0

    def rpr(self, run) -> int:
        rpr = run.find(self.d.q("rPr"))
        key = etree.tostring(rpr) if rpr is not None else b""
        if key not in self.rpr_index:
            self.rpr_index[key] = len(self.p.rprs)
            self.p.rprs.append(rpr)
        return self.rpr_index[key]

    def void(self, pieces: list, shown: str = "", spacing: bool = False) -> None:
        """Elements kept as they are (pieces: elements, or (run, child): the child in a run like that one); shown:
        the text a field shows, which stays in the sentence as kept text; spacing: a tab or a break, a space in the
        sentence (the words on either side are two words)."""
        self.items.append(("v", pieces, shown, spacing))

    def shown(self, elements: list) -> str:
        return "".join(t.text or "" for e in elements for t in e.iter(self.d.q("t")))

    def children(self, parent) -> None:
        for child in parent:
            if not isinstance(child.tag, str):
                continue  # comments, processing instructions: left out of the rebuilt paragraph
            name = etree.QName(child).localname if etree.QName(child).namespace == self.d.ns else None
            if self.depth and name != "r":
                self.field.append(child)
            elif name == "r":
                self.run(child)
            elif name in self.d.containers:
                self.container(child, name)
            elif name in self.d.dropped:
                continue
            else:  # fields (w:fldSimple, a:fld) keep the text they show in the sentence
                self.void([child], self.shown([child]) if name in ("fldSimple", "fld") else "", name in _SPACING)

    def container(self, child, name: str) -> None:
        shell = child.makeelement(child.tag, child.attrib, child.nsmap)
        content = child
        for c in child:
            if name == "sdt" and c.tag == self.d.q("sdtContent"):
                content = c
                shell.append(c.makeelement(c.tag, c.attrib))
            elif isinstance(c.tag, str) and c.tag.endswith("Pr"):
                shell.append(copy.deepcopy(c))
        self.p.shells.append(shell)
        self.items.append(("open", len(self.p.shells) - 1))
        self.children(content)
        self.items.append(("close",))

    def run(self, run) -> None:
        chars = run.findall(self.d.q("fldChar"))
        if chars or self.depth:
            return self.field_run(run, [c.get(self.d.q("fldCharType")) for c in chars])
        rpr = self.rpr(run)
        for c in run:
            name = etree.QName(c).localname if isinstance(c.tag, str) else None
            if name == "rPr" or name is None or name in self.d.dropped:
                continue
            if name == "t":  # Word drops a w:t's edge spaces unless it says xml:space="preserve"
                text = c.text or ""
                self.items.append(("t", rpr, text if self.d is not WORD or c.get(XML_SPACE) == "preserve"
                                   else text.strip()))
            elif name == "noBreakHyphen":
                self.items.append(("t", rpr, "\u2011"))
            else:  # a tab, a break, a drawing, a footnote mark ...: its own run with the same properties
                self.void([(run, c)], spacing=name in _SPACING)

    def field_run(self, run, types: list[str]) -> None:
        if not self.depth:
            self.field = []
        self.field.append(run)
        for t in types:
            self.depth += {"begin": 1, "end": -1}.get(t, 0)
        if self.depth <= 0:
            self.depth = 0
            self.void(self.field, self.shown(self.field))

    def finish(self) -> None:
        if self.depth:  # a field that goes on in the next paragraph: what this one holds of it stays
            self.depth = 0
            self.void(self.field, self.shown(self.field))


def read_paragraph(element, dialect: Dialect) -> tuple[Block, Paragraph] | None:
    """The paragraph as a Block and what rebuilding it needs; None when it holds no text to translate."""
    para = Paragraph(element, dialect)
    walker = _Walker(para)
    body = []
    for child in element:
        name = etree.QName(child).localname if isinstance(child.tag, str) else None
        if name in dialect.prefix and etree.QName(child).namespace == dialect.ns:
            para.prefix.append(child)
        elif name in dialect.suffix and etree.QName(child).namespace == dialect.ns:
            para.suffix.append(child)
        else:
            body.append(child)
    if dialect is WORD and is_code_style(_style(element.find(dialect.q("pPr")), "pStyle"), paragraph=True):
        return None  # a code block (Preformatted Text, HTML Preformatted ...): left as it is
    walker.children(body)
    walker.finish()
    para.base = _base_formatting(walker.items)
    if para.base is None:
        return None
    builder = _build(walker.items, para)
    return (builder.block(), para) if builder.has_text() else None


def _style(props, name: str) -> str | None:
    """The style a w:pPr / w:rPr names (w:pStyle, w:rStyle), or None."""
    node = props.find(f"{{{W}}}{name}") if props is not None else None
    return node.get(f"{{{W}}}val") if node is not None else None


def _base_formatting(items: list[tuple]) -> int | None:
    """The paragraph's own formatting: the one most characters outside links and other containers have (a link's
    style must not become the text's around it), else the most characters' anywhere; None: no text at all."""
    top: dict[int, int] = {}
    anywhere: dict[int, int] = {}
    depth = 0
    for item in items:
        depth += {"open": 1, "close": -1}.get(item[0], 0)
        if item[0] == "t":
            anywhere[item[1]] = anywhere.get(item[1], 0) + len(item[2])
            if not depth:
                top[item[1]] = top.get(item[1], 0) + len(item[2])
    sizes = top or anywhere
    return max(sizes, key=sizes.get) if sizes else None


def _build(items: list[tuple], para: Paragraph) -> BlockBuilder:
    b = BlockBuilder()
    for item in items:
        if item[0] == "t":
            if not item[2]:
                continue  # an empty w:t
            code = is_code_style(_style(para.rprs[item[1]], "rStyle"), paragraph=False)
            if item[1] == para.base and not code:
                b.text(item[2])
            else:
                b.open(("r", item[1]))
                if code:  # inline code: kept verbatim
                    b.keep(item[2], ("code",))
                else:
                    b.text(item[2])
                b.close()
        elif item[0] == "v":
            para.voids.append(item[1])
            if item[2].strip():
                b.keep(item[2], ("v", len(para.voids) - 1))  # a field's result: in the sentence, kept
            else:
                b.void(("v", len(para.voids) - 1))
            if item[3]:
                para.spacing.add(len(para.voids) - 1)
                b.text(" ")
        elif item[0] == "open":
            b.open(("c", item[1]))
        else:
            b.close()
    return b


def write_paragraph(block: Block, para: Paragraph, target_lang: str) -> None:
    """Replace the paragraph's content by the translated block, rebuilt from the paragraph's tables."""
    element = para.element
    for child in list(element):
        element.remove(child)
    out: list = list(para.prefix)
    _render(nest(block), out, para.base, para, target_lang, {"trim": False})
    out.extend(para.suffix)
    for child in out:
        element.append(child)


def _render(items: list, out: list, rpr: int, para: Paragraph, lang: str, state: dict) -> None:
    """Rebuild elements from the nested block into `out`. state["trim"]: a tab or break was just written, so the
    space that stood for it in the sentence is dropped."""
    for item in items:
        if isinstance(item, str):
            text = item[1:] if state["trim"] and item.startswith(" ") else item
            state["trim"] = state["trim"] and not text
            if text:
                out.append(_text_run(text, para, rpr, lang))
            continue
        kind, key = item.span.kind, item.span.key
        if kind in ("void", "keep") and isinstance(key, tuple) and key[0] == "v":
            out.extend(_void_elements(para.voids[key[1]], para))
            state["trim"] = key[1] in para.spacing
        elif kind == "wrap" and isinstance(key, tuple) and key[0] == "r":
            _render(item.children, out, key[1], para, lang, state)
        elif kind == "wrap" and isinstance(key, tuple) and key[0] == "c":
            shell = copy.deepcopy(para.shells[key[1]])
            inner: list = []
            _render(item.children, inner, rpr, para, lang, state)
            target = shell.find(para.dialect.q("sdtContent"))
            (target if target is not None else shell).extend(inner)
            out.append(shell)
        else:  # a span the markup layer added (kept text, a glossary term): its text in the current formatting
            _render(item.children or ([item.span.text] if item.span.text else []), out, rpr, para, lang, state)


def _void_elements(pieces: list, para: Paragraph) -> list:
    """A void's elements; a child of a run (a tab, a drawing, a footnote mark) in a run of its own like that one."""
    out = []
    for piece in pieces:
        if isinstance(piece, tuple):
            run, child = piece
            shell = run.makeelement(run.tag, run.attrib)
            rpr = run.find(para.dialect.q("rPr"))
            if rpr is not None:
                shell.append(copy.deepcopy(rpr))
            shell.append(child)
            out.append(shell)
        else:
            out.append(piece)
    return out


def _text_run(text: str, para: Paragraph, rpr: int, lang: str):
    d = para.dialect
    run = para.element.makeelement(d.q("r"), {})
    props = para.rprs[rpr]
    if props is not None:
        props = copy.deepcopy(props)
        set_language(props, lang)
        run.append(props)
    t = etree.SubElement(run, d.q("t"))
    t.text = xml_safe(text)
    if d is WORD and (text != text.strip() or "  " in text):
        t.set(XML_SPACE, "preserve")
    return run


def set_language(element, lang: str) -> None:
    """The language of run properties (and everything under them) set to the target: w:lang's w:val, DrawingML's
    lang attribute."""
    for node in element.iter(f"{{{W}}}lang"):
        node.set(f"{{{W}}}val", lang)
    for node in element.iter():
        if isinstance(node.tag, str) and node.get("lang") is not None and etree.QName(node).namespace == A:
            node.set("lang", lang)

