"""aiayn.decoding.lines: the text side every engine shares (sentences, source ids, target prefixes, output columns), and
that it imports no torch."""

import subprocess
import sys

import pytest
from helpers import REPO

from aiayn.config import EOS_ID, UNK_ID
from aiayn.data import Vocab
from aiayn.decoding.lines import (
    Layout,
    Translation,
    encode_prefixes,
    encode_sources,
    join_lines,
    score_columns,
    split_lines,
    split_prefixes,
    token_scores,
)
from aiayn.errors import UsageError


def test_imports_no_torch():
    code = "import sys, aiayn.decoding.lines, aiayn.config, aiayn.data.vocab; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_encode_sources_blank_and_overlong(copy_data, capsys):
    vocab = Vocab.load(copy_data / "vocab.model")
    line = " ".join((copy_data / "test.src.txt").read_text().splitlines()[:3])
    full = vocab.encode(line) + [EOS_ID]
    assert len(full) > 4
    out = encode_sources(vocab, ["", line, "  ", line], 4)
    assert out[0] is None and out[2] is None
    assert out[1] == out[3] == full[:3] + [EOS_ID]  # cut to 4 tokens, EOS kept last
    err = capsys.readouterr().err
    assert "input line 2" in err and "input line 4" in err and "--max-input-len 4" in err
    assert encode_sources(vocab, [line], 100) == [full] and not capsys.readouterr().err


def test_split_prefixes_column_or_file():
    assert split_prefixes(["a", "b"]) == (["a", "b"], None)
    assert split_prefixes(["a\tx", "b"]) == (["a", "b"], ["x", ""])
    assert split_prefixes(["a", "b"], ["x", ""]) == (["a", "b"], ["x", ""])
    for lines, prefix_lines, says in [(["a\tb\tc"], None, "3 tab-separated columns"),
                                      (["a\tx"], ["y"], "not both"), (["a", "b"], ["x"], "--prefix has 1 lines")]:
        with pytest.raises(UsageError, match=says):
            split_prefixes(lines, prefix_lines)


def test_encode_prefixes_refuses_a_piece_outside_the_vocabulary(copy_data):
    vocab = Vocab.load(copy_data / "vocab.model")
    word = (copy_data / "test.tgt.txt").read_text().split()[0]
    ids = encode_prefixes(vocab, [word, ""])
    assert ids[0] == vocab.target.encode(word) and ids[1] == [] and EOS_ID not in ids[0]
    unknown = "\u6f22\u5b57"  # not in the copy task's pieces
    assert UNK_ID in vocab.target.encode(unknown)
    with pytest.raises(UsageError, match="input line 2: the prefix piece"):
        encode_prefixes(vocab, [word, unknown])


def test_score_columns():
    hyp = Translation("a b", -1.23456, [5, 6], [-0.5, -0.25, -0.125])
    assert score_columns(hyp, "sentence") == "\t-1.2346"
    assert score_columns(hyp, "tokens") == "\t-1.2346\t-0.5000 -0.2500 -0.1250"
    assert token_scores(hyp) == "-0.5000 -0.2500 -0.1250"


def test_split_lines_and_join_lines_by_hand():
    lines = ["He came.  She left! Did they?", "", "One sentence.", "Kept whole. With a prefix."]
    sentences, prefixes, layouts = split_lines(lines, ["", "", "", "Así"])
    assert sentences == ["He came.", "She left!", "Did they?", "", "One sentence.", "Kept whole. With a prefix."]
    assert prefixes == ["", "", "", "", "", "Así"]
    assert layouts[0] == Layout(0, ("  ", " ")) and layouts[1] == Layout(3, ())
    assert split_lines(lines)[1] is None
    t = Translation
    nbests = [[t("A.", -1.0, [1], [-1.0, -1.0]), t("A2.", -2.0, [2], [-2.0, -2.0])],
              [t("B!", -3.0, [3, 4], [-1.0] * 3)], [t("C?", -0.5, [5], [-0.5, -0.5])],
              [t("", 0.0, [])], [t("D.", -1.0, [6])], [t("E.", -2.0, [7])]]
    joined = join_lines(nbests, layouts)
    best, second = joined[0]
    # scores weighted by |Y| = tokens + EOS: (2 * -1 + 3 * -3 + 2 * -0.5) / 7; the second: sentence 1's second
    assert best == t("A.  B! C?", -12 / 7, [1, 3, 4, 5], [-1.0, -1.0, -1.0, -1.0, -1.0, -0.5, -0.5])
    assert second.text == "A2.  B! C?" and second.score == pytest.approx((2 * -2 - 9 - 1) / 7)
    assert joined[1:] == [[t("", 0.0, [])], [t("D.", -1.0, [6])], [t("E.", -2.0, [7])]]
