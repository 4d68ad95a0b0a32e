"""Measured fast paths, each beside the reference it stands in for (tests/test_fast.py). Some compute exactly what
their reference computes; some change it, and the table says what changes (tests/test_fast.py checks each row's
claim against the code). Why each was kept, with its measurements: docs/speed-design.md.

    fast path              reference                          same result?    what changes
    Dropout                nn.Dropout                         no              the mask: 15 random bits per element,
                                                                              so the drop probability is p to within
                                                                              2^-16 (0.1 -> 0.100006), from another
                                                                              stream of torch's generator (CPU only)
    LayerNorm              nn.LayerNorm                       no              under CPU autocast its output stays bf16
                                                                              instead of fp32: the residual stream is
                                                                              16-bit (statistics still in fp32)
    use_matmul_attention   F.scaled_dot_product_attention     to rounding     eq. 1 as two matmuls with an fp32
                                                                              softmax: the order of the sums
    row_topk               torch.topk(x, k, dim=1)            yes             nothing (values equal; among equal
                                                                              values the index may differ)
    row_argmax             torch.argmax(x, dim=1)             yes             nothing (aiayn.native's pass over each
                                                                              row where it runs, else row_topk's)
    keep_freed_memory      glibc's default allocator          yes             nothing computed: memory kept in the
                                                                              process
    bound_kernel_cache     oneDNN's and ideep's 1,024-entry   yes             nothing computed: fewer compiled
                           per-shape caches                                   kernels kept
    native                 model.scaled_dot_product_          to rounding     eq. 1 for a decoding step's one query
                           attention at a step written out                    per row, compiled from C (aiayn.native):
                           (decoding.step; CPU, fp32)                         the order of the sums; exp a polynomial
                                                                              within 1 ulp

aiayn.native is compiled at first use where the machine has a C compiler; without one, torch's attention runs.
The fused label-smoothed loss is a fast path too; it lives in aiayn/training/losses.py beside its reference formula. The
decoding precisions (bf16, int8; prepacked weights) live in aiayn/decoding/inference.py, beside the model they equal.
The two process-wide settings (keep_freed_memory, bound_kernel_cache) are applied by aiayn.runtime.configure_process
only, once per process, for every entry point.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn import native  # the table's row; aiayn.decoding.step calls it, row_argmax here
from aiayn.allocator import keep_freed_memory  # noqa: F401 (the table's row; runtime applies it from here)

NEG_INF = float("-inf")

# ---------------------------------------------------------------------------------------------------------
# Dropout.


class Dropout(nn.Dropout):
    """Dropout (section 5.4) with a faster mask on CPU: each element gets 15 random bits (four per 64-bit draw of
    torch's generator, so `torch.manual_seed` still governs it) and is kept when they are >= round(p * 2^15), so the
    drop probability is p to within 2^-16 (0.1 -> 0.100006); survivors are scaled by 1 / (1 - p). Faster
    than a mask of 31 bits, and both than torch's Bernoulli kernel (docs/speed-design.md). Other devices use torch's
    kernel."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu" or self.p >= 1.0:
            return super().forward(x)
        n = x.numel()
        bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_().view(torch.int16)[:n].view(x.shape)
        keep = bits.bitwise_and_(0x7FFF) >= round(self.p * 2**15)
        return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))


