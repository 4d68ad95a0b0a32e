"""Plain lines with spans carried (aiayn.markup.lines): glossary terms put where the source term's translation stood,
numbers and symbols kept exactly, with fake engines whose alignments are known, a tiny real model and the CLI."""

import pytest
from helpers import save_run, tiny_model

from aiayn.cli import main
from aiayn.config import EOS_ID
from aiayn.data import Vocab
from aiayn.decoding.glossary import Glossary
from aiayn.decoding.lines import Translation
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.errors import UsageError, UserError
from aiayn.markup.lines import carry_nbests, needs_alignment, sentence_spans, term_spans, translate_lines

KING = "And the king spoke to the people."
# the quickstart model's plain translation of KING and its alignment (aiayn translate --print-alignment)
PLAIN = {KING: ("Y habló el rey al pueblo.", [(0, 0), (3, 1), (1, 2), (2, 3), (1, 4), (6, 5)])}


def fake(table):
    """A translate(sentences) with known outputs and alignments; records what it was asked."""
    asked = []

    def translate(sentences):
        asked.extend(sentences)
        return [table.get(s, (s, None)) for s in sentences]

    translate.asked = asked
    return translate


def test_a_term_replaces_the_word_aligned_to_it_and_nothing_is_added():
    out = translate_lines(fake(PLAIN), [KING], {"king": "monarca"})
    assert out == ["Y habló el monarca al pueblo."]  # one sentence, as long as the plain one, no "rey" beside it


def test_the_original_words_are_not_left_beside_the_term():
    # "king" aligned to both "el" and "rey": the term takes the noun's place (the last of the run), the article stays
    table = {KING: ("Y habló el rey al pueblo.", [(0, 0), (3, 1), (2, 2), (2, 3), (4, 4), (6, 5)])}
    [out] = translate_lines(fake(table), [KING], {"king": "monarca"})
    assert out == "Y habló el monarca al pueblo." and "rey" not in out


def test_a_term_goes_where_its_own_translation_stands_where_the_alignment_is_off():
    # "king" aligned to "el" and "habló"; alone, the engine translates it "El rey."
    table = {KING: ("Y habló el rey al pueblo.", [(0, 0), (2, 1), (2, 2), (1, 3), (4, 4), (6, 5)]),
             "king": ("El rey.", None)}
    assert translate_lines(fake(table), [KING], {"king": "monarca"}) == ["Y habló el monarca al pueblo."]


def test_a_term_the_translation_holds_is_left_as_it_is():
    table = {KING: ("Y el rey habló al rey.", [(0, 0), (1, 1), (2, 2), (2, 3), (6, 4), (6, 5)])}
    assert translate_lines(fake(table), [KING], {"king": "rey"}) == ["Y el rey habló al rey."]


def test_a_term_aligned_to_nothing_is_put_beside_its_neighbour_and_adds_only_its_words():
    table = {KING: ("Y habló al pueblo.", [(0, 0), (3, 1), (4, 2), (6, 3)])}  # no word aligned to "king"
    [out] = translate_lines(fake(table), [KING], {"king": "el gran monarca"})
    assert "el gran monarca" in out and out.count("monarca") == 1
    assert len(out.split()) - len(table[KING][0].split()) == 3


def test_punctuation_of_the_source_word_stays():
    line = "And he spoke to the king."
    table = {line: ("Y habló al rey.", [(0, 0), (2, 1), (3, 2), (5, 3)])}
    assert translate_lines(fake(table), [line], {"king": "monarca"}) == ["Y habló al monarca."]


def test_the_replaced_word_keeps_its_own_punctuation_and_gets_none_from_the_source():
    line = "He saw the king."
    table = {line: ("¿El rey vio?", [(2, 0), (3, 1), (1, 2)])}
    assert translate_lines(fake(table), [line], {"king": "monarca"}) == ["¿El monarca vio?"]


def test_two_occurrences_replace_two_words_and_a_held_term_is_left():
    line = "The king saw the king and the queen."
    table = {line: ("El rey vio al rey y la reina.", [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6),
                                                      (7, 7)])}
    out = translate_lines(fake(table), [line], {"king": "monarca", "queen": "reina"})
    assert out == ["El monarca vio al monarca y la reina."]


