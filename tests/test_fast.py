"""The measured fast paths of aiayn.fast, each against the reference it stands in for."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aiayn.config import ModelConfig
from aiayn.fast import (
    Dropout,
    LayerNorm,
    PackedLinear,
    inference_copy,
    keep_freed_memory,
    row_topk,
    use_matmul_attention,
)
from aiayn.model import Transformer, scaled_dot_product_attention


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
    # The choice: matmuls for weights, decoding and CPU bf16; the fused kernel for fp32 training.
    assert use_matmul_attention(q, decoding=False, need_weights=True)
    assert use_matmul_attention(q, decoding=True, need_weights=False)
    assert use_matmul_attention(q.bfloat16(), decoding=False, need_weights=False)
    assert not use_matmul_attention(q, decoding=False, need_weights=False)


@pytest.mark.parametrize("v", [32000, 37000, 100])  # blocks divide V; V padded to whole blocks; V too small
def test_row_topk_equals_topk(v):
    torch.manual_seed(0)
    x = torch.randn(5, v)
    x[1, :] = x[1, 0]  # a row of ties: any k of them are right
    x[2, -3:] = 50.0  # the best in the last (possibly partial) block
    for k in (1, 8):
        values, index = row_topk(x, k)
        ref, _ = x.topk(k, dim=1)
        torch.testing.assert_close(values, ref, rtol=0, atol=0)
        torch.testing.assert_close(x.gather(1, index), values, rtol=0, atol=0)
        assert all(len(set(row)) == k for row in index.tolist())


def test_inference_copy_is_the_model_in_another_dtype():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).train()
    before = copy.deepcopy(model.state_dict())
    # same dtype, unpacked: the model itself, in eval mode
    assert inference_copy(model, packed=False) is model and not model.training
    low = inference_copy(model, "bf16", packed=False)
    assert low is not model and next(low.parameters()).dtype == torch.bfloat16 and not low.training
    for name, t in model.state_dict().items():  # the original is untouched
        assert t.dtype == torch.float32 and torch.equal(t, before[name])
        torch.testing.assert_close(low.state_dict()[name], t.bfloat16(), rtol=0, atol=0)
    assert inference_copy(low, "bf16", packed=False) is low


def skip_unless_packing_works(dtype: torch.dtype) -> None:
    from aiayn.fast import _packing_works

    if not _packing_works(dtype):
        pytest.skip(f"oneDNN's packed linear does not run in {dtype} with this torch build and CPU")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_linear_equals_linear(dtype):
    skip_unless_packing_works(dtype)
    torch.manual_seed(0)
    linear = nn.Linear(96, 200).to(dtype)
    packed = PackedLinear(linear.weight, linear.bias)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for x in (torch.randn(7, 96), torch.randn(3, 5, 96), torch.randn(5, 3, 96).transpose(0, 1)):  # 2-D, 3-D, strided
        x = x.to(dtype)
        with torch.no_grad():
            torch.testing.assert_close(packed(x), linear(x), **tol)
    no_bias = PackedLinear(linear.weight, None)
    with torch.no_grad():
        torch.testing.assert_close(no_bias(x), F.linear(x, linear.weight), **tol)


def _calls(module: nn.Module) -> list:
    calls = []
    module.register_forward_hook(lambda *_: calls.append(1))
    return calls


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_packed_copy_decodes_as_the_model(dtype):
    # Every projection packed, the tied output projection too (and it is the one that runs); logits and beam search
    # as the unpacked copy's; the model passed in untouched.
    from aiayn.search import SearchConfig, beam_search

    skip_unless_packing_works(torch.float32 if dtype == "fp32" else torch.bfloat16)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval()
    before = copy.deepcopy(model.state_dict())
    q = inference_copy(model, dtype)  # packed is the default on CPU
    ref = inference_copy(model, dtype, packed=False)
    assert q is not model and getattr(q, "packed", False) and inference_copy(q, dtype) is q
    assert not any(isinstance(m, nn.Linear) for m in q.modules())
    assert sum(isinstance(m, nn.Linear) for m in model.modules()) == sum(
        isinstance(m, PackedLinear) for m in q.modules()) > 0
    calls = _calls(q.output_logits)
    src = torch.randint(4, 60, (3, 7))
    src[:, -1] = 3
    tgt = torch.randint(4, 60, (3, 5))
    with torch.no_grad():
        torch.testing.assert_close(q(src, tgt).float(), ref(src, tgt).float(), rtol=1e-4, atol=1e-4)
    assert calls
    search = SearchConfig(beam=4, max_len_a=0.0, max_len_b=6)
    assert [h[0].tokens for h in beam_search(q, src, search)] == [h[0].tokens for h in beam_search(ref, src, search)]
    for name, t in model.state_dict().items():
        assert torch.equal(t, before[name])
    assert isinstance(model.decoder.layers[0].ffn.w_1, nn.Linear)
    # It saves as the model it came from (what `aiayn serve` and the exporters read), and loads back.
    state = q.state_dict()
    assert state.keys() == model.state_dict().keys()
    for name, t in state.items():
        torch.testing.assert_close(t, ref.state_dict()[name], rtol=0, atol=0)
    other = inference_copy(Transformer(ModelConfig.preset("tiny", vocab_size=60)), dtype)
    other.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(other(src, tgt), q(src, tgt), rtol=0, atol=0)
    with torch.inference_mode():  # a model made under inference mode (as the peer harness makes its models)
        made = Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval()
        made.load_state_dict(model.state_dict())
        torch.testing.assert_close(inference_copy(made, dtype)(src, tgt), q(src, tgt), rtol=0, atol=0)


def test_keep_freed_memory_applies_on_glibc():
    import platform
    import sys

    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert keep_freed_memory() is expected


def test_int8_copy_follows_the_model():
    # Dynamic int8 projections (per output channel): logits close to fp32's, the same greedy output on a model whose
    # choices are clear-cut, the original untouched.
    from aiayn.search import SearchConfig, greedy_search

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval()
    before = copy.deepcopy(model.state_dict())
    q = inference_copy(model, "int8")
    assert q is not model and getattr(q, "int8", False) and inference_copy(q, "int8") is q
    calls = _calls(q.output_logits)  # the int8 tied projection is the one that runs
    src = torch.randint(4, 60, (3, 7))
    src[:, -1] = 3
    tgt = torch.randint(4, 60, (3, 5))
    with torch.no_grad():
        ref, low = model(src, tgt), q(src, tgt)
    assert (low - ref).abs().max() < 0.05 * ref.abs().max() and calls
    for name, t in model.state_dict().items():
        assert torch.equal(t, before[name])
    search = SearchConfig(beam=1, max_len_a=0.0, max_len_b=6)
    pairs = zip(greedy_search(model, src, search), greedy_search(q, src, search))
    agree = [a[0].tokens == b[0].tokens for a, b in pairs]
    assert sum(agree) >= 2
