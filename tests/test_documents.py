"""aiayn.documents: each format's text translated whole, every part a reader sees, the rest kept as it was.

The translator is a stand-in with exact word alignments (document_samples.Recorder: words upper-cased one to one, or
reversed crosswise), so where each formatting lands can be worked out by hand; each test reads the output back
with the format's own library (python-docx, python-pptx) or as XML."""

from __future__ import annotations

import re
import zipfile

import pytest
from document_samples import Recorder, make_docx, make_epub, make_odf, make_pptx, read_entry

from aiayn.documents import FORMATS, open_document, translate_document
from aiayn.documents.blocks import BlockBuilder, distribute, nest, proportional
from aiayn.markup.spans import Block, Span


def test_one_call_translates_every_sentence_of_a_document(tmp_path):
    src = make_docx(tmp_path / "a.docx")
    rec = Recorder()
    chars = translate_document(src, tmp_path / "b.docx", rec, "en", "es")
    assert len(rec.calls) == 1 and chars > 100
    sentences = rec.sentences
    # a sentence split across runs (bookmark, proofing mark, bold) is one sentence; the field's result in it
    assert "The quick brown fox jumps over the dog." in sentences
    assert "Page 7 of the report." in sentences
    assert sentences.count("Inside the box.") == 1  # the text box Word holds twice: translated once
    for part in ("The header line.", "The footer line.", "The footnote text.", "A table cell.", "a box of words",
                 "A note follows this text.", "We keep new words here."):
        assert part in sentences
    assert not any("old words" in s or "PAGE" in s for s in sentences)  # deletions and field codes untouched


def test_docx_runs_links_fields_and_changes(tmp_path):
    import docx

    src = make_docx(tmp_path / "a.docx")
    out = tmp_path / "b.docx"
    translate_document(src, out, Recorder(reverse=True), "en", "es")
    d = docx.Document(out)
    first = d.paragraphs[0]
    assert first.text == "DOG. THE OVER JUMPS FOX BROWN QUICK THE"
    assert [r.text for r in first.runs if r.bold] == ["JUMPS"]  # the bold word's translation, wherever it went
    xml = read_entry(out, "word/document.xml")
    assert re.search(r'<w:hyperlink r:id="rIdLink"><w:r><w:rPr><w:rStyle w:val="Hyperlink"/></w:rPr>'
                     r'<w:t>MANUAL THE</w:t></w:r></w:hyperlink>', xml)
    assert read_entry(out, "word/_rels/document.xml.rels") == read_entry(src, "word/_rels/document.xml.rels")
    assert '<w:instrText xml:space="preserve"> PAGE </w:instrText>' in xml and "<w:t>7</w:t>" in xml
    assert "<w:delText>old words</w:delText>" in xml and "<w:t>WORDS NEW</w:t></w:r></w:ins>" in xml
    assert 'w:name="mark"' in xml and "proofErr" not in xml
    assert xml.count("<w:t>BOX. THE INSIDE</w:t>") == 2  # mc:Choice and mc:Fallback alike
    assert 'descr="WORDS OF BOX A"' in xml
    assert '<w:lang w:val="es"/>' in xml and "en-US" not in xml
    assert "<w:footnoteReference w:id=\"1\"/>" in xml
    for t in re.findall(r"<w:t( [^>]*)?>([^<]*)</w:t>", xml):  # every w:t with edge spaces keeps them
        assert t[1] == t[1].strip() or 'xml:space="preserve"' in t[0]
    assert "FOOTNOTE" in read_entry(out, "word/footnotes.xml")
    assert 'w:val="es"' in read_entry(out, "word/styles.xml")
    assert '<w:themeFontLang w:val="es"' in read_entry(out, "word/settings.xml")
    assert d.sections[0].header.paragraphs[0].text == "LINE. HEADER THE"


def test_docx_keeps_spaces_at_run_edges(tmp_path):
    body = ('<w:p><w:r><w:t xml:space="preserve">Say </w:t></w:r><w:r><w:rPr><w:i/></w:rPr><w:t>hello</w:t></w:r>'
            '<w:r><w:t xml:space="preserve"> to all.</w:t></w:r></w:p>')
    src = make_docx(tmp_path / "a.docx", body)
    out = tmp_path / "b.docx"
    translate_document(src, out, Recorder(), "en", "es")
    xml = read_entry(out, "word/document.xml")
    assert '<w:t xml:space="preserve">SAY </w:t>' in xml and '<w:t xml:space="preserve"> TO ALL.</w:t>' in xml
    assert "<w:i/></w:rPr><w:t>HELLO</w:t>" in xml


