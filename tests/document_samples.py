# ruff: noqa: E501  (the XML of the samples is written as Word and ODF write it: one element after another)
"""Small documents of every format, built in code for the documents tests: python-docx and python-pptx make real
Word and PowerPoint packages (their styles, settings, relationships), into which the body is written as Word and
PowerPoint write it (runs split by bookmarks and proofing marks, links, fields, tracked changes, text boxes kept twice
in mc:AlternateContent); ODF and EPUB packages are written by hand as the specifications lay them out.

A translator for the tests: `upper` (every word upper-cased, aligned one to one) and `reverse` (the words in reverse
order, aligned crosswise), both recording the sentences they were given."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


class Recorder:
    """translate(sentences) -> [(translation, alignment)], recording every call."""

    def __init__(self, reverse: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.reverse = reverse

    def __call__(self, sentences: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
        self.calls.append(list(sentences))
        out = []
        for s in sentences:
            words = [w.upper() for w in s.split()]
            if self.reverse:
                out.append((" ".join(reversed(words)), [(i, len(words) - 1 - i) for i in range(len(words))]))
            else:
                out.append((" ".join(words), [(i, i) for i in range(len(words))]))
        return out

    @property
    def sentences(self) -> list[str]:
        return [s for call in self.calls for s in call]


def rewrite_zip(path: Path, changes: dict[str, bytes | str | None]) -> None:
    """Replace, add (bytes or str) or drop (None) entries of a zip, keeping the others in order."""
    with zipfile.ZipFile(path) as z:
        entries = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in entries:
            if info.filename in changes:
                new = changes.pop(info.filename)
                if new is None:
                    continue
                data = new.encode() if isinstance(new, str) else new
            z.writestr(info.filename, data)
        for name, data in changes.items():
            if data is not None:
                z.writestr(name, data.encode() if isinstance(data, str) else data)


def read_entry(path: Path, name: str) -> str:
    with zipfile.ZipFile(path) as z:
        return z.read(name).decode("utf-8")


# -- Word --------------------------------------------------------------------------------------------------------

BODY = """
<w:p><w:r><w:t xml:space="preserve">The quick </w:t></w:r><w:bookmarkStart w:id="0" w:name="mark"/><w:r><w:t>br</w:t></w:r>\
<w:proofErr w:type="spellStart"/><w:r><w:t xml:space="preserve">own fox </w:t></w:r><w:bookmarkEnd w:id="0"/>\
<w:r><w:rPr><w:b/><w:lang w:val="en-US"/></w:rPr><w:t>jumps</w:t></w:r><w:r><w:t xml:space="preserve"> over the dog.</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">Read </w:t></w:r><w:hyperlink r:id="rIdLink"><w:r><w:rPr><w:rStyle w:val="Hyperlink"/></w:rPr>\
<w:t>the manual</w:t></w:r></w:hyperlink><w:r><w:t xml:space="preserve"> now.</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">Page </w:t></w:r><w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve"> PAGE </w:instrText></w:r>\
<w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>7</w:t></w:r><w:r><w:fldChar w:fldCharType="end"/></w:r>\
<w:r><w:t xml:space="preserve"> of the report.</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">We keep </w:t></w:r><w:del w:id="1" w:author="A" w:date="2026-01-01T00:00:00Z"><w:r><w:delText>old words</w:delText></w:r></w:del>\
<w:ins w:id="2" w:author="A" w:date="2026-01-01T00:00:00Z"><w:r><w:t>new words</w:t></w:r></w:ins><w:r><w:t xml:space="preserve"> here.</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">A box </w:t></w:r><w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wp:anchor distT="0" distB="0" distL="0" distR="0" simplePos="0" relativeHeight="1" behindDoc="0" locked="0" layoutInCell="1" allowOverlap="1">\
<wp:simplePos x="0" y="0"/><wp:positionH relativeFrom="column"><wp:posOffset>0</wp:posOffset></wp:positionH><wp:positionV relativeFrom="paragraph"><wp:posOffset>0</wp:posOffset></wp:positionV>\
<wp:extent cx="1828800" cy="457200"/><wp:effectExtent l="0" t="0" r="0" b="0"/><wp:wrapSquare wrapText="bothSides"/><wp:docPr id="1" name="Text Box 1" descr="a box of words"/>\
<wp:cNvGraphicFramePr/><a:graphic xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"><a:graphicData uri="http://schemas.microsoft.com/office/word/2010/wordprocessingShape">\
<wps:wsp><wps:cNvSpPr txBox="1"/><wps:spPr><a:xfrm><a:off x="0" y="0"/><a:ext cx="1828800" cy="457200"/></a:xfrm><a:prstGeom prst="rect"><a:avLst/></a:prstGeom></wps:spPr>\
<wps:txbx><w:txbxContent><w:p><w:r><w:t>Inside the box.</w:t></w:r></w:p></w:txbxContent></wps:txbx><wps:bodyPr/></wps:wsp></a:graphicData></a:graphic></wp:anchor></w:drawing></mc:Choice>\
<mc:Fallback><w:pict><v:shape id="tb1" style="width:144pt;height:36pt" type="#_x0000_t202"><v:textbox><w:txbxContent><w:p><w:r><w:t>Inside the box.</w:t></w:r></w:p>\
</w:txbxContent></v:textbox></v:shape></w:pict></mc:Fallback></mc:AlternateContent></w:r><w:r><w:t xml:space="preserve">stands here.</w:t></w:r></w:p>
<w:p><w:r><w:t>A note follows</w:t></w:r><w:r><w:rPr><w:rStyle w:val="FootnoteReference"/></w:rPr><w:footnoteReference w:id="1"/></w:r><w:r><w:t xml:space="preserve"> this text.</w:t></w:r></w:p>
<w:tbl><w:tblPr><w:tblW w:w="0" w:type="auto"/></w:tblPr><w:tblGrid><w:gridCol w:w="4000"/></w:tblGrid><w:tr><w:tc><w:tcPr><w:tcW w:w="4000" w:type="dxa"/></w:tcPr>\
<w:p><w:r><w:t>A table cell.</w:t></w:r></w:p></w:tc></w:tr></w:tbl>
"""

FOOTNOTES = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:footnotes xmlns:w="{W_NS}"><w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>
<w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:r><w:continuationSeparator/></w:r></w:p></w:footnote>
<w:footnote w:id="1"><w:p><w:r><w:footnoteRef/></w:r><w:r><w:t xml:space="preserve"> The footnote text.</w:t></w:r></w:p></w:footnote></w:footnotes>"""

