"""serve, spans carried through a translation (aiayn.serve.pivot, aiayn.serve.batcher's alignments): numbers and
symbols come back exactly, glossary terms replace the aligned words, as `aiayn translate` does (aiayn.markup.lines);
the batcher's word alignments are each engine's own; on a server of one model and through a pivot of two."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("fastapi")

from serving import SEARCH, app_of, call, copy_translator, save_run, tiny_model  # noqa: E402

from aiayn.decoding.glossary import Glossary  # noqa: E402
from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.markup.engines import compose, pivot, translate_fn  # noqa: E402
from aiayn.markup.html import translate_html  # noqa: E402
from aiayn.markup.lines import carry_nbests, carry_text, drop_unknown, sentence_spans, term_translations  # noqa: E402
from aiayn.serve import BatchConfig, LanguagePair, Loaded, Models, create_app  # noqa: E402
from aiayn.serve.batcher import Batcher  # noqa: E402

SYMBOLS = ["2020", "12345", "©", "😀", "15 €", "3.5 %"]


@pytest.fixture(scope="module")
def setup(copy_data):
    return copy_translator(copy_data)


def _offline(engine, sentences: list[str], glossary=None) -> list[str]:
    """What `aiayn translate` writes for these sentences (aiayn.cli.translate: the engine's alignments, then the
    spans carried)."""
    glossary = glossary and Glossary.of(glossary)
    found = engine.translate_nbest(sentences, alignments=True)
    carried = carry_nbests(sentences, found, glossary, lexicon=term_translations(engine, sentences, glossary))
    return [hs[0].text for hs in carried]


def _aligned(batcher: Batcher, texts: list[str], ask: bool, nbest: int = 2):
    async def go():
        try:
            return await asyncio.gather(batcher.submit(texts[:3], nbest=nbest, alignments=ask),
                                        batcher.submit(texts[3:], nbest=nbest))
        finally:
            await batcher.close()
    return asyncio.run(go())


@pytest.mark.parametrize("engine", ["aiayn", "ct2", "argos"])
def test_the_batchers_alignments_are_the_engines(setup, copy_data, tmp_path, engine):
    """submit(..., alignments=True): every hypothesis's word links as the engine's translate_nbest(alignments=True)
    gives them (aiayn's cross-attention, CTranslate2's attention, an Argos package's), in a batch with a request that
    asks none (its translations as they were, alignment None)."""
    translator, lines = setup
    search = SearchConfig(beam=4, max_len_b=10, nbest=2, lp="power", alpha=1.0)
    if engine == "aiayn":
        chosen = Translator(translator.model, translator.vocab, search)
    else:
        pytest.importorskip("ctranslate2")
        from aiayn.decoding.ct2 import CT2Translator

        if engine == "ct2":
            from aiayn.cli import main

            run = save_run(translator.model, copy_data / "vocab.model", tmp_path / "run")
            assert main(["export", "--checkpoint", str(run), "--to", "ct2", str(tmp_path / "ct2")]) == 0
            chosen = CT2Translator(tmp_path / "ct2", search=search)
        else:
            from aiayn.export.argos import export_argos

            package = export_argos(translator.model, translator.vocab, tmp_path / "x.argosmodel", "en", "de")
            chosen = CT2Translator(package, search=search)
    texts = lines[:6]
    offline = chosen.translate_nbest(texts, alignments=True)
    asked, plain = _aligned(Batcher(chosen), texts, True)
    assert [[(h.text, h.alignment) for h in hs] for hs in asked] == \
        [[(h.text, h.alignment) for h in hs] for hs in offline[:3]]
    assert any(len(h.alignment) > 1 for hs in asked for h in hs)  # words to link, not only empty answers
    assert [[(h.text, h.alignment) for h in hs] for hs in plain] == [[(h.text, None) for h in hs] for hs in offline[3:]]


def test_a_request_aligns_only_its_texts_that_hold_spans(setup, monkeypatch):
    """submit(..., alignments=[flags]): the flagged texts' links, as alignments=True gives them, the others' None;
    through the API, a request whose one text holds a number aligns that text alone."""
    translator, lines = setup
    chosen = Translator(translator.model, translator.vocab, SearchConfig(beam=4, max_len_b=10, nbest=2, lp="power"))
    flags = [True, False, True]
    offline = chosen.translate_nbest(lines[:6], alignments=True)
    asked, _ = _aligned(Batcher(chosen), lines[:6], flags)
    assert [[h.alignment for h in hs] for hs in asked] == \
        [[h.alignment if f else None for h in hs] for hs, f in zip(offline[:3], flags)]
    aligned, real = [], Translator.align_ids
    monkeypatch.setattr(Translator, "align_ids", lambda self, s, t: aligned.extend(s) or real(self, s, t))
    texts = [lines[0], f"{lines[1]} 2020", lines[2]]
    answer, = call(app_of(translator), [("POST", "/translate", {"q": texts})])
    assert "2020" in answer.json()["translatedText"][1]
    assert aligned == translator.encode(texts[1:2])


def test_numbers_and_symbols_come_back_exactly(setup):
    """A number, a price, a year, a symbol, an emoji: the characters as sent (the copy task's vocabulary has no digit
    and no symbol: the plain model writes an invented word for each); in a sentence, the sentence's translation with
    the number carried (what `aiayn translate` writes); a plain line beside them: its plain translation."""
    translator, lines = setup
    assert all(translator.translate([s])[0] != s for s in SYMBOLS)  # what the model alone does
    sentences = [f"{lines[0]} 2020.", f"Price: 15 € {lines[1]}", f"{lines[2]} 😀 © https://x.org/a"]
    answer, single = call(app_of(translator), [("POST", "/translate", {"q": [*SYMBOLS, *sentences, lines[3]]}),
                                               ("POST", "/translate", {"q": "Price: 15 €"})])
    got = answer.json()["translatedText"]
    assert got[:len(SYMBOLS)] == SYMBOLS
    assert got[len(SYMBOLS):-1] == _offline(translator, sentences)
    assert "2020." in got[-4] and "15 €" in got[-3] and "😀" in got[-2] and "https://x.org/a" in got[-2]
    assert got[-1] == translator.translate([lines[3]])[0]
    assert single.json()["translatedText"].count("15 €") == 1


def test_glossary_terms_replace_the_aligned_words(setup, copy_data, tmp_path):
    """A term replaces the word aligned to its source term (the term appears once; the translation no more than 3
    words longer per term); the answer is `aiayn translate --glossary`'s; conflicting entries are one 422; a text
    without a term, in the same request, gets its plain translation; with sampling too; and through CTranslate2."""
    translator, lines = setup
    line = next(line for line in lines if "alpha" in line.split())
    other = next(line for line in lines if "alpha" not in line)
    glossary = [["alpha", "KILO LIMA"], ["zulu", "MIKE"]]
    plain = translator.translate([line])[0]
    assert "KILO LIMA" not in plain
    termed, conflict, empty, sampled = call(app_of(translator), [
        ("POST", "/translate", {"q": [line, other], "glossary": glossary}),
        ("POST", "/translate", {"q": line, "glossary": [["alpha", "KILO"], ["alpha", "LIMA"]]}),
        ("POST", "/translate", {"q": line, "glossary": [["alpha", " "]]}),
        ("POST", "/translate", {"q": line, "glossary": glossary, "sampling": True, "alternatives": 2}),
    ])
    with_term, without = termed.json()["translatedText"]
    assert with_term == _offline(translator, [line], glossary)[0]
    assert with_term.count("KILO LIMA") == 1 and len(with_term.split()) <= len(plain.split()) + 3
    assert without == translator.translate([other])[0]
    assert conflict.status_code == 422 and conflict.json()["error"] == (
        "the glossary gives the source term 'alpha' two target terms, 'KILO' and 'LIMA'; keep one")
    assert empty.status_code == 422 and "needs a source and a target term" in empty.json()["error"]
    assert sampled.status_code == 200
    assert all(text.count("KILO LIMA") == 1 for text in [sampled.json()["translatedText"],
                                                         *sampled.json()["alternatives"]])


def test_ctranslate2_places_glossary_terms_and_numbers(setup, copy_data, tmp_path):
    """A CTranslate2 model's answers carry numbers and terms as aiayn's do (it has no constrained search: the
    alignment places them), as `aiayn translate --engine ct2 --glossary` writes them."""
    pytest.importorskip("ctranslate2")
    from aiayn.cli import main
    from aiayn.decoding.ct2 import CT2Translator
    from aiayn.serve.engines import ModelSource

    translator, lines = setup
    run = save_run(translator.model, copy_data / "vocab.model", tmp_path / "run")
    assert main(["export", "--checkpoint", str(run), "--to", "ct2", str(tmp_path / "ct2")]) == 0
    power = SearchConfig(beam=4, max_len_b=10, lp="power", alpha=1.0)
    line = next(line for line in lines if "alpha" in line.split())
    sentences = [line, f"{lines[0]} 2020."]
    models = Models.from_sources([(LanguagePair("en", "de"), ModelSource(str(tmp_path / "ct2"), power))])
    (answer,) = call(create_app(models), [("POST", "/translate", {"q": sentences, "glossary": [["alpha", "KILO"]]})])
    assert answer.status_code == 200, answer.text
    assert answer.json()["translatedText"] == _offline(CT2Translator(tmp_path / "ct2", search=power), sentences,
                                                       [["alpha", "KILO"]])
    assert answer.json()["translatedText"][0].count("KILO") == 1 and "2020." in answer.json()["translatedText"][1]


def test_through_a_pivot_the_alignments_are_composed(setup, copy_data):
    """en -> de served as en -> fr -> de: numbers, terms and tags follow the words through the middle language (each
    leg's links composed), the answer is the two models chained offline with the spans carried (HTML: the markup
    layer's with aiayn.markup.engines.pivot); a plain text is the plain chain's."""
    translator, lines = setup
    vocab = translator.vocab
    first = Translator(tiny_model(len(vocab), seed=5, eos_bias=1.0), vocab, SEARCH)
    second = Translator(tiny_model(len(vocab), seed=6, eos_bias=1.0), vocab, SEARCH)
    models = Models.from_sources([(LanguagePair("en", "fr"), Loaded(first, "a")),
                                  (LanguagePair("fr", "de"), Loaded(second, "b"))], BatchConfig())
    models.preload()
    line = next(line for line in lines if "alpha" in line.split())
    sentences = [f"{line} 2020.", "Price: 15 €", lines[1]]
    markup = f"<p>{lines[2]} <b>{lines[3]}</b>. {lines[4].capitalize()} 2020.</p>"
    answer, tagged = call(create_app(models), [
        ("POST", "/translate", {"q": sentences, "source": "en", "target": "de", "glossary": [["alpha", "KILO"]]}),
        ("POST", "/translate", {"q": markup, "source": "en", "target": "de", "format": "html"})])
    assert answer.status_code == 200, answer.text
    assert tagged.json()["translatedText"] == translate_html(markup, pivot(translate_fn(first), translate_fn(second)),
                                                             "en", "de")
    assert answer.json()["pivot"] == ["fr"] * 3
    got = answer.json()["translatedText"]
    glossary = Glossary.of([["alpha", "KILO"]])
    middle = [drop_unknown(s, h[0].text, h[0].alignment) for s, h in
              zip(sentences, first.translate_nbest(sentences, alignments=True))]
    final = second.translate_nbest([text for text, _ in middle], alignments=True)
    lexicon = {"alpha": second.translate(first.translate(["alpha"]))[0]}
    expect = [carry_text(s, sentence_spans(s, glossary), hs[0].text, compose(links, hs[0].alignment), lexicon)
              for s, (_, links), hs in zip(sentences[:2], middle, final)]
    assert got[:2] == expect
    assert got[0].count("KILO") == 1 and got[0].count("2020") == 1
    assert got[1].count("15 €") == 1
    assert got[2] == second.translate(first.translate([lines[1]]))[0]


def test_a_sentence_with_a_number_changes_nothing_else(setup):
    """Sampling seeds text i of a request by i: a text beside one that holds a number draws what it draws beside
    one that holds none (the request's sentences stay one submission, aligned where one holds a span)."""
    translator, lines = setup
    sampled = {"sampling": True, "seed": 3, "alternatives": 1}
    plain, spanned = call(app_of(translator), [
        ("POST", "/translate", {"q": [lines[1], lines[0]], **sampled}),
        ("POST", "/translate", {"q": [f"{lines[1]} 2020", lines[0]], **sampled})])
    assert spanned.json()["translatedText"][1] == plain.json()["translatedText"][1]
    assert spanned.json()["alternatives"][1] == plain.json()["alternatives"][1]
    assert "2020" in spanned.json()["translatedText"][0]


def test_a_real_server_of_two_models(setup, copy_data, tmp_path):
    """`aiayn serve` of two models as a process (en -> fr and fr -> de, so en -> de is a pivot): numbers and symbols
    back exactly, a glossary term once (the answers themselves: test_through_a_pivot_the_alignments_are_composed),
    format=html with each tag once."""
    import os
    import subprocess
    import sys

    import httpx
    from serving import REPO, free_port, wait_until_listening

    translator, lines = setup
    vocab = translator.vocab
    first = Translator(tiny_model(len(vocab), seed=5, eos_bias=1.0), vocab, SEARCH)
    second = Translator(tiny_model(len(vocab), seed=6, eos_bias=1.0), vocab, SEARCH)
    runs = [save_run(t.model, copy_data / "vocab.model", tmp_path / name) for t, name in ((first, "a"), (second, "b"))]
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--checkpoint", f"en:fr={runs[0]}",
                             "--checkpoint", f"fr:de={runs[1]}", "--port", str(port), "--beam", "4", "--max-len-b",
                             "10", "--log-level", "warning", "--workers", "1", "--device", "cpu"],
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
                            stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    line = next(line for line in lines if "alpha" in line.split())
    try:
        wait_until_listening(proc, base)
        numbers, termed, tagged = (httpx.post(base + "/translate", timeout=60, json={"source": "en", "target": "de",
                                                                                     **body}).json() for body in (
            {"q": [*SYMBOLS, "Price: 15 €"]}, {"q": line, "glossary": [["alpha", "KILO"]]},
            {"q": "<p>Go <b>home</b> now. Come <i>back</i>.</p>", "format": "html"}))
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert numbers["translatedText"][:-1] == SYMBOLS and numbers["translatedText"][-1].count("15 €") == 1
    assert numbers["pivot"] == ["fr"] * (len(SYMBOLS) + 1)
    assert termed["translatedText"].count("KILO") == 1 and termed["pivot"] == "fr"
    assert [tagged["translatedText"].count(t) for t in ("<p>", "</p>", "<b>", "</b>", "<i>", "</i>")] == [1] * 6


def test_a_failed_alignment_fails_only_the_requests_that_asked(setup):
    """In one batch, a request with alignments whose aligning fails gets the error; its neighbour, which asked none,
    gets its translations."""
    import copy

    translator, lines = setup

    class Broken:
        def align(self, *args):
            raise RuntimeError("the aligner broke")

    broken = copy.copy(translator)
    broken.aligner = Broken()
    batcher = Batcher(broken)

    async def go():
        try:
            return await asyncio.gather(batcher.submit(lines[:2], alignments=True), batcher.submit(lines[2:4]),
                                        return_exceptions=True)
        finally:
            await batcher.close()
    asked, plain = asyncio.run(go())
    assert isinstance(asked, RuntimeError) and str(asked) == "the aligner broke"
    assert [hs[0].text for hs in plain] == translator.translate(lines[2:4])
    assert batcher.stats["batches"] == 1