class LayerNorm(nn.LayerNorm):
    """Layer normalization whose output, under CPU autocast, is in the autocast dtype (bf16) rather than fp32.

    Autocast runs layer_norm in fp32 and returns fp32, so a post-norm residual stream is fp32: every projection
    after it casts its input again and every residual add and dropout moves twice the bytes. Here the input and
    the affine parameters are cast to the autocast dtype and torch's kernel normalizes with fp32 statistics
    inside, returning bf16 (as fairseq's and Megatron's 16-bit training do). Training learns alike and runs faster
    on CPU. On GPUs it is nn.LayerNorm: there it helped large eager steps but slowed launch-bound ones (two more
    kernels a call) and compiled ones. Measurements: docs/speed-design.md.
    Outside autocast: nn.LayerNorm. autocast_output=False (or set_layer_norm_output on a model; `aiayn train
    --layer-norm fp32`) makes it nn.LayerNorm everywhere: the other side of an A/B measurement."""

    def __init__(self, *args, autocast_output: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.autocast_output = autocast_output

    def forward(self, x: Tensor) -> Tensor:
        device = x.device.type
        if device != "cpu" or not self.autocast_output or not torch.is_autocast_enabled(device):
            return super().forward(x)
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            weight = None if self.weight is None else self.weight.to(dtype)
            bias = None if self.bias is None else self.bias.to(dtype)
            return F.layer_norm(x.to(dtype), self.normalized_shape, weight, bias, self.eps)


def set_layer_norm_output(model: nn.Module, autocast: bool) -> nn.Module:
    """Whether the model's LayerNorms return the autocast dtype (True, the default) or fp32 as nn.LayerNorm does."""
    for m in model.modules():
        if isinstance(m, LayerNorm):
            m.autocast_output = autocast
    return model


# ---------------------------------------------------------------------------------------------------------
# Attention kernel choice.


def use_matmul_attention(q: Tensor, decoding: bool) -> bool:
    """Whether eq. 1 should run as two matmuls (model.scaled_dot_product_attention) rather than torch's fused kernel
    (model.attention asks): on the CPU for bf16 training (torch's flash kernel is slower there, with or without fp32
    casts) and for fp32 decoding steps (a few queries per sentence). Everywhere else the fused kernel: bf16 decoding
    on the CPU (the matmul path's bf16 matmuls meet a new key length at every step, and oneDNN compiles a kernel for
    each; a cached decoder does not get here in bf16: aiayn.decoding.cache.held_dtype attends over its keys/values in
    fp32), GPUs (a decoding step is bound by kernel launches: the fused kernel is one, the matmul path six)."""
    if q.device.type != "cpu":
        return False
    return q.dtype != torch.bfloat16 if decoding else q.dtype == torch.bfloat16


# ---------------------------------------------------------------------------------------------------------
# Top-k over wide rows.


def row_topk(x: Tensor, k: int, block: int | None = None) -> tuple[Tensor, Tensor]:
    """torch.topk(x, k, dim=1) for (N, V) rows with V >> k, faster on CPU: the k largest values of a row lie in the
    k blocks of `block` columns with the largest maxima, so take the block maxima (a fast reduction), then top-k
    among those k * block candidates and the last V % block columns (a partial block, always a candidate). Same
    values as torch.topk; among equal values the index chosen may differ (torch.topk does not specify it either). Off
    the CPU, torch.topk itself: one kernel, where this takes five. block: default 128 columns where V holds at least
    8 * 128 * k of them, else 64 (the fastest of 32..256 at V = 8,000 and 32,000, k = 8, on one core)."""
    n, v = x.shape
    block = block or (128 if v >= 8 * 128 * k else 64)
    if v < 8 * block * k or x.device.type != "cpu":
        return x.topk(k, dim=1)
    whole = v - v % block
    blocks = x[:, :whole].view(n, -1, block)  # (N, V // block, block), no copy
    _, best_blocks = blocks.amax(dim=2).topk(k, dim=1)  # (N, k)
    cand = blocks.gather(1, best_blocks[..., None].expand(n, k, block)).view(n, k * block)
    if whole < v:
        cand = torch.cat([cand, x[:, whole:]], dim=1)  # (N, k * block + V % block)
    values, j = cand.topk(k, dim=1)
    in_block = best_blocks.gather(1, j.div(block, rounding_mode="floor").clamp(max=k - 1)) * block + j % block
    return values, torch.where(j < k * block, in_block, j - k * block + whole)


def row_argmax(x: Tensor) -> Tensor:
    """Each row's largest column, (N, V) -> (N,): aiayn.native's one pass a row where it runs (fp32 CPU rows: the same
    indices as torch.argmax, the first of equal maxima), else row_topk's (torch.argmax on a CPU reads a row one
    number at a time; row_topk's five kernels cost less from 16 rows on)."""
    if x.dtype is torch.float32 and x.is_cpu and x.stride(1) == 1 and native.available():
        return native.row_argmax(x)
    return row_topk(x, 1)[1].squeeze(1)


# ---------------------------------------------------------------------------------------------------------
# Allocator: glibc's malloc kept from handing freed memory back (aiayn.allocator, which imports no torch).

KERNEL_CACHE = 8  # entries kept per process on CPU in each cache of KERNEL_CACHES (their defaults: 1,024)
KERNEL_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY",  # oneDNN's compiled kernels (primitives), one per shape
                 "LRU_CACHE_CAPACITY")  # ideep's (torch's oneDNN glue) computation plans, one per input shape


def bound_kernel_cache(capacity: int = KERNEL_CACHE) -> bool:
    """Keep small the caches oneDNN and ideep hold per shape met, unless the environment already says otherwise.

    Token-based batches give the projections a new (rows x columns) shape at almost every training step, and beam
    search at almost every decoding step; each cached kernel or plan holds memory, so with the default capacities
    a process (training, a serving worker) grew for as long as it ran, and bounding both keeps it flat; what that
    saves and costs is measured in docs/speed-design.md and docs/serving-performance.md. Both libraries read the setting
    once, when they first need it, so call this before any kernel runs; returns False if a cache keeps another
    capacity (a value the user set, or one set too late to tell)."""
    for name in KERNEL_CACHES:
        os.environ.setdefault(name, str(capacity))
    return all(os.environ[name] == str(capacity) for name in KERNEL_CACHES)
