"""Glossaries (aiayn.decoding.glossary): the TSV file, term matching, dynamic beam allocation worked out by hand on a
scripted model, every constraint met on real models, plain sentences searched as without a glossary, the errors, the
CLI."""

import math
from pathlib import Path

import pytest
import torch
from helpers import save_run, tiny_model
from test_search import TABLES, A, B, C, E, ScriptedModel, src_of

from aiayn.cli import main
from aiayn.data import Vocab
from aiayn.decoding.glossary import (
    Glossary,
    advance,
    advancing_tokens,
    bank_sizes,
    constrained_beam_search,
    holds,
    needed,
)
from aiayn.decoding.search import SearchConfig, beam_search
from aiayn.decoding.translator import Translator, padded
from aiayn.errors import UsageError, UserError
from aiayn.markup.lines import translate_lines

QUICKSTART = Path("/work/runs/quickstart/run")


def test_glossary_file_comments_blank_lines_and_bad_lines(tmp_path):
    path = tmp_path / "g.tsv"
    path.write_text("# names\nJesus\tJesús\n\n  Simon Peter\tSimón Pedro  \n")
    glossary = Glossary.read(path)
    assert glossary.entries == (("Jesus", "Jesús"), ("Simon Peter", "Simón Pedro"))
    path.write_text("Jesus\tJesús\nPeter Pedro\n")
    with pytest.raises(UserError, match=r"g.tsv, line 2: expected 'source term<TAB>target term'"):
        Glossary.read(path)
    path.write_text("Jesus\t\n")
    with pytest.raises(UserError, match="line 1"):
        Glossary.read(path)
    with pytest.raises(UserError, match="cannot read the glossary"):
        Glossary.read(tmp_path / "missing.tsv")


def test_terms_match_whole_words_with_their_case():
    glossary = Glossary.of({"Peter": "Pedro", "Simon Peter": "Simón Pedro", "God": "Dios"})
    assert glossary.terms_in("Then Simon Peter said:") == ["Pedro", "Simón Pedro"]
    assert glossary.terms_in("Peter's boat, Peter.") == ["Pedro"]  # once, however often it occurs
    assert glossary.terms_in("Peterson and god and Godly") == []  # not inside a word, not another case
    assert Glossary.of([("a", "b")]) == Glossary((("a", "b"),))
    with pytest.raises(UsageError, match="needs a source and a target term"):
        Glossary.of({" ": "x"})


def test_bank_sizes_by_hand():
    assert bank_sizes(4, [9, 9]) == [2, 2]
    assert bank_sizes(4, [9, 9, 9]) == [1, 1, 2]  # the rest to the top bank
    assert bank_sizes(4, [9, 9, 0]) == [1, 3, 0]  # an empty bank's slots: to the most advanced one with candidates
    assert bank_sizes(1, [5, 5, 0]) == [0, 1, 0]
    assert bank_sizes(4, [1, 1, 1]) == [1, 1, 1]  # too few candidates: slots left empty


def test_progress_of_a_hypothesis_by_hand():
    terms = [(7, 8, 9), (7, 5)]  # two terms sharing their first piece
    assert needed(terms, frozenset(), (1, 7)) == 5 - 1  # "7" starts both: one piece of the five done
    assert advancing_tokens(terms, frozenset(), (1, 7)) == {7, 8, 5}
    assert advance(terms, frozenset(), (1, 7), 5) == ({1}, 3)  # "7 5" met; "7 8 9" still to go
    assert advance(terms, frozenset({1}), (7, 8), 9) == ({0, 1}, 0)
    assert advance(terms, frozenset(), (7, 8), 4) == (frozenset(), 5)  # a broken match counts nothing


def scripted(tables, terms, **kw):
    search = SearchConfig(**{"max_len_a": 0.0, "max_len_b": 3, "min_len": 0, "alpha": 0.0, **kw})
    model = ScriptedModel(TABLES, default={A: 0.6, B: 0.4 - 1e-6, E: 1e-6} if 3 in tables else None)  # as run()
    return constrained_beam_search(model, src_of(*tables), search, terms=terms)


def test_constraint_by_hand():
    """Table 1, beam 2: plain search finds "b" (0.24); with the term "c" only "a c" (0.5 * 0.25 = 0.125) and "b a c"
    (0.064) hold it. Step 0 has no candidate in bank 1 (c has probability 0), so both slots go to a and b; step 1
    keeps "a b" (0.175, bank 0) and "a c" (0.125, bank 1); "a b" can only end (EOS banned, c impossible)."""
    plain = beam_search(ScriptedModel(TABLES), src_of(1), SearchConfig(beam=2, max_len_a=0.0, max_len_b=3,
                                                                       min_len=0, alpha=0.0))
    assert plain[0][0].tokens == [B]
    [[best]] = scripted([1], [[(C,)]], beam=2)
    assert best.tokens == [A, C] and best.score == pytest.approx(math.log(0.125), abs=1e-6)