_NAMESPACES = ('xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
               'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" '
               'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
               'xmlns:v="urn:schemas-microsoft-com:vml" '
               'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" ')


def tiny_png(side: int = 8) -> bytes:
    """A valid side x side grey PNG (for pictures in the samples)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * side for _ in range(side))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def make_docx(path: Path, body: str = BODY) -> Path:
    """A Word document: python-docx's package (a header and footer set, a picture), the body above written into
    it before the picture's paragraph, a footnote part and a hyperlink relationship added."""
    import io

    import docx
    from docx.shared import Inches

    d = docx.Document()
    d.add_picture(io.BytesIO(tiny_png()), width=Inches(1))
    d.sections[0].header.paragraphs[0].text = "The header line."
    d.sections[0].footer.paragraphs[0].text = "The footer line."
    d.save(path)
    doc = read_entry(path, "word/document.xml")
    doc = re.sub(r"<w:document ", "<w:document " + _NAMESPACES, doc, count=1) if "xmlns:wps" not in doc else doc
    picture = re.search(r"<w:p>(?:(?!<w:p>).)*?<w:drawing>.*?</w:p>", doc, flags=re.S).group(0)
    doc = re.sub(r"<w:body>.*?(<w:sectPr)", lambda m: "<w:body>" + body + picture + m.group(1), doc, count=1,
                 flags=re.S)
    rels = read_entry(path, "word/_rels/document.xml.rels").replace(
        "</Relationships>",
        '<Relationship Id="rIdLink" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'hyperlink" Target="https://example.org/manual" TargetMode="External"/>'
        '<Relationship Id="rIdNotes" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'footnotes" Target="footnotes.xml"/></Relationships>')
    types = read_entry(path, "[Content_Types].xml").replace(
        "</Types>", '<Override PartName="/word/footnotes.xml" ContentType="application/vnd.openxmlformats-'
                    'officedocument.wordprocessingml.footnotes+xml"/></Types>')
    rewrite_zip(path, {"word/document.xml": doc, "word/_rels/document.xml.rels": rels,
                       "[Content_Types].xml": types, "word/footnotes.xml": FOOTNOTES})
    return path


# -- PowerPoint --------------------------------------------------------------------------------------------------

def make_pptx(path: Path) -> Path:
    """Two slides (a title and bullets with a bold word; a table), speaker notes, a slide-number field, alt text."""
    import pptx
    from pptx.util import Inches

    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Quarterly results"
    body = slide.placeholders[1].text_frame
    body.text = "Sales grew "
    run = body.paragraphs[0].add_run()
    run.text = "very"
    run.font.bold = True
    more = body.paragraphs[0].add_run()
    more.text = " fast this year."
    slide.notes_slide.notes_text_frame.text = "Mention the new markets."
    import io

    slide.shapes.add_picture(io.BytesIO(tiny_png()), Inches(6), Inches(5), Inches(1), Inches(1))
    box = slide.shapes.add_textbox(Inches(1), Inches(5), Inches(4), Inches(1))
    box.text_frame.text = "Slide "
    slide2 = prs.slides.add_slide(prs.slide_layouts[5])
    slide2.shapes.title.text = "The table"
    table = slide2.shapes.add_table(1, 2, Inches(1), Inches(2), Inches(6), Inches(1)).table
    table.cell(0, 0).text = "First cell"
    table.cell(0, 1).text = "Second cell"
    prs.save(path)
    xml = read_entry(path, "ppt/slides/slide1.xml")
    field = ('<a:fld id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}" type="slidenum"><a:rPr lang="en-US"/>'
             '<a:t>1</a:t></a:fld>')
    xml = xml.replace("<a:t>Slide </a:t></a:r>", "<a:t>Slide </a:t></a:r>" + field, 1)
    xml = re.sub(r'(<p:cNvPr id="\d+" name="TextBox[^"]*")', r'\1 descr="a box with the slide number"', xml, count=1)
    rewrite_zip(path, {"ppt/slides/slide1.xml": xml})
    return path


# -- OpenDocument ------------------------------------------------------------------------------------------------

_ODF_NS = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
           'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
           'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
           'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
           'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
           'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
           'xmlns:xlink="http://www.w3.org/1999/xlink" '
           'xmlns:dc="http://purl.org/dc/elements/1.1/" '
           'xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" '
           'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0" '
           'xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0" '
           'office:version="1.3"')