def test_pptx_slides_notes_tables_fields_and_alt_text(tmp_path):
    import pptx

    src = make_pptx(tmp_path / "a.pptx")
    out = tmp_path / "b.pptx"
    rec = Recorder()
    translate_document(src, out, rec, "en", "es")
    assert "Slide 1" in rec.sentences  # the slide-number field's text is in the sentence, kept
    prs = pptx.Presentation(out)
    one, two = prs.slides
    assert one.shapes.title.text == "QUARTERLY RESULTS"
    body = one.placeholders[1].text_frame.paragraphs[0]
    assert body.runs[1].text == "VERY" and body.runs[1].font.bold
    assert "".join(r.text for r in body.runs) == "SALES GREW VERY FAST THIS YEAR."
    assert one.notes_slide.notes_text_frame.text == "MENTION THE NEW MARKETS."
    assert two.shapes.title.text == "THE TABLE"
    table = next(s for s in two.shapes if s.has_table).table
    assert table.cell(0, 1).text == "SECOND CELL"
    xml = read_entry(out, "ppt/slides/slide1.xml")
    assert 'type="slidenum"><a:rPr lang="es"/><a:t>1</a:t></a:fld>' in xml
    assert 'descr="A BOX WITH THE SLIDE NUMBER"' in xml and 'lang="en-US"' not in xml


def test_odt_spans_links_spaces_notes_and_changes(tmp_path):
    src = make_odf(tmp_path / "a.odt")
    out = tmp_path / "b.odt"
    rec = Recorder()
    translate_document(src, out, rec, "en", "es")
    assert "Removed sentence." not in rec.sentences and "It reads the guide daily." in rec.sentences
    xml = read_entry(out, "content.xml")
    assert ('THE QUICK <text:span text:style-name="T1">BROWN</text:span> FOX. <text:s/>IT READS '
            '<text:a xlink:type="simple" xlink:href="https://example.org/">THE GUIDE</text:a> DAILY.') in xml
    assert re.search(r"A NOTE<text:note [^>]*><text:note-citation>1</text:note-citation><text:note-body>"
                     r"<text:p>THE NOTE SAYS MORE.</text:p></text:note-body></text:note> STAYS HERE.", xml)
    assert "<text:p>Removed sentence.</text:p>" in xml and "<text:change text:change-id=\"ct1\"/>" in xml
    assert "<text:p>NAME:<text:tab/>VALUE<text:line-break/>NEXT LINE</text:p>" in xml
    assert "Name: value next line" in rec.sentences  # a tab and a break part words
    assert 'fo:language="es"' in xml and "fo:country" not in xml
    assert "THE RUNNING HEADER." in read_entry(out, "styles.xml")
    assert "<dc:language>es</dc:language>" in read_entry(out, "meta.xml")
    with zipfile.ZipFile(out) as z:
        first = z.infolist()[0]
        assert first.filename == "mimetype" and first.compress_type == zipfile.ZIP_STORED


def test_odp_slides_notes_and_alt_text(tmp_path):
    src = make_odf(tmp_path / "a.odp", presentation=True)
    out = tmp_path / "b.odp"
    translate_document(src, out, Recorder(), "en", "es")
    xml = read_entry(out, "content.xml")
    for text in ("<text:p>THE SLIDE TITLE</text:p>", '<text:span text:style-name="T1">FIRST</text:span> SLIDE.',
                 "<svg:title>A PICTURE OF A CAT</svg:title>", "<text:p>SPEAK SLOWLY HERE.</text:p>"):
        assert text in xml


