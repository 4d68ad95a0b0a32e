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


def test_open_engine_picks_by_path_and_refuses_a_missing_feature_before_loading(tmp_path, copy_data, monkeypatch):
    from helpers import save_run, tiny_model

    from aiayn.decoding import translator
    from aiayn.decoding.engine import EngineOptions, engine_name, open_engine
    from aiayn.errors import UsageError

    run = save_run(tiny_model(120), copy_data / "vocab.model", tmp_path / "run")
    engine = open_engine(run, EngineOptions(device="cpu", batch_size=3, max_input_len=7))
    assert isinstance(engine, translator.Translator) and engine.batch_size == 3
    assert engine.limits().input_tokens == 7 and engine.limits().words is None  # sinusoids: no table, no cap
    assert engine_name(run) == "aiayn" and engine_name(run, "ct2") == "ct2"
    (tmp_path / "ct2").mkdir()
    (tmp_path / "ct2" / "model.bin").write_bytes(b"")
    (tmp_path / "ct2" / "aiayn.json").write_text("{}")
    assert engine_name(tmp_path / "ct2") == "ct2"  # a folder `aiayn export --to ct2` wrote

    def no_loading(*args, **kwargs):
        raise AssertionError("loaded before refusing")

    monkeypatch.setattr(translator.Translator, "load", no_loading)
    with pytest.raises(UsageError, match="ensemble"):
        open_engine([run, run], EngineOptions(alignments=True))
    with pytest.raises(UsageError, match="--glossary needs"):
        open_engine(run, EngineOptions(glossary=True, prefixes=True))
    with pytest.raises(UsageError, match="--search-impl"):
        open_engine(run, EngineOptions(engine="ct2", search_impl="fixed"))
    with pytest.raises(UsageError, match="engine must be one of"):
        open_engine(run, EngineOptions(engine="marian"))


def test_one_word_cap_and_length_sorted_batches():
    from aiayn.config import SearchConfig
    from aiayn.decoding.batches import Limits, length_sorted, limit_batches, word_cap

    assert word_cap(None) is None and word_cap(64) == 63  # BOS and the words each take a row of the table
    search = SearchConfig(max_len_a=1.0, max_len_b=5)
    assert Limits(100, 63).word_limit(search, 80) == 63 and Limits(100, None).word_limit(search, 80) == 85
    sources = [[1, 2], None, [1], [1, 2, 3], [4, 5]]
    assert length_sorted(sources, 2, longest_first=True) == [[3, 0], [4, 2]]  # ties in input order
    assert length_sorted(sources, 2, longest_first=False) == [[2, 0], [4, 3]]
    assert limit_batches(sources, search, 7, 2) == [(7, [2, 0]), (7, [4, 3])]


def test_both_engines_offer_the_protocol_with_one_signature():
    import inspect

    from aiayn.decoding.ct2 import CT2Translator
    from aiayn.decoding.engine import Engine
    from aiayn.decoding.translator import Translator

    for name in ("translate_nbest", "translate", "align_ids", "limits", "unsupported", "weight_bytes"):
        want = list(inspect.signature(getattr(Engine, name)).parameters)
        for cls in (Translator, CT2Translator):
            got = list(inspect.signature(getattr(cls, name)).parameters)
            if name == "translate":  # (self, lines, ...) and a progress keyword
                assert got[:2] == want[:2] and "progress" in got, (cls.__name__, got)
            else:
                assert got[: len(want)] == want, (cls.__name__, name, got)
