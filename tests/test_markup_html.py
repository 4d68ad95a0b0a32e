"""aiayn.markup.html: what passes through untouched, what is translated, and what survives as written."""

from test_markup import Recorder, identity, reverse

from aiayn.markup.html import HtmlDocument, translate_html


def test_untouched_elements_comments_and_the_doctype_pass_through_as_written():
    source = ('<!DOCTYPE html>\n<html lang="en"><head><style>p > b { color: red }</style></head><body>\n'
              '<p>Run <code>ls -la &gt; x</code> now.<!-- a note --></p>\n<pre>keep   this\n  too</pre>\n'
              '<div translate="no"><p>Not this</p></div><p class="x notranslate">Nor this</p>'
              '<p>But <span translate="no">Keep Me</span>.</p><script>var s = "<p>a</p>";</script></body></html>')
    fake = Recorder(identity)
    out = translate_html(source, fake, "en", "es")
    assert fake.calls == [["Run ls -la > x now.", "But Keep Me."]]  # kept inline text stays in the sentence
    assert out == source.replace('lang="en"', 'lang="es"').replace("Run <", "RUN <").replace("> now.", "> NOW.") \
        .replace("<p>But", "<p>BUT")


def test_an_unclosed_script_loses_nothing():
    source = '<p>Hello world.</p><script>var a = "<b>"; if (a < b) { more'
    assert translate_html(source, Recorder(identity), "en", "es") == source.replace("Hello world.", "HELLO WORLD.")


def test_entities_and_whitespace_survive():
    source = "<p>\n  Fish &amp; chips,\n  15&nbsp;€ &copy; here.\n</p>\n\n<p>A&lt;b</p>"
    out = translate_html(source, Recorder(identity), "en", "es")
    assert out == "<p>\n  FISH &amp; CHIPS, 15&nbsp;€ &copy; HERE.\n</p>\n\n<p>A&lt;B</p>"


def test_alt_and_title_are_translated_lang_becomes_the_targets_and_links_keep_their_href():
    source = ('<html lang="en"><p title="A title">See <a href="x.html?a=1&amp;b=2" title="the link">this</a> '
              '<img src="a.png" alt="a red fish"> picture.</p></html>')
    fake = Recorder(reverse)
    out = translate_html(source, fake, "en", "de")
    assert fake.calls == [["See this picture.", "A title", "the link", "a red fish"]]
    # the image follows the word before it ("this"), after its space
    assert out == ('<html lang="de"><p title="title A">picture. <a href="x.html?a=1&amp;b=2" title="link the">this</a> '
                   '<img src="a.png" alt="fish red a">See</p></html>')


def test_block_level_tags_end_a_sentence_and_inline_tags_do_not():
    fake = Recorder(identity)
    translate_html("<ul><li>One <b>two</b> three<li>Four<br>five</ul><h1>Six <em>seven</em></h1>", fake, "en", "es")
    assert fake.calls == [["One two three", "Four", "five", "Six seven"]]


def test_blocks_hold_the_text_with_entities_decoded():
    doc = HtmlDocument("<p>A &amp; <b>B</b></p>")
    assert [b.text for b in doc.blocks] == ["A & B"]
    assert [(s.kind, s.start, s.end) for s in doc.blocks[0].spans] == [("keep", 2, 3), ("wrap", 4, 5)]


def test_a_footnote_mark_stays_on_its_number_not_the_whole_word():
    source = '<p>The word<sup>1</sup> is here, see note<sup><a href="#n2">2</a></sup>.</p>'
    out = translate_html(source, Recorder(reverse), "en", "es")
    assert out == '<p>note<sup><a href="#n2">2</a></sup>. see here, is word<sup>1</sup> The</p>'


def test_numbers_in_text_and_in_attributes_come_back_exactly():
    from test_markup import mangle_numbers

    source = '<p title="Page 2 of 10">Price: 15&nbsp;€ on <b>2020-01-05</b>.</p>'
    out = translate_html(source, Recorder(mangle_numbers), "en", "es")
    assert out == '<p title="Page 2 of 10">Price: 15&nbsp;€ on <b>2020-01-05</b>.</p>'