def test_a_word_the_model_repeated_is_replaced_both_times():
    line = "In 2020 the king paid."
    table = {line: ("Y en el rey en el rey, pagó.", [(0, 0), (0, 1), (1, 2), (3, 3), (4, 4), (4, 5), (3, 6), (4, 7)]),
             "king": ("Y al rey rey rey", None)}
    assert translate_lines(fake(table), [line], {"king": "monarca"}) == ["Y en 2020 monarca en el monarca, pagó."]


def test_terms_whole_words_case_as_written_longest_first():
    glossary = Glossary.of({"Peter": "Pedro", "Simon Peter": "Simón Pedro", "God": "Dios"})
    spans = term_spans("Then Simon Peter said to Peter: god, Godly", glossary)
    assert [(s.start, s.end, s.text) for s in spans] == [(5, 16, "Simón Pedro"), (25, 30, "Pedro")]


def test_conflicting_entries_are_one_error():
    with pytest.raises(UsageError, match=r"source term 'king' two target terms, 'monarca' and 'rey'"):
        Glossary.of([("king", "monarca"), ("king", "rey")])
    assert Glossary.of([("king", "rey"), ("king", "rey")]).entries  # the same pair twice is no conflict


def test_conflicting_lines_of_a_file_are_one_error_naming_both(tmp_path):
    path = tmp_path / "g.tsv"
    path.write_text("king\tmonarca\nqueen\treina\nking\trey\n")
    with pytest.raises(UserError, match=r"g.tsv, line 3: the source term 'king' has a target term already, "
                                        r"'monarca' on line 1, and here 'rey'"):
        Glossary.read(path)


def test_numbers_and_symbols_come_back_exactly():
    # a model whose vocabulary has no digits and no euro sign: unknown marks, an invented word
    table = {"Price: 15 €": ("Precio: ⁇ ⁇", [(0, 0), (1, 1), (2, 2)]),
             "In 2020 he paid 12345 coins ©.": ("En ENTONTECI pagó ⁇ monedas.", [(0, 0), (1, 1), (3, 2), (4, 3),
                                                                                  (5, 4)])}
    translate = fake(table)
    lines = ["Price: 15 €", "2020", "12345", "©", "😀", "In 2020 he paid 12345 coins ©.", "", "3 + 4 = 7 :)"]
    out = translate_lines(translate, lines)
    assert out[:5] == ["Precio: 15 €", "2020", "12345", "©", "😀"]
    assert out[5].startswith("En 2020 pagó 12345 monedas") and out[5].count("©") == 1  # beside its neighbour
    assert out[6:] == ["", "3 + 4 = 7 :)"]  # blank: blank; no letters: as it is, untranslated
    assert translate.asked == ["Price: 15 €", "In 2020 he paid 12345 coins ©."]  # only lines with letters


def test_urls_emails_dates_emoji_are_kept_spans():
    text = "Mail a@b.org on 2020-01-05 at 10:30, see https://x.org/a?b=1 😀👍🏽."
    kept = [text[s.start:s.end] for s in sentence_spans(text) if s.kind == "keep"]
    assert kept == ["a@b.org", "2020-01-05", "10:30", "https://x.org/a?b=1", "😀👍🏽"]


def test_carry_nbests_keeps_alignments_only_where_asked_and_unchanged():
    hyps = [[Translation("Y habló el rey al pueblo.", -1.0, [5], (), PLAIN[KING][1])]]
    [[placed]] = carry_nbests([KING], hyps, Glossary.of({"king": "monarca"}))
    assert placed.text == "Y habló el monarca al pueblo." and placed.alignment is None
    [[same]] = carry_nbests([KING], hyps, keep_alignments=True)
    assert same.alignment == PLAIN[KING][1]
    [[plain]] = carry_nbests([KING], hyps)
    assert plain.text == hyps[0][0].text and plain.alignment is None
    [[number]] = carry_nbests(["2020"], [[Translation("ENTONTECI", -1.0, [5])]])
    assert number.text == "2020"


@pytest.fixture(scope="module")
def tiny(copy_data):
    vocab = Vocab.load(copy_data / "vocab.model")
    lines = (copy_data / "test.src.txt").read_text().splitlines()[:4]
    only_in_first(lines)
    return tiny_model(len(vocab), eos_bias=2.0), vocab, lines


