"""aiayn.documents and bad input: one error line naming the file and what is wrong, and nothing written."""

from __future__ import annotations

import zipfile

import pytest
from document_samples import Recorder, make_docx, make_epub, make_odf, read_entry, rewrite_zip

from aiayn.documents import DocumentLimits, translate_document
from aiayn.errors import DataError, UsageError


def refused(src, error=DataError, limits=None, out_name=None) -> str:
    """Translate src expecting `error`; check the message is one line naming the file and no output (nor a temp
    file) was left. Returns the message."""
    out = src.parent / (out_name or "out" + src.suffix)
    rec = Recorder()
    with pytest.raises(error) as e:
        translate_document(src, out, rec, "en", "es", limits)
    message = str(e.value)
    assert "\n" not in message and src.name in message
    assert not out.exists() and not [p for p in src.parent.iterdir() if p.name.startswith(".")]
    assert rec.calls == []  # refused before anything is translated
    return message


def test_corrupt_and_truncated_zips(tmp_path):
    bad = tmp_path / "a.docx"
    bad.write_bytes(b"PK\x03\x04 this is no zip")
    assert "corrupt" in refused(bad)
    good = make_docx(tmp_path / "b.docx")
    cut = tmp_path / "c.docx"
    cut.write_bytes(good.read_bytes()[:-200])
    assert "corrupt" in refused(cut)


def test_encrypted_office_files_are_refused(tmp_path):
    ole = tmp_path / "secret.docx"  # Office writes a password-protected .docx as a compound file
    ole.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600)
    assert "encrypted" in refused(ole)
    odt = make_odf(tmp_path / "secret.odt")
    manifest = read_entry(odt, "META-INF/manifest.xml").replace(
        'manifest:full-path="content.xml" manifest:media-type="text/xml"/>',
        'manifest:full-path="content.xml" manifest:media-type="text/xml"><manifest:encryption-data/>'
        '</manifest:file-entry>')
    rewrite_zip(odt, {"META-INF/manifest.xml": manifest})
    assert "encrypted" in refused(odt)


def test_an_encrypted_zip_entry_is_refused(tmp_path):
    src = make_docx(tmp_path / "a.docx")
    data = bytearray(src.read_bytes())
    at = data.find(b"PK\x01\x02")  # the first central directory record: set its "encrypted" flag
    data[at + 8] |= 1
    src.write_bytes(bytes(data))
    assert "encrypted" in refused(src)


def test_zip_bombs_and_files_over_the_limit(tmp_path):
    src = make_docx(tmp_path / "a.docx")
    rewrite_zip(src, {"word/media/zeros.bin": b"\0" * (8 << 20)})  # 8 MiB that deflate to a few kB
    assert "zip bomb" in refused(src)
    small = make_docx(tmp_path / "b.docx")
    assert "unpacks to" in refused(small, limits=DocumentLimits(max_unpacked_bytes=10_000))
    assert "over the limit" in refused(small, limits=DocumentLimits(max_file_bytes=1000))
    assert "entries" in refused(small, limits=DocumentLimits(max_entries=3))


def test_text_over_the_budget(tmp_path):
    src = tmp_path / "a.txt"
    src.write_text("A sentence of some length.\n" * 10, encoding="utf-8")
    assert "characters, over the limit of 100" in refused(src, limits=DocumentLimits(max_chars=100))


def test_unknown_and_macro_enabled_extensions(tmp_path):
    for name in ("a.pdf", "a.docm", "a.pptm", "noextension"):
        (tmp_path / name).write_bytes(b"x")
        refused(tmp_path / name, UsageError)
    src = make_docx(tmp_path / "c.docx")
    refused(src, UsageError, out_name="c.txt")  # the output keeps the input's format


def test_macros_inside_a_package_are_refused(tmp_path):
    src = make_docx(tmp_path / "a.docx")
    rewrite_zip(src, {"word/vbaProject.bin": b"\0" * 100})
    assert "macros" in refused(src)
    odt = make_odf(tmp_path / "b.odt")
    rewrite_zip(odt, {"Basic/Standard/Module1.xml": "<module/>"})
    assert "macros" in refused(odt)


