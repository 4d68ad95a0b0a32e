"""LibreTranslate's text handling (aiayn.serve.segments): a multi-line text keeps its lines, a line is cut into
sentences conservatively, an HTML fragment keeps its tags; and the same through POST /translate."""

from __future__ import annotations

import html

import pytest

pytest.importorskip("fastapi")

from serving import Send, app_of, call, copy_translator  # noqa: E402

from aiayn.serve import LanguagePair  # noqa: E402
from aiayn.serve.segments import html_pieces, join, text_pieces  # noqa: E402


def _marked(parts, escape=False) -> str:
    """The pieces joined with each translated one written as [it]: what went to the model, and where it came back."""
    return join(parts, [f"[{p.text}]" for p in parts if p.translate], escape)


def test_lines_blank_lines_and_outer_spaces_are_kept():
    text = "  In the beginning was the Word.\nGod is love.  \n\n\tAmen\n"
    assert _marked(text_pieces(text)) == "  [In the beginning was the Word.]\n[God is love.]  \n\n\t[Amen]\n"
    assert join(text_pieces(text), [p.text for p in text_pieces(text) if p.translate]) == text
    assert _marked(text_pieces("one line")) == "[one line]"
    assert [p.text for p in text_pieces("\n \n") if p.translate] == []


def test_html_keeps_tags_attributes_and_untranslated_elements():
    fragment = ('<p class="intro" title="A. B.">Hello <b>world</b>.</p><br/>A &amp; B<!-- note -->'
                '<script>var s = "<b>x</b>";</script><style>p { color: red }</style><code>x &lt; y</code>'
                "<pre>keep\n me</pre>")
    assert _marked(html_pieces(fragment), escape=True) == (
        '<p class="intro" title="A. B.">[Hello] <b>[world]</b>[.]</p><br/>[A &amp; B]<!-- note -->'
        '<script>var s = "<b>x</b>";</script><style>p { color: red }</style><code>x &lt; y</code>'
        "<pre>keep\n me</pre>")
    odd = "<!DOCTYPE html><![CDATA[x < y]]><![if IE]>old<![endif]><?php x ?></p junk>"
    assert _marked(html_pieces(odd)) == "<!DOCTYPE html><![CDATA[x < y]]><![if IE]>[old]<![endif]><?php x ?></p>"
    parts = html_pieces("<i>a &lt; b</i>")
    assert [p.text for p in parts if p.translate] == ["a < b"]  # the model reads text, not entities
    assert join(parts, ["x < y & z"], escape=True) == "<i>x &lt; y &amp; z</i>"  # and its answer is escaped


@pytest.fixture(scope="module")
def setup(copy_data):
    translator, lines = copy_translator(copy_data)
    return translator, lines


def test_translate_keeps_lines_and_tags(setup):
    translator, lines = setup
    a, b, c = translator.translate(lines[:3])
    app = app_of(translator, pair=LanguagePair("en", "es"))
    multi, form, tagged, alts, tags_only = call(app, [
        ("POST", "/translate", {"q": f"{lines[0]}\n\n  {lines[1]}\n", "source": "en", "target": "es"}),
        ("POST", "/translate", Send(data={"q": [lines[0], f"{lines[1]}\n{lines[2]}"]})),
        ("POST", "/translate", {"q": f'<p id="x">{lines[0]} <b>{lines[1]}</b></p>', "format": "html"}),
        ("POST", "/translate", {"q": f"{lines[0]}\n{lines[1]}", "alternatives": 2}),
        ("POST", "/translate", {"q": "<br/><img src='a.png'>", "format": "html"}),
    ])
    assert multi.status_code == 200 and multi.json()["translatedText"] == f"{a}\n\n  {b}\n"
    assert form.json()["translatedText"] == [a, f"{b}\n{c}"]
    assert tagged.json()["translatedText"] == f'<p id="x">{html.escape(a, quote=False)} <b>' \
                                              f"{html.escape(b, quote=False)}</b></p>"
    answer = alts.json()
    assert answer["translatedText"] == f"{a}\n{b}" and len(answer["alternatives"]) == 2
    assert all(alt.count("\n") == 1 for alt in answer["alternatives"]) and len(answer["scores"]) == 3
    best = [hs[0].score for hs in translator.translate_nbest(lines[:2])]
    assert answer["scores"][0] == pytest.approx(sum(best) / 2, abs=1e-4)
    assert tags_only.json()["translatedText"] == "<br/><img src='a.png'>"
