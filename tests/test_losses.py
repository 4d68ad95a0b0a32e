"""The loss (section 5.4): label smoothing by hand and against torch, the fused chunked loss equal to the formula."""

import pytest
import torch
import torch.nn.functional as F

from aiayn.training.losses import LabelSmoothedCrossEntropy, label_smoothed_cross_entropy, label_smoothed_nll_loss


def test_label_smoothed_loss_by_hand():
    lprobs = torch.log(torch.tensor([[0.75, 0.25]]))
    loss, nll = label_smoothed_nll_loss(lprobs, torch.tensor([0]), eps=0.1)
    # nll = -log .75; smooth = -(log .75 + log .25) / 2; loss = 0.9 nll + 0.1 smooth
    assert nll.item() == pytest.approx(0.287682, abs=1e-6)
    assert loss.item() == pytest.approx(0.9 * 0.287682 + 0.1 * 0.836988, abs=1e-6)
    logits = torch.randn(7, 11)
    target = torch.randint(0, 11, (7,))
    loss, _ = label_smoothed_nll_loss(F.log_softmax(logits, -1), target, eps=0.1)
    ref = F.cross_entropy(logits, target, label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(loss, ref)


@pytest.mark.parametrize("eps", [0.1, 0.0])
def test_fused_loss_equals_the_formula(monkeypatch, eps):
    monkeypatch.setattr(LabelSmoothedCrossEntropy, "CHUNK_ELEMENTS", 3 * 37)  # 3 rows a chunk: 10 rows = 4 chunks
    torch.manual_seed(0)
    logits = (torch.randn(10, 37, dtype=torch.float64) * 4).float().requires_grad_()
    target = torch.randint(0, 37, (10,))
    loss, nll = LabelSmoothedCrossEntropy.apply(logits, target, eps)
    (2.5 * loss).backward()
    fused_grad = logits.grad.clone()
    logits.grad = None
    ref_loss, ref_nll = label_smoothed_nll_loss(F.log_softmax(logits, -1), target, eps)
    (2.5 * ref_loss).backward()
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    torch.testing.assert_close(fused_grad, logits.grad)
    # bf16 logits: computed in fp32, gradient returned in bf16
    low = logits.detach().bfloat16().requires_grad_()
    loss, _ = LabelSmoothedCrossEntropy.apply(low, target, eps)
    loss.backward()
    assert low.grad.dtype == torch.bfloat16
    high = low.detach().float().requires_grad_()
    ref, _ = label_smoothed_nll_loss(F.log_softmax(high, -1), target, eps)
    ref.backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(low.grad, high.grad.bfloat16())


def _loss_and_grad(fn, logits, target, eps):
    x = logits.detach().clone().requires_grad_()
    loss, nll = fn(x, target, eps)
    (1.5 * loss).backward()
    return loss.detach(), nll.detach(), x.grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the compiled loss runs on GPUs only)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_gpu_loss_equals_the_formula(dtype):
    torch.manual_seed(0)
    for n in (10, 33):  # two batch sizes: one compilation (dynamic shapes) must serve both
        logits = (torch.randn(n, 1000, device="cuda") * 4).to(dtype)
        target = torch.randint(0, 1000, (n,), device="cuda")
        got = _loss_and_grad(label_smoothed_cross_entropy, logits, target, 0.1)
        ref = _loss_and_grad(lambda x, t, e: label_smoothed_nll_loss(F.log_softmax(x.double(), -1), t, e),
                             logits, target, 0.1)
        assert got[2].dtype == dtype
        torch.testing.assert_close(got[0].double(), ref[0], rtol=1e-5, atol=1e-3)
        torch.testing.assert_close(got[1].double(), ref[1], rtol=1e-5, atol=1e-3)
        torch.testing.assert_close(got[2].double(), ref[2].to(dtype).double(), rtol=2e-2, atol=1e-5)


def test_compiler_failure_falls_back_to_the_chunked_loss(monkeypatch):
    """Where torch.compile cannot run, "auto" warns once and computes the same loss the chunked way."""
    import aiayn.training.losses as losses

    def broken():
        raise RuntimeError("no Triton here")

    monkeypatch.setattr(losses, "COMPILE_ON", ("cpu",))
    monkeypatch.setattr(losses, "_compiled_formula", broken)
    losses.compiler_works.cache_clear()
    torch.manual_seed(0)
    logits, target = torch.randn(6, 29), torch.randint(0, 29, (6,))
    try:
        with pytest.warns(UserWarning, match="torch.compile of the loss failed.*no Triton here"):
            got = _loss_and_grad(label_smoothed_cross_entropy, logits, target, 0.1)
        assert losses.compiler_works("cpu") is False
    finally:
        losses.compiler_works.cache_clear()
    ref = _loss_and_grad(lambda x, t, e: label_smoothed_nll_loss(F.log_softmax(x, -1), t, e), logits, target, 0.1)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kernel", ["chunked", "formula"])
def test_every_loss_kernel_computes_the_formula(kernel):
    torch.manual_seed(0)
    logits, target = torch.randn(7, 31) * 3, torch.randint(0, 31, (7,))
    got = _loss_and_grad(lambda x, t, e: label_smoothed_cross_entropy(x, t, e, kernel), logits, target, 0.1)
    ref = _loss_and_grad(lambda x, t, e: label_smoothed_nll_loss(F.log_softmax(x.double(), -1), t, e),
                         logits, target, 0.1)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="loss kernel"):
        label_smoothed_cross_entropy(logits, target, 0.1, "fused")
