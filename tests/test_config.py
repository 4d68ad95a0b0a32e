"""aiayn.config: the paper's presets as Table 3 gives them, and a config that refuses what it cannot be."""

import pytest

from aiayn.config import PRESETS, ModelConfig
from aiayn.errors import UsageError


def _shape(cfg):
    return (cfg.n_enc_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.d_k, cfg.d_v, cfg.dropout, cfg.label_smoothing)


def test_base_and_big_are_table3s():
    assert _shape(ModelConfig.preset("base")) == (6, 512, 2048, 8, 64, 64, 0.1, 0.1)
    assert _shape(ModelConfig.preset("big")) == (6, 1024, 4096, 16, 64, 64, 0.3, 0.1)
    assert ModelConfig.preset("E").positional == "learned" and ModelConfig.preset("base").positional == "sinusoidal"
    # row (A): h x d_k kept at 512 while h varies
    assert [(c.n_heads, c.d_k) for c in map(ModelConfig.preset, ("A1", "A2", "A3", "A4"))] == [
        (1, 512), (4, 128), (16, 32), (32, 16)]


def test_every_preset_round_trips_through_json():
    for name in PRESETS:
        cfg = ModelConfig.preset(name)
        assert ModelConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("change, says", [
    ({"d_model": 511}, "d_model must be even"),
    ({"dropout": 1.0}, "dropout must lie in"),
    ({"n_heads": "8"}, "n_heads must be an integer"),
    ({"positional": "rotary"}, "positional must be"),
    ({"activation": "gelu"}, "activation must be one of relu, swish"),
    ({"output_bias": 1}, "output_bias must be true or false"),
    ({"widht": 3}, "widht"),
])
def test_bad_fields_are_refused(change, says):
    with pytest.raises(UsageError, match=says):
        ModelConfig.from_dict({**ModelConfig.preset("tiny").to_dict(), **change})


def test_word_limit_is_max_output_lengths_for_one_sentence():
    import torch

    from aiayn.config import PAD_ID, SearchConfig
    from aiayn.decoding.search import max_output_lengths

    src = torch.tensor([[5, 6, 7, 3], [5, 3, PAD_ID, PAD_ID], [3, PAD_ID, PAD_ID, PAD_ID]])
    for search, cap in [(SearchConfig(), None), (SearchConfig(max_len_a=0.5, max_len_b=1, min_len=2), None),
                        (SearchConfig(max_len_a=1.3, max_len_b=2), 4)]:
        expect = max_output_lengths(src, search.max_len_a, search.max_len_b, search.min_len, cap).tolist()
        assert [search.word_limit(int(row.ne(PAD_ID).sum()), cap) for row in src] == expect