def only_in_first(lines):
    """A word of the first line that no other line holds (the lines put in that order)."""
    for n, line in enumerate(lines):
        others = {w for m, other in enumerate(lines) if m != n for w in other.split()}
        word = next((w for w in line.split() if w not in others), None)
        if word:
            lines.insert(0, lines.pop(n))
            return word
    raise AssertionError("no line has a word of its own")


def test_a_real_engine_keeps_numbers_and_places_terms(tiny):
    model, vocab, lines = tiny
    engine = Translator(model, vocab, SearchConfig(beam=2, max_len_b=8))
    word = only_in_first(lines)
    plain = engine.translate_nbest(lines, alignments=True)
    out = translate_lines(engine, lines + ["2020", f"{lines[1]} 12345 €"], {word: "ZZTERM"})
    assert out[1:4] == [h[0].text for h in plain[1:4]] and out[4] == "2020" and "12345 €" in out[5]
    assert out[0].count("ZZTERM") == 1 and len(out[0].split()) <= len(plain[0][0].text.split()) + 1


def test_only_the_lines_with_spans_ask_for_alignments(tiny):
    """needs_alignment flags the sentences with a span (not those without letters, kept as they are); an engine given
    one flag a line aligns those lines alone, each as `alignments=True` would; flags that miss lines are an error."""
    model, vocab, lines = tiny
    engine = Translator(model, vocab, SearchConfig(beam=2, max_len_b=8))
    sentences = [lines[0], f"{lines[1]} 12 €", "2020", "", lines[2]]
    flags = needs_alignment(sentences)
    assert flags == [False, True, False, False, False]
    assert needs_alignment(sentences, Glossary.of({lines[0].split()[0]: "X"}))[0]
    every = engine.translate_nbest(sentences, alignments=True)
    some = engine.translate_nbest(sentences, alignments=flags)
    assert [h[0].alignment for h in some] == [None, every[1][0].alignment, None, None, None]
    assert every[1][0].alignment and [h[0].text for h in some] == [h[0].text for h in every]
    with pytest.raises(UsageError, match="2 flags for 5 lines"):
        engine.translate_nbest(sentences, alignments=[True, False])


def test_the_cli_aligns_only_the_lines_that_carry_spans(tiny, copy_data, tmp_path, monkeypatch, capsys):
    model, vocab, lines = tiny
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    (tmp_path / "in.txt").write_text("\n".join([lines[0], f"{lines[1]} 15 €", lines[2]]) + "\n")
    aligned = []
    real = Translator.align_ids

    def spy(self, sources, targets):
        aligned.extend(sources)
        return real(self, sources, targets)

    monkeypatch.setattr(Translator, "align_ids", spy)
    assert main(["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"), "--max-len-b", "8",
                 "--no-progress"]) == 0
    assert "15 €" in capsys.readouterr().out.splitlines()[1]
    assert aligned == [vocab.encode(f"{lines[1]} 15 €") + [EOS_ID]]


def test_cli_glossary_and_numbers(tiny, copy_data, tmp_path, capsys):
    model, vocab, lines = tiny
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    word = only_in_first(lines)
    (tmp_path / "in.txt").write_text("\n".join([lines[0], "2020", "😀", f"{lines[1]} 15 €"]) + "\n")
    base = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"), "--max-len-b", "8",
            "--beam", "2", "--no-progress"]
    assert main(base) == 0
    plain = capsys.readouterr().out.splitlines()
    assert plain[1:3] == ["2020", "😀"] and "15 €" in plain[3]
    (tmp_path / "g.tsv").write_text(f"{word}\tZZTERM\n")
    assert main(base + ["--glossary", str(tmp_path / "g.tsv")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].count("ZZTERM") == 1 and len(out[0].split()) <= len(plain[0].split()) + 1
    assert out[1:] == plain[1:]
    (tmp_path / "g.tsv").write_text(f"{word}\tZZTERM\n{word}\tother\n")
    assert main(base + ["--glossary", str(tmp_path / "g.tsv")]) == 1
    assert "line 2: the source term" in capsys.readouterr().err
