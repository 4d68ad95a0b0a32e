"""The training objective (section 5.4): label-smoothed cross-entropy on real target tokens.

    label_smoothed_nll_loss     the formula, on log-probabilities (the reference)
    LabelSmoothedCrossEntropy   the same, fused over logits in cache-sized chunks (the CPU fast path, tested equal)
    label_smoothed_cross_entropy  what training calls: the chunked path on CPU; on GPUs the formula itself under
                                torch.compile (its fused kernels are the compiler's), the chunked path if that
                                cannot run; each kernel can be asked for by name (LOSS_KERNELS)
    batch_loss                  one batch through the model: the vocabulary projection on real tokens only
    packed_batch_loss           the same for a packed batch (aiayn.training.packed): no padding anywhere
    TrainingObjective           model + loss in one forward, what DDP and torch.compile wrap
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import Tensor

from aiayn.config import PAD_ID
from aiayn.model import Transformer
from aiayn.training.packed import Sentences


def label_smoothed_nll_loss(lprobs: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Cross-entropy against (1 - eps) * one-hot + eps * uniform (section 5.4), summed over the rows given.

    lprobs (N, V) log-probabilities of real (non-pad) target positions, target (N,). Returns
    (smoothed loss sum, true NLL sum); the NLL gives perplexity, the smoothed loss is what is minimised."""
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (N,)
    smooth = -lprobs.mean(dim=-1)  # (N,) cross-entropy against the uniform distribution
    loss = (1.0 - eps) * nll + eps * smooth
    return loss.sum(), nll.sum()


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """`label_smoothed_nll_loss(log_softmax(logits))` in one fused pass over the logits, and its gradient in one more.

    With z = logsumexp(x) per row: nll = z - x[target], smooth = z - mean(x), and
    d loss / dx = softmax(x) - (1 - eps) * onehot(target) - eps / V. Rows are processed in chunks that stay in
    cache, in fp32 whatever the logits' dtype; the (N, V) log-probabilities are never materialised, and the
    gradient is written straight in the logits' dtype (a measured fast path: docs/speed-design.md). Equal to
    `label_smoothed_nll_loss` to fp32 rounding (tests/test_losses.py)."""

    CHUNK_ELEMENTS = 1 << 19  # rows per chunk = this / V: 2 MiB of fp32, stays in a CPU core's cache
    GPU_CHUNK_ELEMENTS = 1 << 27  # on GPUs: few, large chunks (kernel launches cost, caches do not), 512 MiB fp32

    @staticmethod
    def _rows_per_chunk(logits: Tensor) -> int:
        n = LabelSmoothedCrossEntropy.CHUNK_ELEMENTS if logits.device.type == "cpu" else \
            LabelSmoothedCrossEntropy.GPU_CHUNK_ELEMENTS
        return max(1, n // logits.size(1))

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        n, v = logits.shape
        rows = LabelSmoothedCrossEntropy._rows_per_chunk(logits)
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        nll = torch.empty(n, dtype=torch.float32, device=logits.device)
        smooth = torch.empty(n, dtype=torch.float32, device=logits.device)
        for i in range(0, n, rows):
            x = logits[i:i + rows].float()
            z = torch.logsumexp(x, dim=-1)
            lse[i:i + rows] = z
            nll[i:i + rows] = z - x.gather(-1, target[i:i + rows, None]).squeeze(-1)
            smooth[i:i + rows] = z - x.mean(dim=-1)
        ctx.save_for_backward(logits, target, lse)
        ctx.eps = eps
        ctx.mark_non_differentiable(nll)
        return ((1.0 - eps) * nll + eps * smooth).sum(), nll.sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None]:
        logits, target, lse = ctx.saved_tensors
        n, v = logits.shape
        rows = LabelSmoothedCrossEntropy._rows_per_chunk(logits)
        grad = torch.empty_like(logits)
        g = grad_loss.float()
        for i in range(0, n, rows):
            p = torch.sub(logits[i:i + rows].float(), lse[i:i + rows, None]).exp_()  # softmax (a new tensor)
            p.sub_(ctx.eps / v)
            p.scatter_add_(-1, target[i:i + rows, None], p.new_full((p.size(0), 1), ctx.eps - 1.0))
            grad[i:i + rows] = p.mul_(g)
        return grad, None, None


