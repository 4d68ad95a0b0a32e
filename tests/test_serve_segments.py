"""LibreTranslate's text handling (aiayn.serve.segments): a multi-line text keeps its lines, a line is cut into
sentences conservatively; format=html through the markup layer (aiayn.markup.html): whole sentences across inline
tags, each tag once around the words aligned to its words, alternatives too; and the same through POST /translate."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

pytest.importorskip("fastapi")

from serving import Send, app_of, call, copy_translator  # noqa: E402

from aiayn.markup.engines import translate_fn  # noqa: E402
from aiayn.markup.html import translate_html  # noqa: E402
from aiayn.serve import LanguagePair  # noqa: E402
from aiayn.serve.segments import join, text_pieces  # noqa: E402


def _marked(parts) -> str:
    """The pieces joined with each translated one written as [it]: what went to the model, and where it came back."""
    return join(parts, [f"[{p.text}]" for p in parts if p.translate])


def test_lines_blank_lines_and_outer_spaces_are_kept():
    text = "  In the beginning was the Word.\nGod is love.  \n\n\tAmen\n"
    assert _marked(text_pieces(text)) == "  [In the beginning was the Word.]\n[God is love.]  \n\n\t[Amen]\n"
    assert join(text_pieces(text), [p.text for p in text_pieces(text) if p.translate]) == text
    assert _marked(text_pieces("one line")) == "[one line]"
    assert [p.text for p in text_pieces("\n \n") if p.translate] == []


@pytest.fixture(scope="module")
def setup(copy_data):
    translator, lines = copy_translator(copy_data)
    return translator, lines


def test_translate_keeps_lines(setup):
    translator, lines = setup
    a, b, c = translator.translate(lines[:3])
    app = app_of(translator, pair=LanguagePair("en", "es"))
    multi, form, alts = call(app, [
        ("POST", "/translate", {"q": f"{lines[0]}\n\n  {lines[1]}\n", "source": "en", "target": "es"}),
        ("POST", "/translate", Send(data={"q": [lines[0], f"{lines[1]}\n{lines[2]}"]})),
        ("POST", "/translate", {"q": f"{lines[0]}\n{lines[1]}", "alternatives": 2}),
    ])
    assert multi.status_code == 200 and multi.json()["translatedText"] == f"{a}\n\n  {b}\n"
    assert form.json()["translatedText"] == [a, f"{b}\n{c}"]
    answer = alts.json()
    assert answer["translatedText"] == f"{a}\n{b}" and len(answer["alternatives"]) == 2
    assert all(alt.count("\n") == 1 for alt in answer["alternatives"]) and len(answer["scores"]) == 3
    best = [hs[0].score for hs in translator.translate_nbest(lines[:2])]
    assert answer["scores"][0] == pytest.approx(sum(best) / 2, abs=1e-4)


class _Tags(HTMLParser):
    """The start and end tags of a fragment in order, and whether they nest (every end closes the innermost open)."""

    def __init__(self, fragment: str):
        super().__init__()
        self.starts, self.open, self.well_formed = [], [], True
        self.feed(fragment)

    def handle_starttag(self, tag, attrs):
        self.starts.append((tag, attrs))
        if tag not in ("br", "img"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        self.well_formed &= bool(self.open) and self.open.pop() == tag


ISSUE = ('In the beginning was the Word, and the Word was with <b>God</b>. He came to <a href="x.html">his own</a> '
         "people.")


def test_html_is_translated_as_whole_sentences_with_each_tag_once(setup):
    """format=html: the model reads whole sentences (the issue's text: two, not cut at the bold and the link); the
    answer is the markup layer's with the engine's alignments (aiayn.markup.html.translate_html, as `aiayn translate`
    gives it), each tag once and nested; alternatives, each from the k-th translation of every sentence."""
    translator, _ = setup
    seen = []
    aligned = translate_fn(translator)

    def recording(sentences):
        seen.extend(sentences)
        return aligned(sentences)

    expect = translate_html(ISSUE, recording, "en", "es")
    assert seen == ["In the beginning was the Word, and the Word was with God.", "He came to his own people."]
    answer, alts = call(app_of(translator, pair=LanguagePair("en", "es")), [
        ("POST", "/translate", {"q": ISSUE, "format": "html"}),
        ("POST", "/translate", {"q": [ISSUE, "<p>Go <i>home</i> now.</p>"], "format": "html", "alternatives": 2}),
    ])
    assert answer.json()["translatedText"] == expect
    for text in [expect, *alts.json()["alternatives"][0], *alts.json()["alternatives"][1]]:
        tags = _Tags(text)
        assert tags.well_formed and tags.open == []
        assert sorted(tag for tag, _ in tags.starts) in (["a", "b"], ["i", "p"])
    assert ("a", [("href", "x.html")]) in _Tags(expect).starts
    assert len(alts.json()["alternatives"][0]) == 2 and len(alts.json()["scores"][0]) == 3
    assert alts.json()["translatedText"][0] == expect


def test_html_keeps_what_is_not_text(setup):
    """Tags, attributes, comments, script, style and code as written; an unclosed <script> keeps the text after it;
    entities survive; a fragment with no text comes back as it was."""
    translator, lines = setup
    kept = ('<p class="intro">{}</p><br/><!-- note --><script>var s = "<b>x</b>";</script>'
            "<style>p {{ color: red }}</style><code>x &lt; y</code><pre>keep\n me</pre>")
    entities = "<p>A &amp; B &copy; 10&nbsp;km &lt;b&gt;.</p>"
    unclosed = f"<p>{lines[0]}</p><script>var a = 1;<p>{lines[1]} after</p>"
    got = call(app_of(translator, pair=LanguagePair("en", "es")), [
        ("POST", "/translate", {"q": kept.format(lines[0]), "format": "html"}),
        ("POST", "/translate", {"q": entities, "format": "html"}),
        ("POST", "/translate", {"q": unclosed, "format": "html"}),
        ("POST", "/translate", {"q": "<br/><img src='a.png'>", "format": "html"}),
        ("POST", "/translate", {"q": "<p>2020</p>", "format": "html"}),
    ])
    assert [r.status_code for r in got] == [200] * 5, [r.text for r in got]
    tagged, entity, script, tags_only, number = (r.json()["translatedText"] for r in got)
    plain = translator.translate([lines[0]])[0]
    assert tagged == kept.format(plain)
    assert "&amp;" in entity and "&copy;" in entity and "<b>" not in entity  # text escaped, symbols as written
    assert script == f"<p>{plain}</p><script>var a = 1;<p>{lines[1]} after</p>"
    assert tags_only == "<br/><img src='a.png'>"
    assert number == "<p>2020</p>"
