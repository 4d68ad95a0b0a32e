"""The measured fast paths of aiayn.fast, each against the reference it stands in for."""

import math
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aiayn.fast import (
    Dropout,
    LayerNorm,
    keep_freed_memory,
    row_argmax,
    row_topk,
    set_layer_norm_output,
    use_matmul_attention,
)
from aiayn.model import scaled_dot_product_attention


def test_dropout_mask_rate_scale_gradient_and_seed():
    drop = Dropout(0.1).train()
    x = torch.rand(1000, 1000) + 1.0
    x.requires_grad_()
    torch.manual_seed(3)
    y = drop(x)
    kept = y.ne(0)
    rate = 1.0 - kept.float().mean().item()
    assert abs(rate - 0.1) < 5 * math.sqrt(0.1 * 0.9 / x.numel())  # 5 sigma
    torch.testing.assert_close(y[kept], x[kept] / 0.9)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / 0.9)
    torch.manual_seed(3)
    assert torch.equal(drop(x.detach()), y.detach())  # the global seed governs the mask
    assert not torch.equal(drop(x.detach()), y.detach())
    assert drop(x.detach().bfloat16()).dtype == torch.bfloat16
    assert torch.equal(drop.eval()(x), x)
    # Four elements share one 64-bit draw: neighbours at every lag must be kept independently (P = 0.9^2).
    flat = kept.flatten().float()
    for lag in (1, 2, 3, 4, 5):
        both = (flat[:-lag] * flat[lag:]).mean().item()
        assert abs(both - 0.81) < 5 * math.sqrt(0.81 * 0.19 / flat.numel()), lag
    for p in (0.3, 0.5):  # other rates, by position within the draw too
        kept_p = Dropout(p).train()(torch.ones(400, 1000)).ne(0).view(-1, 4).float().mean(0)
        assert (kept_p - (1 - p)).abs().max() < 5 * math.sqrt(p * (1 - p) / 100_000)


def test_layer_norm_is_torchs_and_stays_16_bit_under_autocast():
    torch.manual_seed(0)
    ours, ref = LayerNorm(64, eps=1e-6), nn.LayerNorm(64, eps=1e-6)
    with torch.no_grad():
        for p in (ours.weight, ours.bias):
            p.normal_()
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 5, 64) * 3 + 1
    assert torch.equal(ours(x), ref(x))  # outside autocast: nn.LayerNorm itself
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = ours(x.requires_grad_())
        ref_low = ref(x)
    assert low.dtype == torch.bfloat16 and ref_low.dtype == torch.float32  # autocast alone gives fp32
    torch.testing.assert_close(low.float(), ref_low, rtol=2e-2, atol=2e-2)  # bf16 rounding of the same values
    low.float().pow(2).sum().backward()  # gradients reach the fp32 parameters
    assert ours.weight.grad.dtype == torch.float32 and ours.weight.grad.abs().sum() > 0
    set_layer_norm_output(ours, autocast=False)  # the A/B switch: nn.LayerNorm's fp32 output again
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(ours(x), ref(x))


def test_matmul_attention_equals_fused_kernel():
    # The two kernels use_matmul_attention chooses between compute the same eq. 1: with a padding mask, causal,
    # and causal over the last n of m positions (a decoding step with a cache).
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 5)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    ours, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    ours, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    last, _ = scaled_dot_product_attention(q[:, :, -2:], k, v, is_causal=True)
    torch.testing.assert_close(last, ours[:, :, -2:])
    # The choice: matmuls on the CPU for fp32 decoding and bf16 training; the fused kernel for fp32 training, bf16
    # decoding and off the CPU (a device other than the CPU stands in for a GPU here: the choice reads only the
    # device's type).
    assert use_matmul_attention(q, decoding=True)
    assert use_matmul_attention(q.bfloat16(), decoding=False)
    assert not use_matmul_attention(q, decoding=False)
    assert not use_matmul_attention(q.bfloat16(), decoding=True)
    gpu_q = q.to("meta")
    assert not use_matmul_attention(gpu_q, decoding=True)
    assert not use_matmul_attention(gpu_q.bfloat16(), decoding=False)


@pytest.mark.parametrize("v", [32000, 37000, 8000, 8030, 100])  # blocks divide V; a partial last block; V too small
def test_row_topk_equals_topk(v):
    torch.manual_seed(0)
    x = torch.randn(5, v)
    x[1, :] = x[1, 0]  # a row of ties: any k of them are right
    x[2, -3:] = 50.0  # the best in the last (possibly partial) block
    x[3, -70:-3] = 40.0  # the best in the last whole blocks, and the partial block's after them
    x[3, -3:] = 30.0
    for k in (1, 8):
        values, index = row_topk(x, k)
        ref, _ = x.topk(k, dim=1)
        torch.testing.assert_close(values, ref, rtol=0, atol=0)
        torch.testing.assert_close(x.gather(1, index), values, rtol=0, atol=0)
        assert all(len(set(row)) == k for row in index.tolist())


