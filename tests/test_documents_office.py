"""Translated documents in their real consumers: LibreOffice (Debian's libreoffice-writer-nogui and
libreoffice-impress-nogui) opens every translated .docx, .pptx, .odt and .odp and shows the translation, read back
through a PDF (pdftotext, poppler-utils); the translated EPUB passes epubcheck. Skipped where they are not installed
(.ci/run installs them)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from document_samples import Recorder, make_docx, make_epub, make_odf, make_pptx

from aiayn.documents import translate_document

needs_office = pytest.mark.skipif(not (shutil.which("soffice") and shutil.which("pdftotext")),
                                  reason="LibreOffice (soffice) and pdftotext are not installed")

# what a reader must see in each translated file (its PDF's text), and source text that must be gone
SEEN = {
    "docx": ["THE HEADER LINE.", "THE QUICK BROWN FOX JUMPS OVER THE DOG.", "READ THE MANUAL NOW.",
             "OF THE REPORT.", "INSIDE THE BOX.", "A NOTE FOLLOWS1 THIS TEXT.", "A TABLE CELL.",
             "1 THE FOOTNOTE TEXT.", "THE FOOTER LINE."],
    "pptx": ["QUARTERLY RESULTS", "SALES GREW VERY FAST THIS YEAR.", "THE TABLE", "FIRST CELL", "SECOND CELL"],
    "odt": ["THE RUNNING HEADER.", "THE FIRST CHAPTER", "THE QUICK BROWN FOX. IT READS THE GUIDE DAILY.",
            "A NOTE1 STAYS HERE.", "A CELL OF THE TABLE.", "THE NOTE SAYS MORE."],
    "odp": ["THE SLIDE TITLE", "THE BODY OF THE FIRST SLIDE."],
}
GONE = ["The quick", "Quarterly", "The slide title", "header line", "table cell", "The first chapter"]


@pytest.mark.slow
@needs_office
def test_libreoffice_opens_every_translation_and_shows_it(tmp_path):
    makers = {"docx": make_docx, "pptx": make_pptx, "odt": make_odf, "odp": lambda p: make_odf(p, True)}
    outputs = []
    for ext, make in makers.items():
        src = make(tmp_path / f"source_{ext}.{ext}")
        out = tmp_path / f"translated_{ext}.{ext}"
        translate_document(src, out, Recorder(), "en", "es")
        outputs.append(out)
    profile = tmp_path / "profile"  # a profile of its own: no clash with a LibreOffice already running
    subprocess.run(["soffice", f"-env:UserInstallation=file://{profile}", "--headless", "--convert-to", "pdf",
                    "--outdir", str(tmp_path / "pdf"), *map(str, outputs)],
                   check=True, capture_output=True, timeout=300)
    for ext in makers:
        pdf = tmp_path / "pdf" / f"translated_{ext}.pdf"
        assert pdf.is_file(), f"LibreOffice did not open translated_{ext}.{ext}"
        text = " ".join(subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                                       check=True).stdout.split())
        missing = [s for s in SEEN[ext] if s not in text]
        assert not missing, (ext, text)
        assert not [s for s in GONE if s in text], (ext, text)
        if ext in ("docx", "pptx"):  # the picture is still there (pdfimages lists a page's images below its header)
            images = subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True).stdout
            assert len(images.splitlines()) > 2, (ext, images)


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("epubcheck") and shutil.which("java")), reason="epubcheck is not installed")
def test_translated_epub_passes_epubcheck(tmp_path):
    src = make_epub(tmp_path / "a.epub")
    out = tmp_path / "b.epub"

    def with_comma(sentences):  # a model that ends every sentence with a comma (the quickstart's does, at times)
        return [(t + ",", a) for t, a in Recorder()(sentences)]

    translate_document(src, out, with_comma, "en", "es")  # the table of contents' links must hold the comma
    # Debian's epubcheck is an executable jar: run it with java (binfmt may not be set up)
    done = subprocess.run(["java", "-jar", shutil.which("epubcheck"), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "0 fatals / 0 errors / 0 warnings" in done.stdout, done.stdout + done.stderr