def _formula_from_logits(logits: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return label_smoothed_nll_loss(torch.log_softmax(logits.float(), dim=-1), target, eps)


@functools.cache
def _compiled_formula():
    return torch.compile(_formula_from_logits, dynamic=True)


LOSS_KERNELS = ("auto", "chunked", "compiled", "formula")
COMPILE_ON = ("cuda",)  # devices where "auto" takes the compiled formula (measured faster there: docs/speed-design.md)


@functools.cache
def compiler_works(device_type: str) -> bool:
    """Whether the compiled formula runs on this kind of device (tried once per process on a small batch); where it
    does not (no Triton, say), a warning once, and "auto" takes the chunked path."""
    try:
        logits = torch.randn(3, 5, device=device_type, requires_grad=True)
        loss, _ = _compiled_formula()(logits, torch.zeros(3, dtype=torch.long, device=device_type), 0.1)
        loss.backward()
        return True
    except Exception as e:  # noqa: BLE001 (any compiler failure: fall back, say so once)
        warnings.warn(f"torch.compile of the loss failed ({type(e).__name__}: {str(e)[:200]}); using the chunked "
                      "loss, slower on GPUs", stacklevel=2)
        return False


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, eps: float, kernel: str = "auto"
                                 ) -> tuple[Tensor, Tensor]:
    """(smoothed loss sum, NLL sum) of logits (N, V) against target (N,): `label_smoothed_nll_loss` of their
    log-softmax, by one of three kernels that compute the same: "chunked" (`LabelSmoothedCrossEntropy`), "compiled"
    (the formula under torch.compile, dynamic shapes: one compilation for every N), "formula" (the formula as it
    reads). "auto": compiled on GPUs where the compiler works, else chunked."""
    if kernel == "auto":
        kernel = "compiled" if logits.device.type in COMPILE_ON and compiler_works(logits.device.type) else "chunked"
    if kernel == "chunked":
        return LabelSmoothedCrossEntropy.apply(logits, target, eps)
    if kernel == "compiled":
        return _compiled_formula()(logits, target, eps)
    if kernel == "formula":
        return _formula_from_logits(logits, target, eps)
    raise ValueError(f"loss kernel must be one of {', '.join(LOSS_KERNELS)}, not {kernel!r}")


def batch_loss(model: Transformer, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, eps: float,
               kernel: str = "auto") -> tuple[Tensor, Tensor, int]:
    """(smoothed loss sum, NLL sum, target tokens) of one batch. The vocabulary projection and softmax run on
    real target positions only: padding costs nothing there."""
    memory = model.encode(src)
    hidden = model.decode_hidden(tgt_in, memory, src.eq(PAD_ID))  # (B, T, D)
    real = tgt_out.ne(PAD_ID)
    logits = model.output_logits(hidden[real])  # (N, V), N = real target tokens
    loss, nll = label_smoothed_cross_entropy(logits, tgt_out[real], eps, kernel)
    return loss, nll, int(real.sum())


def packed_batch_loss(model: Transformer, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, src_sentences: Sentences,
                      tgt_sentences: Sentences, eps: float, kernel: str = "auto") -> tuple[Tensor, Tensor, int]:
    """`batch_loss` of packed sentences: src (Ns,), tgt_in and tgt_out (Nt,), placed by src_sentences and
    tgt_sentences (aiayn.data.pack makes them from a Batch). Every target row is a real token."""
    memory = model.encode_packed(src, src_sentences)  # (Ns, D)
    hidden = model.decode_hidden_packed(tgt_in, memory, tgt_sentences, src_sentences)  # (Nt, D)
    loss, nll = label_smoothed_cross_entropy(model.output_logits(hidden), tgt_out, eps, kernel)
    return loss, nll, tgt_out.numel()


class TrainingObjective(torch.nn.Module):
    """The model plus its loss in one forward, so DDP (which hooks `forward`) and torch.compile wrap both. Takes a
    Batch's tensors, or a PackedBatch's with its two Sentences (`Batch.inputs()`, `PackedBatch.inputs()`)."""

    def __init__(self, model: Transformer, loss_kernel: str = "auto"):
        super().__init__()
        self.model, self.loss_kernel = model, loss_kernel

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, src_sentences: Sentences | None = None,
                tgt_sentences: Sentences | None = None) -> tuple[Tensor, Tensor]:
        eps = self.model.cfg.label_smoothing
        if src_sentences is not None:
            loss, nll, _ = packed_batch_loss(self.model, src, tgt_in, tgt_out, src_sentences, tgt_sentences, eps,
                                             self.loss_kernel)
        else:
            loss, nll, _ = batch_loss(self.model, src, tgt_in, tgt_out, eps, self.loss_kernel)
        return loss, nll