def test_epub_chapters_navigation_toc_and_language(tmp_path):
    src = make_epub(tmp_path / "a.epub")
    out = tmp_path / "b.epub"
    translate_document(src, out, Recorder(), "en", "es")
    chapter = read_entry(out, "OEBPS/chapter1.xhtml")
    assert "<p>IT WAS A <b>DARK</b> NIGHT.&#160;THE RAIN FELL.</p>" in chapter
    assert 'alt="A DARK SKY"' in chapter and 'xml:lang="es" lang="es"' in chapter
    assert "&nbsp;" not in chapter
    assert '<a href="chapter1.xhtml">THE FIRST CHAPTER</a>' in read_entry(out, "OEBPS/nav.xhtml")
    ncx = read_entry(out, "OEBPS/toc.ncx")
    assert "<text>THE FIRST CHAPTER</text>" in ncx and "<text>THE SMALL BOOK</text>" in ncx
    opf = read_entry(out, "OEBPS/content.opf")
    assert "<dc:language>es</dc:language>" in opf and "<dc:title>THE SMALL BOOK</dc:title>" in opf
    with zipfile.ZipFile(out) as z:
        assert z.infolist()[0].filename == "mimetype" and z.infolist()[0].compress_type == zipfile.ZIP_STORED
        assert z.read("OEBPS/x.png") == zipfile.ZipFile(src).read("OEBPS/x.png")


def test_srt_sentences_across_cues_keep_their_cues_and_timings(tmp_path):
    src = tmp_path / "a.srt"
    src.write_text("1\n00:00:01,000 --> 00:00:02,500\nI think that we\n\n2\n00:00:02,600 --> 00:00:04,000\n"
                   "should go <i>now</i>.\n\n3\n00:00:05,000 --> 00:00:06,000\n- Yes.\n- No!\n", encoding="utf-8")
    rec = Recorder()
    translate_document(src, tmp_path / "b.srt", rec, "en", "es")
    assert rec.sentences == ["I think that we should go now.", "Yes.", "No!"]
    assert (tmp_path / "b.srt").read_text(encoding="utf-8") == (
        "1\n00:00:01,000 --> 00:00:02,500\nI THINK THAT WE\n\n2\n00:00:02,600 --> 00:00:04,000\n"
        "SHOULD GO <i>NOW</i>.\n\n3\n00:00:05,000 --> 00:00:06,000\n- YES.\n- NO!\n")
    translate_document(src, tmp_path / "c.srt", Recorder(reverse=True), "en", "es")
    cues = (tmp_path / "c.srt").read_text(encoding="utf-8").split("\n\n")
    assert cues[0].splitlines()[2] and cues[1].splitlines()[2]  # reordered words: every cue keeps some, in order
    assert " ".join([cues[0].splitlines()[2], cues[1].splitlines()[2]]) == "<i>NOW</i>. GO SHOULD WE THAT THINK I"


MARKDOWN = """---
title: Keep me
---
# A title here

Some **bold words** and `code()` with a [link](https://example.org/x "T") and
a [reference][ref] on two lines.

```python
print("not translated")
```

    indented code stays

- first item
- second item with ![an image](img.png)

| Name | Value |
|------|-------|
| one  | two   |

[ref]: https://example.org/ref
"""


def test_markdown_translates_only_text_and_keeps_the_layout(tmp_path):
    src = tmp_path / "a.md"
    src.write_text(MARKDOWN, encoding="utf-8")
    rec = Recorder()
    translate_document(src, tmp_path / "b.md", rec, "en", "es")
    out = (tmp_path / "b.md").read_text(encoding="utf-8")
    assert out == MARKDOWN.replace("# A title here", "# A TITLE HERE").replace(
        "Some **bold words** and `code()` with a [link](https://example.org/x \"T\") and\na [reference][ref] on two "
        "lines.", "SOME **BOLD WORDS** AND `code()` WITH A [LINK](https://example.org/x \"T\") AND\nA [REFERENCE][ref]"
                  " ON TWO LINES.").replace("- first item", "- FIRST ITEM").replace(
        "- second item with ![an image](img.png)", "- SECOND ITEM WITH ![AN IMAGE](img.png)").replace(
        "| Name | Value |", "| NAME | VALUE |").replace("| one  | two   |", "| ONE  | TWO   |")
    assert not any("Keep me" in s or "not translated" in s or "indented" in s for s in rec.sentences)


