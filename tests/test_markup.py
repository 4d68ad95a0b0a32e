"""aiayn.markup: spans carried through translations whose word alignments are known, so every placement can be
worked out by hand (identity, reversal, a dictionary with reordering, a translator that drops a word)."""

import random
import re
from html.parser import HTMLParser

import pytest

from aiayn.markup.html import VOID, translate_html
from aiayn.markup.sentences import sentence_ranges
from aiayn.markup.spans import Block, Span, carry, parents, protected_spans, translate_blocks, walk


class Recorder:
    """A fake translator: each sentence's words mapped by `word_map` (a list of (target word, source index)), the
    sentences it was given recorded."""

    def __init__(self, word_map):
        self.word_map = word_map
        self.calls = []

    def __call__(self, sentences):
        self.calls.append(list(sentences))
        out = []
        for sentence in sentences:
            pairs = self.word_map(sentence.split())
            out.append((" ".join(w for w, _ in pairs), [(i, j) for j, (_, i) in enumerate(pairs)]))
        return out


def identity(words):
    return [(w.upper(), i) for i, w in enumerate(words)]


def reverse(words):
    return [(w, i) for i, w in reversed(list(enumerate(words)))]


SPANISH = {"the": "la", "red": "roja", "house": "casa", "is": "es", "very": "muy", "big": "grande", "and": "y",
           "old": "vieja", "price:": "precio:", "king": "rey", "spoke.": "habló."}


def spanish(words):
    """Word for word; an adjective before "house" goes after it; "very" is dropped."""
    out = [(SPANISH.get(w.lower(), w.lower()), i) for i, w in enumerate(words) if w.lower() != "very"]
    for k in range(len(out) - 1):
        if out[k][0] in ("roja", "vieja", "grande") and out[k + 1][0].startswith("casa"):
            out[k], out[k + 1] = out[k + 1], out[k]
    return out


def mangle_numbers(words):
    """A vocabulary without digits or symbols: each becomes an invented word."""
    return [("unk" if not any(c.isalpha() for c in w) else w, i) for i, w in enumerate(words)]


def shown(block: Block) -> str:
    """A block as text with its spans as [key ... /key] and points as <key>."""
    out = []
    for event, span, text in walk(block):
        if event == "text":
            out.append(text)
        elif event == "open":
            out.append(f"[{span.key} ")
        elif event == "close":
            out.append(f"/{span.key}]")
        elif event == "void":
            out.append(f"<{span.key}>")
        else:
            out.append(f"{{{text}}}")
    return "".join(out)


def bracketed(text: str) -> Block:
    """The inverse of `shown` for wraps and points: '[b God/b]' and '<img>' as a block."""
    spans, plain, stack = [], [], []
    for m in re.finditer(r"\[(\w+) |/(\w+)\]|<(\w+)>|([^\[/<]+|[/\[<])", text):
        at = len("".join(plain))
        if m.group(1):
            spans.append(Span(at, -1, "wrap", m.group(1)))
            stack.append(len(spans) - 1)
        elif m.group(2):
            k = stack.pop()
            spans[k] = Span(spans[k].start, at, "wrap", spans[k].key)
        elif m.group(3):
            spans.append(Span(at, at, "void", m.group(3)))
        else:
            plain.append(m.group(4))
    return Block("".join(plain), spans)


def one(text: str, word_map, lang="en") -> str:
    return shown(translate_blocks([bracketed(text)], Recorder(word_map), lang)[0])


ISSUE = ('In the beginning was the Word, and the Word was with <b>God</b>. '
         'He came to <a href="x.html">his own</a> people.')


def test_the_issue_example_is_translated_as_whole_sentences():
    fake = Recorder(identity)
    out = translate_html(ISSUE, fake, "en", "es")
    assert fake.calls == [["In the beginning was the Word, and the Word was with God.", "He came to his own people."]]
    assert out == ('IN THE BEGINNING WAS THE WORD, AND THE WORD WAS WITH <b>GOD</b>. '
                   'HE CAME TO <a href="x.html">HIS OWN</a> PEOPLE.')


def test_reversal_moves_each_element_with_its_words():
    assert one("He came to [a his own/a] people.", reverse) == "people. [a own his/a] to came He"
    assert one("[i two [b three/b] four/i] five", reverse) == "five [i four [b three/b] two/i]"
    # punctuation of a word only partly inside the element stays out of it
    assert one("with [b God/b].", reverse) == "[b God/b]. with"


def test_dictionary_with_reordering_and_a_dropped_word():
    assert one("the [b red/b] house", spanish) == "la casa [b roja/b]"
    assert one("the [i red house/i] is big", spanish) == "la [i casa roja/i] es grande"
    # the words of an element come apart: it holds everything from the first to the last of them
    assert one("[b the red/b] house", spanish) == "[b la casa roja/b]"
    # "very" is dropped (no target word is linked to it): its element goes around the target word of its nearer
    # linked neighbour, the left one at equal distance, rather than coming back empty
    assert one("it is [i very/i] big", spanish) == "it [i es/i] grande"
    assert one("it is very<img> big", spanish) == "it es<img> grande"