ODT_BODY = """<office:text>
<text:tracked-changes><text:changed-region text:id="ct1"><text:deletion><office:change-info><dc:creator>A</dc:creator>\
<dc:date>2026-01-01T00:00:00</dc:date></office:change-info><text:p>Removed sentence.</text:p></text:deletion>\
</text:changed-region></text:tracked-changes>
<text:h text:outline-level="1">The first chapter</text:h>
<text:p text:style-name="P1">The quick <text:span text:style-name="T1">brown</text:span> fox.<text:s text:c="2"/>It \
reads <text:a xlink:type="simple" xlink:href="https://example.org/">the guide</text:a> daily.</text:p>
<text:p>A note<text:note text:id="n1" text:note-class="footnote"><text:note-citation>1</text:note-citation>\
<text:note-body><text:p>The note says more.</text:p></text:note-body></text:note> stays here.</text:p>
<text:p>Old text <text:change text:change-id="ct1"/>remains.</text:p>
<text:p>Name:<text:tab/>value<text:line-break/>next line</text:p>
<table:table table:name="T"><table:table-column/><table:table-row><table:table-cell><text:p>A cell of the table.</text:p>\
</table:table-cell></table:table-row></table:table>
</office:text>"""

ODP_BODY = """<office:presentation>
<draw:page draw:name="page1" draw:master-page-name="Default">
<draw:frame presentation:class="title" svg:x="1cm" svg:y="1cm" svg:width="20cm" svg:height="3cm"><draw:text-box>\
<text:p>The slide title</text:p></draw:text-box></draw:frame>
<draw:frame svg:x="1cm" svg:y="5cm" svg:width="20cm" svg:height="8cm"><draw:text-box><text:p>The body of the \
<text:span text:style-name="T1">first</text:span> slide.</text:p></draw:text-box><svg:title>A picture of a cat</svg:title></draw:frame>
<presentation:notes><draw:frame presentation:class="notes" svg:x="1cm" svg:y="14cm" svg:width="20cm" svg:height="8cm">\
<draw:text-box><text:p>Speak slowly here.</text:p></draw:text-box></draw:frame></presentation:notes>
</draw:page>
</office:presentation>"""


