"""The decoding package: what it imports, and the word-alignment maths every engine shares (aiayn.decoding.alignment;
the attention recorded from a model is tested in test_viz.py)."""

import subprocess
import sys

import pytest
import torch
from helpers import REPO

from aiayn.decoding.alignment import alignment_layer, format_alignment, word_alignment, word_ids


def _loaded_after(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nprint(sorted(m for m in sys.modules if m.startswith(('aiayn.', 'torch'))))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return eval(out.stdout)


def test_the_package_imports_nothing_and_ct2s_engine_no_torch():
    assert _loaded_after("import aiayn.decoding") == ["aiayn.decoding"]
    loaded = _loaded_after("import aiayn.decoding.ct2")
    assert "aiayn.decoding.ct2" in loaded and not [m for m in loaded if m == "torch" or m.startswith("torch.")]


def test_a_source_word_weighs_the_sum_of_its_pieces_a_target_word_the_mean():
    # source "▁a ▁b c": b is split; the target word (one piece) puts 0.4 on a and 0.3 + 0.3 on b's pieces
    assert word_alignment(torch.tensor([[0.4, 0.3, 0.3]]), word_ids(["\u2581a", "\u2581b", "c"]), [0]) == [(1, 0)]
    # target "▁x y": the mean of its two rows decides (rows alone: a, then b)
    attn = torch.tensor([[0.9, 0.1], [0.0, 1.0]])
    assert word_alignment(attn, [0, 1], word_ids(["\u2581x", "y"])) == [(1, 0)]


def test_word_alignment_checks_shapes_and_takes_empty_input():
    with pytest.raises(ValueError, match="does not match"):
        word_alignment(torch.zeros(2, 3), [0, 1], [0, 1])
    assert word_alignment(torch.zeros(0, 3), [0, 1, 2], []) == []
    assert format_alignment([]) == "" and format_alignment([(2, 0), (0, 1)]) == "2-0 0-1"
    assert alignment_layer(6) == 5
