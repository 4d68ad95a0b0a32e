"""The sentence splitter (aiayn.decoding.sentences): cuts where a sentence ends and a capitalized one begins, never
inside an abbreviation or after an initial, and the pieces join back to the line."""

from __future__ import annotations

import pytest

from aiayn.decoding.sentences import split_sentences


@pytest.mark.parametrize("line, sentences", [
    ("He came. She left! Did they? Yes.", ["He came. ", "She left! ", "Did they? ", "Yes."]),
    ('He said "Go." Then he went.', ['He said "Go." ', "Then he went."]),
    ("Mr. Smith and Dr. Jones met at St. Paul.", ["Mr. Smith and Dr. Jones met at St. Paul."]),
    ("J. R. R. Tolkien wrote it.", ["J. R. R. Tolkien wrote it."]),  # a single letter before the stop: an initial
    ("Version 2.5 is out. it is lower case.", ["Version 2.5 is out. it is lower case."]),  # no capital: no cut
    ("¿Qué? ¡Nada! Bien.", ["¿Qué? ", "¡Nada! ", "Bien."]),
    ("Wait... What?", ["Wait... ", "What?"]),
    ("(He wept.)  Then Jesus spoke.", ["(He wept.)  ", "Then Jesus spoke."]),  # closing bracket, two spaces
    ("One sentence without a stop", ["One sentence without a stop"]),
    ("", []),
])
def test_sentences_are_cut_conservatively(line, sentences):
    assert split_sentences(line) == sentences
    assert "".join(split_sentences(line)) == line


def test_serve_uses_the_same_splitter():
    segments = pytest.importorskip("aiayn.serve.segments")
    assert segments.split_sentences is split_sentences