def test_row_argmax_without_the_kernels_is_row_topks(monkeypatch):
    from aiayn import native

    monkeypatch.setattr(native, "available", lambda: False)
    monkeypatch.setattr(native, "row_argmax", None)  # not called
    x = torch.randn(5, 3000)
    x[1, 2900] = 40.0
    assert torch.equal(row_argmax(x), x.argmax(1))
    assert torch.equal(row_argmax(x.double()), x.argmax(1))  # not fp32: row_topk's too


def test_bound_kernel_cache_sets_a_default_and_keeps_the_users(monkeypatch):
    from aiayn.fast import KERNEL_CACHE, bound_kernel_cache

    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):  # oneDNN's and ideep's
        monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
        monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
        assert bound_kernel_cache()
        assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == os.environ["LRU_CACHE_CAPACITY"] == str(KERNEL_CACHE)
        monkeypatch.setenv(name, "256")  # the user's choice wins
        assert not bound_kernel_cache() and os.environ[name] == "256"


def _observed(out, ref) -> str:
    """'yes' (bitwise equal), 'to rounding' (close) or 'no', for a fast path's output against its reference's."""
    if out.dtype != ref.dtype or out.shape != ref.shape:
        return "no"
    if torch.equal(out, ref):
        return "yes"
    return "to rounding" if torch.allclose(out.float(), ref.float(), rtol=1e-4, atol=1e-5) else "no"


def _dropout():
    x = torch.ones(1 << 16)
    torch.manual_seed(0)
    fast = Dropout(0.1).train()(x)
    torch.manual_seed(0)
    assert abs((fast == 0).float().mean().item() - round(0.1 * 2**15) / 2**15) < 0.01  # p to within 2^-16
    return fast, nn.Dropout(0.1).train()(x)


def _layer_norm():
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return LayerNorm(16)(x), nn.LayerNorm(16)(x)


def _matmul_attention():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32) for _ in range(3))
    return scaled_dot_product_attention(q, k, v)[0], F.scaled_dot_product_attention(q, k, v)


def _row_topk():
    x = torch.randn(16, 8_000)
    return row_topk(x, 8)[0], x.topk(8, dim=1)[0]


def _row_argmax():
    x = torch.randn(16, 8_000)
    x[3, 100] = x[3, 7_000] = 50.0  # equal maxima: the first, as torch's
    return row_argmax(x), x.argmax(1)


def _process_setting(apply):
    def check(monkeypatch):
        for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
            monkeypatch.setenv(name, os.environ.get(name, "1024"))  # restored after the test
        torch.manual_seed(0)
        a, b = torch.randn(64, 64), torch.randn(64, 64)
        before = a @ b
        apply()
        return a @ b, before
    return check


def _native():
    from aiayn import native

    if not native.available():
        return None
    torch.manual_seed(0)
    q, keys, values = torch.randn(6, 1, 4 * 32) * 4, torch.randn(20, 8, 4, 32), torch.randn(20, 8, 4, 32)
    k, v = (x[:17, :6].permute(1, 2, 0, 3) for x in (keys, values))  # 6 of 8 rows, 17 positions: (6, 4, 17, 32)
    ref = scaled_dot_product_attention(q.view(6, 1, 4, 32).transpose(1, 2), k, v)[0]
    return native.self_attention(q, keys, values, 6, 17), ref.transpose(1, 2).reshape(6, 1, 4 * 32)


_CLAIMS = {"Dropout": _dropout, "LayerNorm": _layer_norm, "use_matmul_attention": _matmul_attention,
           "row_topk": _row_topk, "row_argmax": _row_argmax, "keep_freed_memory": _process_setting(keep_freed_memory),
           "bound_kernel_cache": _process_setting(lambda: __import__("aiayn.fast").fast.bound_kernel_cache()),
           "native": _native}


def test_what_changes_table_says_what_the_code_does(monkeypatch):
    """aiayn/fast.py's table: every fast path it names, and whether it computes what its reference does ('yes',
    'to rounding', 'no'), observed on the code."""
    import re

    import aiayn.fast as fast

    rows = re.findall(r"^    (\w+) +.+?  (yes|no|to rounding)  ", fast.__doc__, flags=re.M)
    assert [name for name, _ in rows] == list(_CLAIMS) and all(hasattr(fast, name) for name, _ in rows)
    unbuilt = []
    for name, claim in rows:
        check = _CLAIMS[name]
        observed = check(monkeypatch) if name in ("keep_freed_memory", "bound_kernel_cache") else check()
        if observed is None:  # aiayn.native without a C compiler
            unbuilt.append(name)
            continue
        assert _observed(*observed) == claim, name
    if unbuilt:
        pytest.skip(f"not built here: {unbuilt}")
