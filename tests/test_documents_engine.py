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