BOMB = """<?xml version="1.0"?>
<!DOCTYPE w:document [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>&b;</w:t>
</w:r></w:p></w:body></w:document>"""
XXE = """<?xml version="1.0"?>
<!DOCTYPE w:document [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>&x;</w:t>
</w:r></w:p></w:body></w:document>"""


def test_xml_that_does_not_parse_or_declares_entities(tmp_path):
    for n, xml in enumerate(("<w:document><w:body>", BOMB, XXE)):
        src = make_docx(tmp_path / f"a{n}.docx")
        rewrite_zip(src, {"word/document.xml": xml})
        message = refused(src)
        assert "word/document.xml" in message and ("does not parse" in message or "entities" in message)
    page = tmp_path / "p.xhtml"
    page.write_text('<!DOCTYPE html [<!ENTITY x SYSTEM "http://example.org/">]><html><p>&x;</p></html>')
    assert "entities" in refused(page)
    broken = tmp_path / "q.xhtml"
    broken.write_text("<html><p>not closed</html>")
    assert "does not parse" in refused(broken)


def test_other_broken_inputs(tmp_path):
    epub = make_epub(tmp_path / "a.epub")
    rewrite_zip(epub, {"META-INF/rights.xml": "<rights/>"})
    assert "DRM" in refused(epub)
    wrong = make_odf(tmp_path / "b.odt")
    (tmp_path / "c.docx").write_bytes(wrong.read_bytes())  # an ODF package named .docx
    assert "not a .docx" in refused(tmp_path / "c.docx")
    srt = tmp_path / "d.srt"
    srt.write_text("1\nno timing here\nHello.\n", encoding="utf-8")
    assert "timing" in refused(srt)
    txt = tmp_path / "e.txt"
    txt.write_bytes(b"fine\nbad \xff byte\n")
    assert "line 2" in refused(txt) and "UTF-8" in refused(txt)
    with zipfile.ZipFile(tmp_path / "f.epub", "w") as z:
        z.writestr("mimetype", "application/epub+zip")
    assert "container.xml" in refused(tmp_path / "f.epub")


def test_media_are_streamed_not_held(tmp_path):
    """A package's pictures are checked and copied a MiB at a time: translating a document with 16 MiB of them
    holds a few MiB at most, and copies them byte for byte."""
    import os
    import tracemalloc

    src = make_docx(tmp_path / "a.docx")
    picture = os.urandom(16 << 20)
    rewrite_zip(src, {"word/media/image1.png": picture})
    del picture
    tracemalloc.start()
    translate_document(src, tmp_path / "b.docx", Recorder(), "en", "es")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 6 << 20, peak
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(tmp_path / "b.docx") as b:
        assert a.read("word/media/image1.png") == b.read("word/media/image1.png")


def test_a_translation_that_fails_leaves_nothing(tmp_path):
    """The engine failing (a server shutting down, a model error) leaves no output file and no temp file, and an
    existing output stays as it was."""
    def broken(sentences):
        raise RuntimeError("engine gone")

    for make, name in ((make_docx, "a.docx"), (make_odf, "a.odt"), (make_epub, "a.epub")):
        src = make(tmp_path / name)
        out = tmp_path / ("out" + src.suffix)
        with pytest.raises(RuntimeError):
            translate_document(src, out, broken, "en", "es")
        assert not out.exists()
    previous = tmp_path / "kept.odt"
    previous.write_bytes(b"previous")
    with pytest.raises(RuntimeError):
        translate_document(tmp_path / "a.odt", previous, broken, "en", "es")
    assert previous.read_bytes() == b"previous"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_strict_open_xml_is_refused(tmp_path):
    """Strict Open XML names its elements in other namespaces: refused in one line, not written back untranslated."""
    src = make_docx(tmp_path / "a.docx")
    xml = read_entry(src, "word/document.xml").replace("http://schemas.openxmlformats.org/wordprocessingml/2006/main",
                                                       "http://purl.oclc.org/ooxml/wordprocessingml/main")
    rewrite_zip(src, {"word/document.xml": xml})
    assert "Strict Open XML" in refused(src)