def test_elements_that_would_cross_are_cut_so_one_holds_the_other():
    def swap_middle(words):  # a b c d -> a c b d
        order = [0, 2, 1, 3]
        return [(words[i], i) for i in order]
    out = translate_blocks([bracketed("[x a b/x] [y c d/y]")], Recorder(swap_middle), "en")[0]
    # x covers target words a..b (a c b), y c..d (c b d): they cross; y keeps its part outside x (one word each)
    assert shown(out) == "[x a c b/x] [y d/y]"


def test_an_element_across_a_sentence_end_is_split_in_two():
    fake = Recorder(identity)
    out = shown(translate_blocks([bracketed("It [b ends. Then/b] it goes.")], fake, "en")[0])
    assert fake.calls == [["It ends.", "Then it goes."]]
    assert out == "IT [b ENDS./b] [b THEN/b] IT GOES."  # the stop was inside the element


def test_points_and_spaces_keep_their_side():
    assert one("<img>Hello world", identity) == "<img>HELLO WORLD"
    assert one("Hello world<img>", identity) == "HELLO WORLD<img>"
    assert one("Hello <img>world", identity) == "HELLO <img>WORLD"
    assert one("Hello<img> world", identity) == "HELLO<img> WORLD"


def test_keep_and_replace_spans_come_back_exactly():
    source = "Price: 15 € (2020)."
    spans = protected_spans(source)
    assert [source[s.start:s.end] for s in spans] == ["15 €", "2020"]
    text, moved = carry(source, spans, *Recorder(mangle_numbers)([source])[0])
    assert text == "Price: 15 € (2020)."
    assert [text[s.start:s.end] for s in moved] == ["15 €", "2020"]
    # a glossary term: the words aligned to the source term give way to it
    source = "The king spoke."
    term = Span(4, 8, "replace", text="monarca")
    text, moved = carry(source, [term], *Recorder(spanish)([source])[0])
    assert text == "la monarca habló." and text[moved[0].start:moved[0].end] == "monarca"
    # nothing aligned to it: inserted beside its neighbour's translation
    text, _ = carry("a 5 b", [Span(2, 3, "keep")], "A B", [(0, 0), (2, 1)])
    assert text == "A 5 B"
    # kept text inside a word: marked where the translation holds it, else added at the same end of the word
    text, moved = carry("a word1, b", [Span(6, 7, "keep")], "A PALABRA, B", [(0, 0), (1, 1), (2, 2)])
    assert text == "A PALABRA1, B" and text[moved[0].start:moved[0].end] == "1"
    text, moved = carry("x A<b", [Span(3, 4, "keep")], "X A<B", [(0, 0), (1, 1)])
    assert text == "X A<B" and moved[0].start == 3


def test_protected_spans_find_what_is_not_language():
    text = "Mail a.b@c.de or see https://x.org/a?b=1. On 2020-01-05 at 12:30, 3.5% off, © 😀 👍🏽 ok"
    found = [text[s.start:s.end] for s in protected_spans(text)]
    assert found == ["a.b@c.de", "https://x.org/a?b=1", "2020-01-05", "12:30", "3.5%", "©", "😀", "👍🏽"]


def test_sentences_follow_the_source_language():
    text = "Mr. Smith came at 5 p.m. today. He left. Das ist z.B. gut."
    got = [text[s:e] for s, e in sentence_ranges(text, "en")]
    assert got[:2] == ["Mr. Smith came at 5 p.m. today.", "He left."]
    text = "Das ist z.B. ein Test. Am 3. Mai kam er."
    assert [text[s:e] for s, e in sentence_ranges(text, "de")] == ["Das ist z.B. ein Test.", "Am 3. Mai kam er."]
    text = "¿Vino la Dra. López? Sí, vino. M. Dupont grew 3.5 pct. in Q2. ¿Y no hará?; habló."
    assert [text[s:e] for s, e in sentence_ranges(text, "es")] == [
        "¿Vino la Dra. López?", "Sí, vino.", "M. Dupont grew 3.5 pct. in Q2.", "¿Y no hará?; habló."]


def test_without_sentencex_aiayns_own_rule_splits(monkeypatch):
    import aiayn.markup.sentences as sentences

    monkeypatch.setattr(sentences, "_sentencex", lambda: None)
    text = "Mr. Smith came.  He left.\nThen  it rained"
    assert [text[s:e] for s, e in sentences.sentence_ranges(text, "en")] == ["Mr. Smith came.", "He left.",
                                                                             "Then  it rained"]


def test_a_sentence_without_letters_is_not_translated():
    fake = Recorder(mangle_numbers)
    out = translate_blocks([Block("2020"), Block("  "), Block("12 €")], fake, "en")
    assert [b.text for b in out] == ["2020", "  ", "12 €"] and fake.calls == []


