"""benchmarks/table1.py (Table 1 measured) on small n: its layers against independent implementations, its FLOPs
against the closed forms, its path lengths and graph depths against what can be worked out by hand."""

import importlib.util
import math

import pytest
import torch
from helpers import REPO


@pytest.fixture(scope="module")
def table1():
    spec = importlib.util.spec_from_file_location("table1", REPO / "benchmarks" / "table1.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_loop_lstm_equals_torch_lstm(table1):
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(16, 16, batch_first=True)
    x = torch.randn(2, 9, 16)
    expected, _ = lstm(x)
    torch.testing.assert_close(table1.LoopLSTM.like(lstm)(x), expected, rtol=1e-5, atol=1e-6)


def test_self_attention_equals_torch_multihead_attention(table1):
    torch.manual_seed(0)
    d, h = 16, 4
    mha = torch.nn.MultiheadAttention(d, h, batch_first=True)
    ours = table1.SelfAttention(d, h)
    with torch.no_grad():
        ours.qkv.weight.copy_(mha.in_proj_weight)
        ours.qkv.bias.copy_(mha.in_proj_bias)
        ours.out.weight.copy_(mha.out_proj.weight)
        ours.out.bias.copy_(mha.out_proj.bias)
    x = torch.randn(2, 7, d)
    torch.testing.assert_close(ours(x), mha(x, x, x, need_weights=False)[0], rtol=1e-5, atol=1e-6)


def test_restricted_attention_is_local_and_full_when_r_covers_everything(table1):
    torch.manual_seed(0)
    n, d = 12, 8
    q, k, v = torch.randn(3, 1, n, d).unbind(0)
    # a neighbourhood wider than the sequence is plain attention
    torch.testing.assert_close(table1.attention_core(q, k, v, 2, r=2 * n), table1.attention_core(q, k, v, 2))
    # with r = 4 (|i - j| <= 2), changing key/value 9 changes outputs 7..11 only
    k2, v2 = k.clone(), v.clone()
    k2[0, 9] += 1.0
    v2[0, 9] += 1.0
    changed = (table1.attention_core(q, k, v, 2, r=4) - table1.attention_core(q, k2, v2, 2, r=4)).abs().sum(-1)[0] > 0
    assert changed.nonzero().flatten().tolist() == [7, 8, 9, 10, 11]


@pytest.mark.parametrize("kind", ["self-attention", "self-attention core", "recurrent", "convolutional", "restricted"])
def test_counted_flops_equal_the_closed_forms(table1, kind):
    n, d, r = 23, 16, 6  # 23: the last block of r / 2 = 3 queries is padded
    layer = table1.make_layer(kind, d, r, timing=False)
    assert table1.count_flops(layer, n, d) == table1.closed_form_flops(kind, n, d, r=r)


def test_path_lengths_by_hand(table1):
    n = 16
    assert table1.path_length("self-attention", n) == 1  # every position attends to every other
    assert table1.path_length("convolutional", n) == 15  # a centred k = 3 kernel moves one position per layer
    assert table1.path_length("convolutional (dilated)", n) == 3  # causal, dilations 1, 3, 9 reach 2 + 6 + 18 >= 15
    assert table1.path_length("restricted", n, r=8) == 4  # |i - j| <= 4 per layer: ceil(15 / 4)
    assert table1.path_length("recurrent", n) == 16  # x_0 enters at step 0, y_15 leaves at step 15


def test_sequential_operations_constant_or_linear_in_n(table1):
    depth = {kind: [table1.graph_depth(table1.make_layer(kind, 8, 4, timing=False), n, 8) for n in (4, 8, 16)]
             for kind in table1.KINDS}
    for kind in ("self-attention", "convolutional", "restricted"):
        assert depth[kind][0] == depth[kind][1] == depth[kind][2], kind
    a, b, c = depth["recurrent"]
    assert c - b == 2 * (b - a) > 0  # the same number of operations per recurrent step: linear in n


def test_fit_and_crossover_by_hand(table1):
    assert table1.fit_exponent([1, 2, 4], [3, 12, 48]) == pytest.approx(2.0)
    # a = n^2 against b = 8 n: a overtakes b at n = 8; log-log interpolation between 4 and 16 finds it exactly
    assert table1.crossover([4, 16], [16, 256], [32, 128]) == pytest.approx(8.0)
    assert table1.crossover([4, 16], [1, 2], [3, 4]) is None


def test_quick_table_prints(table1, capsys):
    res = table1.measure([16, 32, 64], d=32, r=8, depth_ns=[4, 8], path_ns=[8], fit_from=16, say=lambda s: None)
    assert res["flops_exponent"]["recurrent"] == pytest.approx(1.0)
    assert res["flops_exponent"]["self-attention core"] == pytest.approx(2.0)
    assert res["crossover_flops"] == pytest.approx(64.0)  # 8nd^2 + 4n^2d = 16nd^2 at n = 2d
    text = table1.format_table(res)
    assert "| recurrent | O(n d^2) |" in text and math.isfinite(res["time_exponent"]["self-attention"])
