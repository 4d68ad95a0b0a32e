"""The loss (section 5.4): label smoothing by hand and against torch, the fused chunked loss equal to the formula."""

import pytest
import torch
import torch.nn.functional as F

from aiayn.losses import LabelSmoothedCrossEntropy, label_smoothed_nll_loss


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