def test_text_lines_alone_and_prose_wrapped_over_lines(tmp_path):
    """Short lines (a title, a list) are translated one by one; a sentence wrapped over lines (a long line or a
    next line in lower case) is one sentence, cut back into as many lines."""
    src = tmp_path / "a.txt"
    src.write_text("A Title\nShopping list\n\n  This first line of a long paragraph is long enough\nto wrap, and "
                   "goes\non here.\n\nSecond paragraph.\r\n", encoding="utf-8")
    rec = Recorder()
    translate_document(src, tmp_path / "b.txt", rec, "en", "es")
    assert rec.sentences == ["A Title", "Shopping list",
                             "This first line of a long paragraph is long enough to wrap, and goes on here.",
                             "Second paragraph."]
    assert (tmp_path / "b.txt").read_bytes() == (b"A TITLE\nSHOPPING LIST\n\n  THIS FIRST LINE OF A LONG PARAGRAPH IS "
                                                 b"LONG ENOUGH\nTO WRAP, AND GOES\nON HERE.\n\nSECOND PARAGRAPH.\r\n")


def test_html_and_xhtml_go_through_the_markup_layer(tmp_path):
    src = tmp_path / "a.html"
    src.write_text('<p lang="en">Hello <b>big</b> world.&nbsp;Bye.</p>', encoding="utf-8")
    translate_document(src, tmp_path / "b.html", Recorder(), "en", "de")
    assert (tmp_path / "b.html").read_text() == '<p lang="de">HELLO <b>BIG</b> WORLD.&nbsp;BYE.</p>'
    src = tmp_path / "a.xhtml"
    src.write_text('<html xmlns="http://www.w3.org/1999/xhtml"><body><p>Hi.&#160;There.</p></body></html>')
    translate_document(src, tmp_path / "b.xhtml", Recorder(), "en", "de")
    assert "<p>HI.&#160;THERE.</p>" in (tmp_path / "b.xhtml").read_text()  # XML has no &nbsp;
    old = tmp_path / "c.xhtml"  # EPUB 2's XHTML 1.1: its DOCTYPE declares HTML's entities (never fetched)
    old.write_text('<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">'
                   '<html xmlns="http://www.w3.org/1999/xhtml"><body><p>Caf&eacute; open.</p></body></html>')
    translate_document(old, tmp_path / "d.xhtml", Recorder(), "en", "de")
    assert "<p>CAFÉ OPEN.</p>" in (tmp_path / "d.xhtml").read_text()


def test_every_supported_extension_has_a_reader():
    assert set(FORMATS) == {".txt", ".md", ".srt", ".html", ".htm", ".xhtml", ".docx", ".pptx", ".odt", ".odp",
                            ".epub"}


def test_builder_merges_runs_split_only_by_points():
    """Two runs of one formatting around a bookmark are one span (the bookmark inside it), so a word split across
    them is carried as one word; nest() gives the tree the formats rebuild from."""
    b = BlockBuilder()
    b.text("a ")
    b.open("bold")
    b.text("wo")
    b.close()
    b.void("mark")
    b.open("bold")
    b.text("rd")
    b.close()
    b.text(" b")
    block = b.block()
    assert block == Block("a word b", [Span(2, 6, "wrap", "bold"), Span(4, 4, "void", "mark")])
    tree = nest(block)
    assert tree[0] == "a " and tree[2] == " b"
    assert tree[1].span.key == "bold" and tree[1].children[0] == "wo" and tree[1].children[1].span.key == "mark"


def test_distribute_keeps_parts_in_order_and_fills_empty_ones():
    assert distribute([(0, "A B"), (None, " "), (1, "C")], [3, 1]) == ["A B", "C"]
    # the second part's words came first: the first part would be left empty, so the words are shared 3:1
    assert distribute([(1, "C"), (None, " "), (0, "A B")], [3, 1]) == ["C A", "B"]
    assert proportional("a b c d", [1, 1]) == ["a b", "c d"]
    assert proportional("a b", [10, 1, 1]) == ["a b", "", ""]  # fewer words than parts: by proportion alone
    assert proportional("a b c", [0, 5, 0]) == ["a", "b", "c"]


def test_open_document_reads_without_translating(tmp_path):
    doc = open_document(make_odf(tmp_path / "a.odt"))
    assert any(b.text == "It reads the guide daily." or "the guide" in b.text for b in doc.blocks)