def test_the_length_limit_forces_what_is_still_needed():
    """Table 3 with a word limit of 2 and the two-piece term "b b": from the first step only b keeps the term
    reachable, so it is forced twice (greedy search would take a, 0.6), then EOS at the limit (p 1e-6)."""
    for beam in (1, 2):
        hyps = scripted([3], [[(B, B)]], beam=beam, nbest=beam, max_len_b=2)[0]
        assert [h.tokens for h in hyps] == [[B, B]]
        assert hyps[0].score == pytest.approx(math.log(0.4) + math.log(0.4 - 1e-6) + math.log(1e-6), abs=1e-5)


def test_terms_that_cannot_fit_are_an_error_naming_the_line():
    with pytest.raises(UsageError, match=r"input line 2: its glossary terms need 3 pieces, more than the 2 words"):
        scripted([1, 3], [[(A,)], [(A, B), (C,)]], beam=2, max_len_b=2)
    with pytest.raises(UsageError, match="not sampling"):
        scripted([1], [[(A,)]], sampling=True)
    with pytest.raises(UsageError, match="target prefixes"):
        constrained_beam_search(ScriptedModel(TABLES), src_of(1), SearchConfig(), prefixes=[[A]], terms=[[(C,)]])


@pytest.fixture(scope="module")
def tiny(copy_data):
    vocab = Vocab.load(copy_data / "vocab.model")
    lines = (copy_data / "test.src.txt").read_text().splitlines()[:10]
    return tiny_model(len(vocab), eos_bias=2.0), vocab, lines


@pytest.mark.parametrize("beam, nbest, with_plain", [(1, 1, True), (4, 1, True), (4, 3, True), (4, 3, False)])
def test_every_constraint_met_on_a_real_model(tiny, beam, nbest, with_plain):
    """Random terms of one to three pieces, up to two a sentence, on a real (random) model: every returned
    hypothesis holds every term of its sentence, in greedy, beam and n-best search, with the plain search's rivals
    or by the allocation alone."""
    model, vocab, lines = tiny
    gen = torch.Generator().manual_seed(beam + nbest)
    terms = [[tuple(torch.randint(4, len(vocab), (int(n),), generator=gen).tolist())
              for n in torch.randint(1, 4, (i % 3,), generator=gen)] for i in range(len(lines))]
    src = padded([vocab.encode(line) + [E] for line in lines])
    search = SearchConfig(beam=beam, nbest=nbest, max_len_b=8)
    hyps = constrained_beam_search(model.eval(), src, search, terms=terms, with_plain=with_plain)
    for words, hs in zip(terms, hyps):
        assert hs and all(holds(h.tokens, term) for h in hs for term in words)


def test_the_plain_search_comes_first_and_rivals_the_allocation(tiny, monkeypatch):
    """with_plain: where the plain search's hypotheses hold every term they are the answer, and only the other
    sentences are searched with constraints (of those alone, grouped by their bound), each no longer than the plain
    best translation and its terms' pieces, where the allocation alone runs on (terms: pieces of the plain best in
    odd sentences, held already; a token elsewhere)."""
    model, vocab, lines = tiny
    search = SearchConfig(beam=3, max_len_b=8)
    src = padded([vocab.encode(line) + [E] for line in lines])
    plain = beam_search(model.eval(), src, search)
    terms = [[tuple(hs[0].tokens[1:3])] if i % 2 else [(7 + i,)] for i, hs in enumerate(plain)]
    alone = constrained_beam_search(model, src, search, terms=terms, with_plain=False)
    searched = []
    def counting(model, src, *args, lexical=None, **kw):
        searched.append((src.size(0), lexical is not None))
        return beam_search(model, src, *args, lexical=lexical, **kw)
    monkeypatch.setattr("aiayn.decoding.glossary.beam_search", counting)
    both = constrained_beam_search(model, src, search, terms=terms)
    missed = [i for i, (words, p) in enumerate(zip(terms, plain)) if not holds(p[0].tokens, words[0])]
    assert 0 < len(missed) < len(lines) and searched[0] == (len(lines), False)
    assert sum(n for n, _ in searched[1:]) == len(missed) and all(lexical for _, lexical in searched[1:])
    for i, (words, p, b) in enumerate(zip(terms, plain, both)):
        assert all(holds(h.tokens, term) for h in b for term in words)
        if i in missed:  # bounded: no longer than the plain best and its terms' pieces, where the allocation rambles
            assert all(len(h.tokens) <= len(p[0].tokens) + sum(map(len, words)) for h in b)
        else:
            assert b == p
    assert any(len(a[0].tokens) > len(p[0].tokens) + sum(map(len, w)) for w, p, a in zip(terms, plain, alone))