def test_parents_follow_the_flat_lists_rule():
    spans = [Span(0, 5, "wrap", "a"), Span(0, 2, "wrap", "b"), Span(2, 2, "void"), Span(5, 5, "void")]
    assert parents(spans) == [None, 0, 0, None]  # a point at the end of a non-empty element lies after it
    empty = [Span(3, 3, "wrap", "a"), Span(3, 3, "void"), Span(3, 3, "wrap", "b")]
    assert parents(empty) == [None, 0, None]  # an empty element holds an image at its place, not an empty element


def test_two_dropped_elements_side_by_side_go_to_their_nearer_neighbours():
    def drop_bc(words):
        return [(w.upper(), i) for i, w in enumerate(words) if w not in ("b", "c")]
    assert one("a [i b/i] [u c/u] d", drop_bc) == "[i A/i] [u D/u]"


class _Checker(HTMLParser):
    """Checks that every element is closed in order, and counts start tags."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.count, self.bad, self.text = [], {}, [], []

    def handle_starttag(self, tag, attrs):
        key = dict(attrs).get("id", tag)
        self.count[key] = self.count.get(key, 0) + 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.bad.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _balanced(text: str) -> bool:
    depth = []
    for m in re.finditer(r"\[(\w+)|/(\w+)\]", text):
        if m.group(1):
            depth.append(m.group(1))
        elif not depth or depth.pop() != m.group(2):
            return False
    return not depth


def _random_html(rng: random.Random, n_words: int, stops: bool = False) -> tuple[str, int]:
    """A paragraph of words with randomly nested inline elements (each with an id) and images."""
    out, stack, made = [], [], 0
    for k in range(n_words):
        for _ in range(rng.randint(0, 2)):
            r = rng.random()
            if r < 0.4:
                tag = rng.choice(["b", "i", "a", "span"])
                out.append(f'<{tag} id="e{made}">')
                stack.append(tag)
                made += 1
            elif r < 0.6 and stack:
                out.append(f"</{stack.pop()}>")
            elif r < 0.7:
                out.append(f'<img id="e{made}">')
                made += 1
        ends = ["", "", ",", ";"] + (["."] if stops else [])  # without stops, one sentence: no element cut in two
        out.append(f"w{k}" + rng.choice(ends) + " ")
    out.extend(f"</{t}>" for t in reversed(stack))
    return "<p>" + "".join(out) + "</p>", made


def _shuffler(rng: random.Random):
    def word_map(words):
        order = list(range(len(words)))
        rng.shuffle(order)
        return [(words[i].upper(), i) for i in order if rng.random() > 0.15]
    return word_map


@pytest.mark.parametrize("seed", range(4))
def test_random_nesting_stays_well_formed_with_every_element_once(seed):
    rng = random.Random(seed)
    for _ in range(60):
        source, made = _random_html(rng, rng.randint(1, 14))
        out = translate_html(source, Recorder(_shuffler(rng)), "en", "es")
        checker = _Checker()
        checker.feed(out)
        checker.close()
        assert not checker.bad and not checker.stack, (source, out)
        assert checker.count == {"p": 1, **{f"e{k}": 1 for k in range(made)}}, (source, out)


def test_random_nesting_across_sentence_ends_stays_well_formed_with_every_element_kept():
    rng = random.Random(11)
    for _ in range(150):
        source, made = _random_html(rng, rng.randint(1, 14), stops=True)
        out = translate_html(source, Recorder(_shuffler(rng)), "en", "es")
        checker = _Checker()
        checker.feed(out)
        checker.close()
        assert not checker.bad and not checker.stack, (source, out)
        assert set(checker.count) == {"p", *(f"e{k}" for k in range(made))}, (source, out)


def _tokens(markup: str) -> list[str]:
    """Tags and words, whitespace aside; an image just before an end tag moved after it (the flat list's rule puts a
    point at the end of an element after it)."""
    while True:
        moved = re.sub(r"(<img[^>]*>)(\s*)(</\w+>)", r"\3\2\1", markup)
        if moved == markup:
            return re.findall(r"<[^>]+>|[^\s<]+", markup)
        markup = moved


def test_an_identity_translation_gives_back_every_tag_and_word_in_place():
    rng = random.Random(7)
    for _ in range(200):
        source, _ = _random_html(rng, rng.randint(1, 12))
        out = translate_html(source, Recorder(lambda words: [(w, i) for i, w in enumerate(words)]), "en", "es")
        assert _tokens(out) == _tokens(source), (source, out)


def test_protected_spans_join_other_spans_without_crossing_them():
    from aiayn.markup.spans import with_protected

    text = "Pay 15 € by 2020 or 12 $ now"
    spans = [Span(4, 6, "replace", text="X"), Span(20, 22, "wrap", "b")]  # "15" taken by a term; "12" bold
    out = with_protected(text, spans)
    assert [(text[s.start:s.end], s.kind) for s in out] == [
        ("15", "replace"), ("€", "keep"), ("2020", "keep"), ("12", "wrap"), ("12", "keep"), ("$", "keep")]
    assert parents(out) == [None, None, None, None, 3, None]  # "12" lies inside the bold; "12 $" would cross it