class FakeEngine:
    """An engine as aiayn.markup.engines reads one: translate_nbest(sentences, alignments=True)."""

    def __init__(self) -> None:
        self.recorder = Recorder()

    def translate_nbest(self, sentences, alignments=False):
        from types import SimpleNamespace

        return [[SimpleNamespace(text=t, alignment=a if alignments else None)] for t, a in self.recorder(sentences)]


def test_translate_file_command_uses_the_engine_and_the_languages(tmp_path, capsys):
    from argparse import Namespace

    from aiayn.documents.command import is_document, translate_file_command
    from aiayn.errors import UsageError

    assert is_document("r.docx") and is_document("R.EPUB") and is_document("x.docm")
    assert not is_document("r.txt") and not is_document(None) and not is_document("-") and not is_document("a.pdf")
    src = make_odf(tmp_path / "a.odt")
    args = Namespace(input=str(src), output=str(tmp_path / "b.odt"), checkpoint=[str(tmp_path)], source_lang="en",
                     target_lang="fr", print_alignment=False, print_scores=None, prefix=None, buffer_size=None,
                     nbest=1, no_progress=False)
    engine = FakeEngine()
    assert translate_file_command(args, engine) == 0
    assert len(engine.recorder.calls) == 1
    assert "<dc:language>fr</dc:language>" in read_entry(tmp_path / "b.odt", "meta.xml")
    assert "a.odt" in capsys.readouterr().err
    with pytest.raises(UsageError, match="--output"):
        translate_file_command(Namespace(**{**vars(args), "output": None}), engine)
    with pytest.raises(UsageError, match="--print-alignment"):
        translate_file_command(Namespace(**{**vars(args), "print_alignment": True}), engine)
    with pytest.raises(UsageError, match="language pair"):  # no flags, and the folder records no pair
        translate_file_command(Namespace(**{**vars(args), "source_lang": None, "target_lang": None}), engine)


def test_docx_reads_edge_spaces_as_word_does_and_leaves_field_only_paragraphs(tmp_path):
    """A w:t without xml:space="preserve" shows no edge spaces in Word, so none are translated; a paragraph whose
    only text is a field's result (a page number) has nothing to translate and is left as it was."""
    body = ('<w:p><w:r><w:t>Two </w:t></w:r><w:r><w:t xml:space="preserve"> words.</w:t></w:r></w:p>'
            '<w:p><w:fldSimple w:instr=" PAGE "><w:r><w:t>3</w:t></w:r></w:fldSimple></w:p>')
    src = make_docx(tmp_path / "a.docx", body)
    rec = Recorder()
    translate_document(src, tmp_path / "b.docx", rec, "en", "es")
    assert "Two words." in rec.sentences and not any("3" in s for s in rec.sentences)
    assert '<w:fldSimple w:instr=" PAGE "><w:r><w:t>3</w:t></w:r></w:fldSimple>' in read_entry(
        tmp_path / "b.docx", "word/document.xml")


def test_odp_master_page_prompts_are_left_alone(tmp_path):
    src = make_odf(tmp_path / "a.odp", presentation=True)
    styles = read_entry(src, "styles.xml").replace(
        '<style:master-page style:name="Default"/>',
        '<style:master-page style:name="Default"><draw:frame><draw:text-box><text:p>Click to edit the title'
        '</text:p></draw:text-box></draw:frame></style:master-page>')
    from document_samples import rewrite_zip

    rewrite_zip(src, {"styles.xml": styles})
    rec = Recorder()
    translate_document(src, tmp_path / "b.odp", rec, "en", "es")
    assert "Click to edit the title" not in rec.sentences and "The slide title" in rec.sentences


def test_docx_main_part_is_found_by_its_relationship(tmp_path):
    """Word Online names its main part word/document2.xml: the package's _rels/.rels says where it is."""
    import docx
    from document_samples import rewrite_zip

    src = make_docx(tmp_path / "a.docx")
    renamed = {"word/document.xml": None, "word/document2.xml": read_entry(src, "word/document.xml"),
               "word/_rels/document.xml.rels": None,
               "word/_rels/document2.xml.rels": read_entry(src, "word/_rels/document.xml.rels"),
               "_rels/.rels": read_entry(src, "_rels/.rels").replace("word/document.xml", "word/document2.xml"),
               "[Content_Types].xml": read_entry(src, "[Content_Types].xml").replace("/word/document.xml",
                                                                                     "/word/document2.xml")}
    rewrite_zip(src, renamed)
    translate_document(src, tmp_path / "b.docx", Recorder(), "en", "es")
    assert docx.Document(tmp_path / "b.docx").paragraphs[1].text == "READ THE MANUAL NOW."


