"""aiayn.documents with a real engine: a tiny model's translation of each sentence is what the document holds, and
`aiayn translate --input FILE.docx` writes the translated document."""

from __future__ import annotations

from helpers import labelled_run, tiny_model

from aiayn.documents import translate_document
from aiayn.markup.engines import translate_fn


def test_a_document_holds_the_engines_translation_of_each_sentence(tmp_path, copy_data):
    import docx

    from aiayn.decoding.translator import Translator

    run = labelled_run(tiny_model(120, seed=3, eos_bias=4.0), copy_data, tmp_path, ("en", "es"))
    translator = Translator.load(run)
    d = docx.Document()
    p = d.add_paragraph("alpha bravo ")
    p.add_run("charlie").bold = True
    p.add_run(" delta echo.")
    d.add_paragraph("golf hotel india.")
    d.save(tmp_path / "a.docx")
    translate_document(tmp_path / "a.docx", tmp_path / "b.docx", translate_fn(translator), "en", "es")
    out = docx.Document(tmp_path / "b.docx")
    plain = translator.translate(["alpha bravo charlie delta echo.", "golf hotel india."])
    assert [p.text for p in out.paragraphs] == plain and all(plain)
    assert sum(1 for r in out.paragraphs[0].runs if r.bold) <= 1  # the bold run comes back once (or, empty, not at all)


def test_aiayn_translate_writes_a_translated_document(tmp_path, copy_data, capsys):
    """`aiayn translate --input a.odt --output b.odt`: the format from the extension, the languages from the run,
    the document written whole; a document needs --output, and --input a.txt stays line by line."""
    import zipfile

    from document_samples import make_odf, read_entry

    from aiayn.cli import main
    from aiayn.decoding.translator import Translator

    run = labelled_run(tiny_model(120, seed=3, eos_bias=4.0), copy_data, tmp_path, ("en", "es"))
    src = make_odf(tmp_path / "a.odt")
    assert main(["translate", "--checkpoint", str(run), "--input", str(src), "--output", str(tmp_path / "b.odt")]) == 0
    content = read_entry(tmp_path / "b.odt", "content.xml")
    plain = Translator.load(run).translate(["A cell of the table."])[0]
    assert f"<text:p>{plain}</text:p>" in content and "<dc:language>es</dc:language>" in read_entry(
        tmp_path / "b.odt", "meta.xml")
    assert zipfile.ZipFile(tmp_path / "b.odt").infolist()[0].filename == "mimetype"
    assert main(["translate", "--checkpoint", str(run), "--input", str(src)]) == 2
    assert "--output" in capsys.readouterr().err
    (tmp_path / "c.txt").write_text("alpha bravo\ncharlie\n")
    assert main(["translate", "--checkpoint", str(run), "--input", str(tmp_path / "c.txt"), "--output",
                 str(tmp_path / "d.txt")]) == 0
    assert len((tmp_path / "d.txt").read_text().splitlines()) == 2
