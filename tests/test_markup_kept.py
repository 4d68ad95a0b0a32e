"""aiayn.markup: kept text that shares a word with other characters, no-break spaces, and elements around words the
alignment left out, through translations whose every placement can be worked out by hand."""

import random

from test_markup import Recorder, identity, one, reverse, shown

from aiayn.markup.html import translate_html
from aiayn.markup.spans import Block, Span, carry, protected_spans, translate_blocks, with_protected


def word_for_word(words):
    return [(w, i) for i, w in enumerate(words)]


def kept(text: str, *pieces: str, word_map=word_for_word) -> str:
    """`text` with each of `pieces` (found left to right) kept verbatim, translated, shown with kept text in {}."""
    spans, pos = [], 0
    for piece in pieces:
        at = text.index(piece, pos)
        spans.append(Span(at, at + len(piece), "keep"))
        pos = at + len(piece)
    return shown(translate_blocks([Block(text, spans)], Recorder(word_map), "en")[0])


def test_kept_text_sharing_a_word_with_punctuation_or_letters_comes_back_once():
    assert kept("Run it (--host 0.0.0.0) now.", "--host 0.0.0.0") == "Run it ({--host 0.0.0.0}) now."
    assert kept("See aiayn translate's options.", "aiayn translate") == "See {aiayn translate}'s options."
    assert kept("Pick base/big here.", "base", "big") == "Pick {base}/{big} here."
    assert kept("It is <unk>, here.", "<unk>") == "It is {<unk>}, here."
    assert kept("So 2+2 is four.", "2", "+2") == "So {2}{+2} is four."
    # translated words: the kept text takes the place of the words it fills, their punctuation kept once
    assert kept("Pick base/big here.", "base", "big", word_map=identity) == "PICK {base}/{big} HERE."
    assert kept("Run (--host x) now.", "--host x", word_map=identity) == "RUN ({--host x}) NOW."
    assert kept("It is <unk>, here.", "<unk>", word_map=identity) == "IT IS {<unk>}, HERE."


def test_numbers_joined_by_a_sign_are_one_kept_span():
    assert [("2+2" == "So 2+2 is four."[s.start:s.end]) for s in protected_spans("So 2+2 is four.")] == [True]
    text = "Add 2+2, then 10-3."
    out = shown(translate_blocks([Block(text, with_protected(text, []))], Recorder(identity), "en")[0])
    assert out == "ADD {2+2}, THEN {10-3}."


def test_random_kept_spans_come_back_exactly_once_in_place_through_a_word_for_word_translation():
    rng = random.Random(0)
    alphabet = "ab1(),.'/+-<>:"
    for _ in range(400):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 6))]
        text = " ".join(words)
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, 2 * rng.randint(1, 3))))
        spans = [Span(s, e, "keep") for s, e in zip(cuts[::2], cuts[1::2])
                 if text[s:e].strip() == text[s:e] and text[s:e]]
        out, moved = carry(text, spans, text, [(i, i) for i in range(len(words))])  # one sentence
        assert out == text, (text, spans)
        assert [(s.start, s.end) for s in moved] == [(s.start, s.end) for s in spans], (text, spans)


def test_a_no_break_space_survives_where_it_stood():
    text = "It is 10\u00a0km from Mr.\u00a0Smith."
    out = translate_blocks([Block(text, with_protected(text, []))], Recorder(identity), "en")[0]
    assert shown(out) == "IT IS {10}\u00a0KM FROM MR.\u00a0SMITH."
    assert kept("It is 10\u00a0km away.", "10\u00a0km") == "It is {10\u00a0km} away."
    # words that no longer stand side by side in the translation are apart by an ordinary space
    assert one("a\u00a0b c", reverse) == "c b a"
    assert translate_html("<p>Walk 5&nbsp;km.</p>", Recorder(identity), "en", "es") == "<p>WALK 5&nbsp;KM.</p>"


def test_an_element_around_words_the_alignment_left_out_goes_to_their_likeliest_target_word():
    # "x" has no link; the target word between its neighbours' targets ("Y", linked to "d") is its likeliest
    def far_link(words):
        return [("A", 0), ("Y", 3), ("C", 2), ("D", 3)]
    assert one("a [b x/b] c d", far_link) == "A [b Y/b] C D"
    # no word between: the target of the nearer linked neighbour, the left one at equal distance
    def drop_xy(words):
        return [(w.upper(), i) for i, w in enumerate(words) if w not in ("x", "y")]
    assert one("a x [i y/i] c", drop_xy) == "A [i C/i]"
    assert one("a b [i x/i] c", drop_xy) == "A [i B/i] C"
    assert one("[i x/i] a b", drop_xy) == "[i A/i] B"
    # the element's whole text vanished (an empty translation): it comes back empty, once
    def nothing(words):
        return []
    assert one("a [b x/b] c", nothing) == "[b /b]"


def test_a_technical_page_comes_back_as_written_through_a_word_for_word_translation():
    for page in ['<p>Serve (<code>--host 0.0.0.0</code>) here.</p>',
                 "<p><code>aiayn translate</code>'s help, <code>base</code>/<code>big</code>, "
                 "<code>&lt;unk&gt;</code>, 2+2 and 10&nbsp;km.</p>"]:
        assert translate_html(page, Recorder(word_for_word), "en", "es") == page