def test_markdown_code_span_across_a_line_break_is_read_whole(tmp_path):
    src = tmp_path / "a.md"
    src.write_text("Call `load(model,\nvocab)` to start.\nIt returns `x`.\n", encoding="utf-8")
    rec = Recorder()
    translate_document(src, tmp_path / "b.md", rec, "en", "es")
    assert rec.sentences == ["Call load(model, vocab) to start.", "It returns x."]
    assert (tmp_path / "b.md").read_text() == "CALL `load(model, vocab)` TO START.\nIT RETURNS `x`.\n"


def test_comments_charts_and_smartart_are_translated(tmp_path):
    from document_samples import rewrite_zip

    a = "http://schemas.openxmlformats.org/drawingml/2006/main"
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    src = make_docx(tmp_path / "a.docx")
    rewrite_zip(src, {
        "word/comments.xml": f'<w:comments xmlns:w="{w}"><w:comment w:id="0"><w:p><w:r><w:t>Check this figure.'
                             '</w:t></w:r></w:p></w:comment></w:comments>',
        "word/charts/chart1.xml": f'<c:chartSpace xmlns:c="urn:x" xmlns:a="{a}"><c:title><c:tx><c:rich><a:p><a:r>'
                                  '<a:t>Sales by year</a:t></a:r></a:p></c:rich></c:tx></c:title></c:chartSpace>'})
    pres = make_pptx(tmp_path / "a.pptx")
    rewrite_zip(pres, {"ppt/diagrams/data1.xml": f'<dgm:dataModel xmlns:dgm="urn:y" xmlns:a="{a}"><a:p><a:r>'
                                                 '<a:t>First step</a:t></a:r></a:p></dgm:dataModel>'})
    rec = Recorder()
    translate_document(src, tmp_path / "b.docx", rec, "en", "es")
    translate_document(pres, tmp_path / "b.pptx", rec, "en", "es")
    assert "<w:t>CHECK THIS FIGURE.</w:t>" in read_entry(tmp_path / "b.docx", "word/comments.xml")
    assert "<a:t>SALES BY YEAR</a:t>" in read_entry(tmp_path / "b.docx", "word/charts/chart1.xml")
    assert "<a:t>FIRST STEP</a:t>" in read_entry(tmp_path / "b.pptx", "ppt/diagrams/data1.xml")


