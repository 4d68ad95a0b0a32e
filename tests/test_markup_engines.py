"""aiayn.markup.engines: an engine's n-best lists and alignments as the markup layer's translator, and a real tiny
model's translations carried into well-formed HTML."""

from collections import namedtuple

from helpers import tiny_model
from test_markup import _Checker

from aiayn.data import Vocab
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.markup.engines import compose, nbest_blocks, pivot, translate_fn, translate_html_nbest
from aiayn.markup.html import translate_html
from aiayn.markup.spans import Block, Span, translate_blocks, walk

Hyp = namedtuple("Hyp", "text alignment")


class ReversingEngine:
    """Two hypotheses per sentence: the words reversed, then as they are; counts its calls."""

    def __init__(self):
        self.calls = 0

    def translate_nbest(self, lines, progress=False, prefixes=None, first_line=0, glossary=None, alignments=False):
        assert alignments
        self.calls += 1
        out = []
        for line in lines:
            words = line.split()
            n = len(words)
            out.append([Hyp(" ".join(reversed(words)), [(n - 1 - j, j) for j in range(n)]),
                        Hyp(line, [(j, j) for j in range(n)])])
        return out


def test_translate_fn_and_nbest_use_the_engines_alignments_from_one_decoding():
    block = Block("a b c", [Span(0, 1, "wrap", "x")])
    engine = ReversingEngine()
    assert translate_fn(engine)(["a b c"]) == [("c b a", [(2, 0), (1, 1), (0, 2)])]
    assert translate_fn(engine, nbest=2)(["a b"])[0][0] == "a b"
    engine.calls = 0
    (ways,) = nbest_blocks([block], engine, "en", 3)
    assert engine.calls == 1
    assert [(w.text, [(s.start, s.end) for s in w.spans]) for w in ways] == [
        ("c b a", [(4, 5)]), ("a b c", [(0, 1)]), ("a b c", [(0, 1)])]


def test_an_engine_without_alignments_is_placed_on_the_diagonal():
    class Plain:
        def translate_nbest(self, lines):
            return [[Hyp(line.upper(), None)] for line in lines]

    out = translate_blocks([Block("a b c d", [Span(2, 3, "wrap", "x")])], translate_fn(Plain()), "en")[0]
    assert (out.text, [(s.start, s.end) for s in out.spans]) == ("A B C D", [(2, 3)])


def test_html_alternatives_come_from_one_decoding_each_with_its_own_placement():
    engine = ReversingEngine()
    ways = translate_html_nbest('<p title="a b">x <b>y</b> z</p>', engine, "en", "es", 2)
    assert ways == ['<p title="b a">z <b>y</b> x</p>', '<p title="a b">x <b>y</b> z</p>'] and engine.calls == 1
    assert translate_html_nbest("<br>", engine, "en", "es", 2) == ["<br>", "<br>"]


def test_a_pivot_route_aligns_through_its_middle_language():
    assert compose([(0, 1), (1, 0), (2, 2)], [(1, 0), (0, 1), (3, 2)]) == [(0, 0), (1, 1)]
    assert compose(None, [(0, 0)]) is None
    reverse = translate_fn(ReversingEngine())
    twice = pivot(reverse, reverse)  # reversed twice: the words as they were, each aligned to itself
    assert twice(["a b c"]) == [("a b c", [(0, 0), (1, 1), (2, 2)])]
    out = translate_blocks([Block("a b c", [Span(0, 1, "wrap", "x")])], pivot(reverse, translate_fn(Swapper())), "en")
    assert [(out[0].text[s.start:s.end], s.key) for s in out[0].spans] == [("a", "x")]


class Swapper:
    """Swaps the first two words."""

    def translate_nbest(self, lines, alignments=False):
        out = []
        for line in lines:
            w = line.split()
            order = [1, 0, *range(2, len(w))] if len(w) > 1 else list(range(len(w)))
            out.append([Hyp(" ".join(w[i] for i in order), [(i, j) for j, i in enumerate(order)])])
        return out


def test_a_tiny_models_translations_come_back_well_formed(copy_data):
    vocab = Vocab.load(copy_data / "vocab.model")
    words = (copy_data / "test.src.txt").read_text().split()[:9]
    source = (f"<p>{words[0]} <b>{words[1]} <i>{words[2]}</i></b> {words[3]}. <a href='x'>{words[4]}</a> "
              f"{words[5]} <img src='y'> {words[6]} {words[7]}.</p>")
    translator = Translator(tiny_model(len(vocab), eos_bias=4.0), vocab, SearchConfig(beam=2))
    out = translate_html(source, translate_fn(translator), "en", "es")
    checker = _Checker()
    checker.feed(out)
    checker.close()
    assert not checker.bad and not checker.stack
    assert checker.count == {"p": 1, "b": 1, "i": 1, "a": 1, "img": 1}
    assert "href='x'" in out and "src='y'" in out
    assert list(walk(Block("x"))) == [("text", None, "x")]