def test_sentences_without_terms_search_as_without_a_glossary(tiny):
    model, vocab, lines = tiny
    search = SearchConfig(beam=4, nbest=2, max_len_b=8)
    src = padded([vocab.encode(line) + [E] for line in lines])
    plain = beam_search(model.eval(), src, search)
    same = constrained_beam_search(model, src, search, terms=[[] for _ in lines])
    terms = [[(9, 10)] if i % 2 else [] for i in range(len(lines))]
    mixed = constrained_beam_search(model, src, search, terms=terms)
    alone = constrained_beam_search(model, src, search, terms=terms, with_plain=False)
    assert same == plain
    for i in range(0, len(lines), 2):  # the plain sentences of a batch that has constrained ones
        assert mixed[i] == plain[i]  # the plain search itself
        assert [h.tokens for h in alone[i]] == [h.tokens for h in plain[i]]  # the allocation's step, no term
        assert [h.score for h in alone[i]] == pytest.approx([h.score for h in plain[i]], abs=1e-5)


def test_translator_glossary_and_the_fixed_shape_fallback(tiny, capsys):
    model, vocab, lines = tiny
    word = lines[0].split()[0]
    target = vocab.decode(vocab.encode(lines[1])[:2])  # two pieces of another sentence
    search = SearchConfig(beam=3, max_len_b=8)
    eager = Translator(model, vocab, search, batch_size=4)
    out = eager.translate_nbest(lines, glossary={word: target})
    terms = eager.glossary_terms(lines, {word: target})
    for line, hs, words in zip(lines, out, terms):
        assert bool(words) == (word in line.split())
        assert all(holds(h.tokens, term) for h in hs for term in words)
    assert eager.translate(lines, glossary={}) == eager.translate(lines)
    fixed = Translator(model, vocab, search, batch_size=4, search_impl="fixed")
    capsys.readouterr()
    for _ in range(2):
        assert fixed.translate_nbest(lines, glossary={word: target}) == out
    assert capsys.readouterr().err.count("does not do a glossary: decoding with the eager search") == 1


def test_cli_glossary(tiny, copy_data, tmp_path, capsys):
    model, vocab, lines = tiny
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run")
    word, target = lines[0].split()[0], vocab.decode(vocab.encode(lines[1])[:2])
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "g.tsv").write_text(f"# test\n{word}\t{target}\n")
    base = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"), "--max-len-b", "8",
            "--beam", "3", "--no-progress", "--no-split-sentences"]
    assert main(base + ["--glossary", str(tmp_path / "g.tsv")]) == 0
    want = translate_lines(Translator(model, vocab, SearchConfig(beam=3, max_len_b=8)), lines, {word: target})
    assert capsys.readouterr().out.splitlines() == want
    (tmp_path / "g.tsv").write_text(f"{word} {target}\n")
    assert main(base + ["--glossary", str(tmp_path / "g.tsv")]) == 1
    assert "g.tsv, line 1: expected 'source term<TAB>target term'" in capsys.readouterr().err
    assert main(base + ["--glossary", str(tmp_path / "g.tsv"), "--print-alignment"]) == 2  # a usage error
    assert "--glossary changes the model's words, which --print-alignment describes" in capsys.readouterr().err


@pytest.mark.skipif(not QUICKSTART.is_dir(), reason="the quickstart run is not on this machine")
def test_bible_names_are_met_on_the_quickstart_model():
    """Real verses and real names: one-piece and multi-piece target terms, two in one verse, all met."""
    t = Translator.load(QUICKSTART)
    lines = ["Jesus said to Peter: Follow me.", "And Simon Peter answered him.", "Then Jesus went up to Jerusalem.",
             "And the disciples came to Jesus."]
    glossary = {"Jesus": "Jesús", "Peter": "Pedro", "Simon Peter": "Simón Pedro", "Jerusalem": "Jerusalén",
                "disciples": "discípulos"}
    terms = t.glossary_terms(lines, glossary)
    assert max(len(term) for words in terms for term in words) > 1 and max(map(len, terms)) >= 2
    for words, hs in zip(terms, t.search_ids(t.encode(lines), terms=terms)):
        assert all(holds(hs[0].tokens, term) for term in words)