def test_documents_import_no_torch(tmp_path):
    """A server's file worker or a CTranslate2 user translates documents without loading torch."""
    import subprocess
    import sys

    from helpers import REPO

    code = ("import sys\nsys.path.insert(0, 'tests')\nfrom pathlib import Path\n"
            "from document_samples import Recorder, make_odf\nfrom aiayn.documents import translate_document\n"
            f"p = make_odf(Path({str(tmp_path / 'a.odt')!r}))\n"
            f"translate_document(p, Path({str(tmp_path / 'b.odt')!r}), Recorder(), 'en', 'es')\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False" and (tmp_path / "b.odt").is_file()


def test_a_long_link_does_not_lend_its_style_to_the_text_around_it(tmp_path):
    """The paragraph's own formatting is the one most characters outside links have: a word the translation adds
    outside every element is not styled as a link."""
    body = ('<w:p><w:r><w:t xml:space="preserve">See </w:t></w:r><w:hyperlink r:id="rIdLink"><w:r><w:rPr>'
            '<w:rStyle w:val="Hyperlink"/></w:rPr><w:t>the very long manual of the whole project</w:t></w:r>'
            '</w:hyperlink><w:r><w:t xml:space="preserve"> now.</w:t></w:r></w:p>')
    src = make_docx(tmp_path / "a.docx", body)
    doc = open_document(src)
    assert [s.key for s in doc.blocks[0].spans] == [("c", 0), ("r", 1)]  # the link and its run; the rest is plain


def test_docx_content_controls_smart_tags_tabs_and_breaks(tmp_path):
    body = ('<w:p><w:r><w:t xml:space="preserve">Dear </w:t></w:r><w:sdt><w:sdtPr><w:alias w:val="Name"/></w:sdtPr>'
            '<w:sdtContent><w:r><w:t>customer name</w:t></w:r></w:sdtContent></w:sdt><w:r><w:t>,</w:t></w:r>'
            '<w:r><w:tab/><w:t>see</w:t><w:br/><w:t xml:space="preserve">the </w:t></w:r><w:smartTag w:uri="urn:x" '
            'w:element="place"><w:r><w:t>city hall</w:t></w:r></w:smartTag><w:r><w:t>.</w:t></w:r></w:p>')
    src = make_docx(tmp_path / "a.docx", body)
    rec = Recorder()
    translate_document(src, tmp_path / "b.docx", rec, "en", "es")
    xml = read_entry(tmp_path / "b.docx", "word/document.xml")
    assert '<w:sdt><w:sdtPr><w:alias w:val="Name"/></w:sdtPr><w:sdtContent><w:r><w:t>CUSTOMER NAME' in xml
    assert '<w:smartTag w:uri="urn:x" w:element="place"><w:r><w:t>CITY HALL</w:t></w:r></w:smartTag>' in xml
    assert "<w:r><w:tab/></w:r>" in xml and "<w:r><w:br/></w:r>" in xml


def test_auto_source_language_is_detected_from_the_documents_text(tmp_path):
    src = make_odf(tmp_path / "a.odt")
    seen = []

    def detect(text: str) -> str:
        seen.append(text)
        return "en"

    translate_document(src, tmp_path / "b.odt", Recorder(), "auto", "es", detect=detect)
    assert len(seen) == 1 and seen[0].startswith("The first chapter\nThe quick brown fox.")


def test_code_styles_are_kept(tmp_path):
    """Word's and LibreOffice's code styles: a paragraph of one (HTML Preformatted, Preformatted Text, through an
    automatic style's parent in ODF) is left as it is, a run of one (Source Text, HTML Code) kept verbatim."""
    from document_samples import rewrite_zip

    body = ('<w:p><w:pPr><w:pStyle w:val="HTMLPreformatted"/></w:pPr><w:r><w:t>print("hi")</w:t></w:r></w:p>'
            '<w:p><w:r><w:t xml:space="preserve">Call </w:t></w:r><w:r><w:rPr><w:rStyle w:val="SourceText"/></w:rPr>'
            '<w:t>load</w:t></w:r><w:r><w:rPr><w:rStyle w:val="SourceText"/></w:rPr><w:t>_all()</w:t></w:r>'
            '<w:r><w:t xml:space="preserve"> first.</w:t></w:r></w:p>')
    src = make_docx(tmp_path / "a.docx", body)
    rec = Recorder()
    translate_document(src, tmp_path / "b.docx", rec, "en", "es")
    xml = read_entry(tmp_path / "b.docx", "word/document.xml")
    assert "<w:t>print(\"hi\")</w:t>" in xml and not any("print" in s for s in rec.sentences)
    assert "Call load_all() first." in rec.sentences
    assert '<w:rStyle w:val="SourceText"/></w:rPr><w:t>load_all()</w:t>' in xml and "CALL" in xml
    odt = make_odf(tmp_path / "a.odt")
    content = read_entry(odt, "content.xml").replace(
        "</office:automatic-styles>", '<style:style style:name="P9" style:family="paragraph" '
        'style:parent-style-name="Preformatted_20_Text"/></office:automatic-styles>').replace(
        "<text:h text:outline-level=\"1\">The first chapter</text:h>",
        '<text:p text:style-name="P9">x = load()</text:p><text:p>Run <text:span text:style-name="Source_20_Text">'
        "make<text:s/>all</text:span> now.</text:p>")
    rewrite_zip(odt, {"content.xml": content})
    translate_document(odt, tmp_path / "b.odt", rec, "en", "es")
    out = read_entry(tmp_path / "b.odt", "content.xml")
    assert '<text:p text:style-name="P9">x = load()</text:p>' in out
    assert 'RUN <text:span text:style-name="Source_20_Text">make all</text:span> NOW.' in out


def test_characters_xml_cannot_hold_are_dropped_from_translations(tmp_path):
    """A model may put out a control character or a lone surrogate: the XML formats drop it, and stay valid."""
    def odd(sentences):
        return [("X\x0bY\ud800 " + s, None) for s in sentences]

    for make, name in ((make_docx, "a.docx"), (make_odf, "a.odt"), (make_epub, "a.epub"), (make_pptx, "a.pptx")):
        src = make(tmp_path / name)
        out = tmp_path / ("b" + src.suffix)
        translate_document(src, out, odd, "en", "es")
        texts = [b.text for b in open_document(out).blocks]  # the output parses again
        assert any(t.startswith("X Y ") for t in texts) and not any("\x0b" in t or "\ud800" in t for t in texts)


def test_markdown_and_subtitles_drop_elements_left_empty(tmp_path):
    """A translation may align no word to an emphasis: Markdown writes no empty ** ** pair (nor an empty link), an
    image keeps its place; a subtitle writes no empty <i></i>."""
    from aiayn.documents.blocks import Node
    from aiayn.documents.markdown import render_markdown
    from aiayn.documents.srt import render_srt

    empty_bold = Node(Span(0, 0, "wrap", ("md", "**", "**")))
    image = Node(Span(0, 0, "wrap", ("md", "![", "](a.png)")))
    assert render_markdown(["A ", empty_bold, "B ", image]) == "A B ![](a.png)"
    assert render_srt(["Hi ", Node(Span(0, 0, "wrap", ("tag", "<i>", "</i>"))), "there"]) == "Hi there"


def test_an_element_around_a_whole_block_stays_around_the_whole_translation():
    """A link that is a whole table-of-contents entry, or a bold paragraph, holds the whole translation, its
    punctuation included, even where the alignment leaves a word outside it."""
    from aiayn.documents.blocks import whole_stays_whole

    source = Block("The first chapter", [Span(0, 17, "wrap", "a"), Span(4, 9, "wrap", "b")])
    out = whole_stays_whole(source, Block("El primer capítulo,", [Span(0, 18, "wrap", "a"), Span(3, 9, "wrap", "b")]))
    assert out.spans == [Span(0, 19, "wrap", "a"), Span(3, 9, "wrap", "b")]
    cut = Block("Uno. Dos.", [Span(0, 4, "wrap", "a"), Span(5, 9, "wrap", "a")])  # cut at a sentence end: as it is
    assert whole_stays_whole(Block("One. Two.", [Span(0, 9, "wrap", "a")]), cut) == cut
    assert whole_stays_whole(Block("A b", [Span(2, 3, "wrap", "b")]), Block("X y", [])) == Block("X y", [])


def test_random_runs_keep_every_words_formatting(tmp_path):
    """Paragraphs of random words in random formatting (bold, italic, both; changing between words), their runs also
    split at random inside words as editors leave them: translated word for word, every letter keeps the formatting
    its word had, and no word is split or glued."""
    import random

    import docx

    rng = random.Random(7)
    words = "the quick brown fox jumps over seven lazy dogs while wizards judge boxing matches quietly".split()
    d = docx.Document()
    want = []
    for _ in range(40):
        kinds = [(None, None), (True, None), (None, True), (True, True)]
        styles = [rng.choice(kinds) for _ in range(rng.randint(3, 9))]
        chosen = [rng.choice(words) for _ in styles]
        p = d.add_paragraph()
        for k, (word, (bold, italic)) in enumerate(zip(chosen, styles)):
            text = word + ("." if k == len(chosen) - 1 else " ")
            cut = rng.randrange(1, len(word)) if rng.random() < 0.3 else len(text)
            for piece in (text[:cut], text[cut:]):  # one run, or the word split in two runs of one formatting
                if piece:
                    r = p.add_run(piece)
                    r.bold, r.italic = bold, italic
        want.append([(w.upper(), bool(b), bool(i)) for w, (b, i) in zip(chosen, styles)])
    d.save(tmp_path / "a.docx")
    translate_document(tmp_path / "a.docx", tmp_path / "b.docx", Recorder(), "en", "es")
    for p, expected in zip(docx.Document(tmp_path / "b.docx").paragraphs, want):
        letters = [(c, bool(r.bold), bool(r.italic)) for r in p.runs for c in r.text if c.isalpha()]
        assert letters == [(c, b, i) for w, b, i in expected for c in w]
        assert p.text.rstrip(".").split() == [w for w, _, _ in expected]