def make_odf(path: Path, presentation: bool = False) -> Path:
    kind = "presentation" if presentation else "text"
    mimetype = f"application/vnd.oasis.opendocument.{kind}"
    auto = ('<office:automatic-styles><style:style style:name="T1" style:family="text"><style:text-properties '
            'fo:font-weight="bold" fo:language="en" fo:country="US"/></style:style></office:automatic-styles>')
    content = (f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content {_ODF_NS}>{auto}<office:body>'
               f'{ODP_BODY if presentation else ODT_BODY}</office:body></office:document-content>')
    master = ('<office:master-styles><style:master-page style:name="Standard" style:page-layout-name="pm1">'
              '<style:header><text:p>The running header.</text:p></style:header></style:master-page>'
              '</office:master-styles>') if not presentation else (
        '<office:master-styles><style:master-page style:name="Default"/></office:master-styles>')
    styles = (f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-styles {_ODF_NS}><office:automatic-styles>'
              '<style:page-layout style:name="pm1"/></office:automatic-styles>'
              f'{master}</office:document-styles>')
    meta = (f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-meta {_ODF_NS}><office:meta>'
            '<dc:language>en</dc:language></office:meta></office:document-meta>')
    manifest = ('<?xml version="1.0" encoding="UTF-8"?>\n<manifest:manifest xmlns:manifest="urn:oasis:names:tc:'
                f'opendocument:xmlns:manifest:1.0" manifest:version="1.3"><manifest:file-entry manifest:full-path="/" '
                f'manifest:media-type="{mimetype}"/>' + "".join(
                    f'<manifest:file-entry manifest:full-path="{n}" manifest:media-type="text/xml"/>'
                    for n in ("content.xml", "styles.xml", "meta.xml")) + "</manifest:manifest>")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), mimetype, compress_type=zipfile.ZIP_STORED)
        for name, data in (("content.xml", content), ("styles.xml", styles), ("meta.xml", meta),
                           ("META-INF/manifest.xml", manifest)):
            z.writestr(name, data)
    return path


# -- EPUB --------------------------------------------------------------------------------------------------------

def _xhtml(title: str, body: str) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" '
            'xmlns:epub="http://www.idpf.org/2007/ops" xml:lang="en" lang="en">'
            f'<head><title>{title}</title></head><body>{body}</body></html>\n')


def make_epub(path: Path) -> Path:
    """An EPUB 3 book that passes epubcheck: one chapter, the navigation document and an EPUB 2 NCX."""
    opf = ('<?xml version="1.0" encoding="UTF-8"?>\n<package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
           'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
           '<dc:identifier id="id">urn:uuid:12345678-1234-1234-1234-123456789012</dc:identifier>'
           '<dc:title>The small book</dc:title><dc:language>en</dc:language>'
           '<meta property="dcterms:modified">2026-01-01T00:00:00Z</meta></metadata><manifest>'
           '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
           '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
           '<item id="c1" href="chapter1.xhtml" media-type="application/xhtml+xml"/></manifest>'
           '<spine toc="ncx"><itemref idref="c1"/></spine></package>')
    nav = _xhtml("Contents", '<nav epub:type="toc" id="toc"><h1>Contents</h1><ol><li><a href="chapter1.xhtml">'
                             'The first chapter</a></li></ol></nav>')
    chapter = _xhtml("The first chapter", '<h1>The first chapter</h1><p>It was a <b>dark</b> night.&#160;The '
                                          'rain fell.</p><p><img src="x.png" alt="a dark sky"/></p>')
    ncx = ('<?xml version="1.0" encoding="UTF-8"?>\n<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1"'
           ' xml:lang="en"><head><meta name="dtb:uid" content="urn:uuid:12345678-1234-1234-1234-123456789012"/></head>'
           '<docTitle><text>The small book</text></docTitle><navMap><navPoint id="p1" playOrder="1"><navLabel>'
           '<text>The first chapter</text></navLabel><content src="chapter1.xhtml"/></navPoint></navMap></ncx>')
    container = ('<?xml version="1.0" encoding="UTF-8"?>\n<container version="1.0" xmlns="urn:oasis:names:tc:'
                 'opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" '
                 'media-type="application/oebps-package+xml"/></rootfiles></container>')
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"\x00\x00")) + chunk(b"IEND", b""))
    opf = opf.replace('</manifest>', '<item id="img" href="x.png" media-type="image/png"/></manifest>')
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        for name, data in (("META-INF/container.xml", container), ("OEBPS/content.opf", opf),
                           ("OEBPS/nav.xhtml", nav), ("OEBPS/toc.ncx", ncx), ("OEBPS/chapter1.xhtml", chapter),
                           ("OEBPS/x.png", png)):
            z.writestr(name, data)
    return path
