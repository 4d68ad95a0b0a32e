"""Measured fast paths: each changes how fast something runs, never what is computed, and each sits beside the
reference it is tested against (tests/test_fast.py). Why each was kept, with its measurements: docs/speed.md.

    fast path                          reference it must equal
    Dropout (15-bit CPU mask)          nn.Dropout: drop probability p, survivors scaled by 1 / (1 - p)
    LayerNorm (16-bit, CPU autocast)   nn.LayerNorm (the same normalization; its output stays in the autocast
                                       dtype instead of fp32, so the residual stream is 16-bit)
    use_matmul_attention               chooses between model.scaled_dot_product_attention (eq. 1 as two matmuls,
                                       fp32 softmax) and torch's F.scaled_dot_product_attention (flash); both
                                       compute eq. 1
    row_topk                           torch.topk(x, k, dim=1)
    inference_copy                     the model itself (a bf16 copy of its weights, converted once; or int8:
                                       every projection dynamically quantized, int8 weights per output channel)
    PackedLinear                       nn.Linear (its weight packed once for oneDNN's GEMM; decoding on CPU)
    keep_freed_memory                  glibc's default allocator settings (speed only, no numerics)

The fused label-smoothed loss is a fast path too; it lives in aiayn/losses.py beside its reference formula.
"""

from __future__ import annotations

import copy
import ctypes
import functools
import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NEG_INF = float("-inf")

# ---------------------------------------------------------------------------------------------------------
# Dropout.


class Dropout(nn.Dropout):
    """Dropout (section 5.4) with a faster mask on CPU: each element gets 15 random bits (four per 64-bit draw of
    torch's generator, so `torch.manual_seed` still governs it) and is kept when they are >= round(p * 2^15), so the
    drop probability is p to within 2^-16 (0.1 -> 0.100006); survivors are scaled by 1 / (1 - p). The mask of 15
    bits measured 1.3-3.3x faster than of 31 (`benchmarks/dropout_bits.py`; docs/speed.md), and both than torch's
    Bernoulli kernel. Other devices use torch's kernel."""

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
    inside, returning bf16 (as fairseq's and Megatron's 16-bit training do). Training learns alike (training NLL
    within 0.002 of torch's at every logged step) and runs 3-7.5 % faster on CPU. On GPUs it is nn.LayerNorm: there it
    helped large eager steps but slowed launch-bound ones (two more kernels a call) and compiled ones (docs/speed.md).
    Outside autocast: nn.LayerNorm."""

    def forward(self, x: Tensor) -> Tensor:
        device = x.device.type
        if device != "cpu" or not torch.is_autocast_enabled(device):
            return super().forward(x)
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            weight = None if self.weight is None else self.weight.to(dtype)
            bias = None if self.bias is None else self.bias.to(dtype)
            return F.layer_norm(x.to(dtype), self.normalized_shape, weight, bias, self.eps)


# ---------------------------------------------------------------------------------------------------------
# Attention kernel choice.


def use_matmul_attention(q: Tensor, decoding: bool, need_weights: bool) -> bool:
    """Whether MultiHeadAttention should run eq. 1 as two matmuls (model.scaled_dot_product_attention) rather than
    torch's fused kernel: when the weights are wanted, for bf16 on CPU (torch's flash kernel is slower there, with
    or without fp32 casts), and for decoding steps (a few queries per sentence; this also keeps the cache in the
    autocast dtype). Everywhere else (fp32 training, GPUs) the fused kernel."""
    return need_weights or decoding or (q.device.type == "cpu" and q.dtype == torch.bfloat16)


# ---------------------------------------------------------------------------------------------------------
# Top-k over wide rows.


def row_topk(x: Tensor, k: int, block: int = 128) -> tuple[Tensor, Tensor]:
    """torch.topk(x, k, dim=1) for (N, V) rows with V >> k, faster on CPU: the k largest values of a row lie in the
    k blocks of `block` columns with the largest maxima, so take the block maxima (a fast reduction), then top-k
    among those k * block candidates. Same values as torch.topk; among equal values the index chosen may differ
    (torch.topk does not specify it either)."""
    n, v = x.shape
    if v < 8 * block * k:
        return x.topk(k, dim=1)
    if v % block:
        x = F.pad(x, (0, block - v % block), value=NEG_INF)
    blocks = x.view(n, -1, block)  # (N, V / block, block)
    _, best_blocks = blocks.amax(dim=2).topk(k, dim=1)  # (N, k)
    cand = blocks.gather(1, best_blocks[..., None].expand(n, k, block)).view(n, k * block)
    values, j = cand.topk(k, dim=1)
    return values, best_blocks.gather(1, j.div(block, rounding_mode="floor")) * block + j.remainder(block)


# ---------------------------------------------------------------------------------------------------------
# Inference weights.


def inference_copy(model: nn.Module, dtype: str = "fp32", packed: bool | None = None) -> nn.Module:
    """The model to decode with, in eval mode: "fp32" the model's own weights (or a packed copy, below); "bf16" a
    copy with every weight converted once (autocast would cast the weights again at every step); "int8" a copy whose
    projections (W^Q, W^K, W^V, W^O, the FFN and the tied output projection) hold int8 weights, one scale per output
    channel, and quantize their input per batch (dynamic quantization: fbgemm's int8 GEMM). LayerNorm, softmax and
    the log-softmax stay in fp32 (bf16: they accumulate in fp32).

    packed (fp32 and bf16 on CPU; None: wherever oneDNN is available): every projection, the tied output projection
    included, becomes a PackedLinear, its weight packed once for oneDNN's GEMM instead of at every call. The model
    passed in is left as it was; the copy is for decoding only (no gradients), and its state_dict is the model's."""
    if dtype not in ("fp32", "bf16", "int8"):
        raise ValueError(f"inference dtype must be fp32, bf16 or int8, not {dtype!r}")
    if dtype == "int8":
        return _int8_copy(model)
    target = torch.bfloat16 if dtype == "bf16" else torch.float32
    if getattr(model, "int8", False) or getattr(model, "packed", False):
        return model.eval()
    first = next(model.parameters())
    if packed is None:
        packed = first.device.type == "cpu" and _packing_works(target)
    if packed:
        return _packed_copy(model, target)
    if first.dtype == target:
        return model.eval()
    return copy.deepcopy(model).to(target).eval()


@functools.cache
def _packing_works(dtype: torch.dtype) -> bool:
    """Whether this torch build and CPU run a PackedLinear in `dtype` (oneDNN's bf16 kernels, for one, need AVX-512
    or newer; builds for other architectures may lack the ops): tried once on a 2 x 2 layer."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        layer = nn.Linear(2, 2).to(dtype)
        with torch.no_grad():
            x = torch.ones(1, 2, dtype=dtype)
            return torch.allclose(PackedLinear(layer.weight, layer.bias)(x).float(), layer(x).float(), atol=1e-2)
    except (RuntimeError, NotImplementedError):
        return False


ROWS_HINT = 256  # rows a decoder step multiplies (64 sentences x 4 beams): oneDNN picks its kernel for this


class PackedLinear(nn.Module):
    """y = x W^T + b (nn.Linear) for decoding on CPU, with W packed once into oneDNN's blocked layout.

    `F.linear` hands the plain weight to the GEMM, which reorders it at every call: at a decoder step's few rows
    that reordering is a large share of the work (benchmarks/packed_linear.py). The result equals nn.Linear's up
    to the order of the sums (tests/test_fast.py). Inference only: the packed weight has no gradient."""

    def __init__(self, weight: Tensor, bias: Tensor | None, rows_hint: int = ROWS_HINT):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.rows_hint = rows_hint
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), rows_hint)
        self.bias = None if bias is None else bias.detach().clone()

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    # The state dict holds nn.Linear's plain tensors, so a packed copy saves and loads as the model it came from.
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        destination[prefix + "weight"] = self.weight.to_dense()
        if self.bias is not None:
            destination[prefix + "bias"] = self.bias

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        for name in ("weight", "bias") if self.bias is not None else ("weight",):
            if prefix + name not in state_dict:
                missing_keys.append(prefix + name)
        if prefix + "weight" in state_dict:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(
                state_dict[prefix + "weight"].to(self.weight.dtype).contiguous(), self.rows_hint)
        if self.bias is not None and prefix + "bias" in state_dict:
            self.bias = state_dict[prefix + "bias"].to(self.bias.dtype).clone()


class _PackedTiedProjection(nn.Module):
    """The output projection hidden -> logits with a packed copy of the (tied) embedding matrix; `pack` packs it
    again (the packed copy does so after load_state_dict)."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self._embedding = (embedding,)  # a tuple: not registered, the model owns it
        self.pack()

    def pack(self) -> None:
        self.packed = PackedLinear(self._embedding[0].weight, None)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.packed(hidden)


def _shadow_output_logits(model: nn.Module, projection: nn.Module) -> None:
    """Make `model.output_logits(hidden)` call `projection` in this copy only (it shadows the tied F.linear).

    Set in the instance's __dict__: nn.Module.__setattr__ would file a module under _modules, where attribute lookup
    finds the class's method first and the projection would silently never run."""
    object.__setattr__(model, "output_logits", projection)


def _packed_copy(model: nn.Module, target: torch.dtype) -> nn.Module:
    """A copy of `model` in `target` dtype whose nn.Linear layers, and tied output projection, are PackedLinear."""
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    memo = {id(m.weight): None for _, m in linears} | {id(m.bias): None for _, m in linears if m.bias is not None}
    q = copy.deepcopy(model, memo).to(target).eval()  # the projections' weights are not copied, packed below
    for name, m in linears:
        parent, _, attr = name.rpartition(".")
        bias = None if m.bias is None else m.bias.to(target)
        setattr(q.get_submodule(parent) if parent else q, attr, PackedLinear(m.weight.to(target), bias))
    if hasattr(q, "embedding") and hasattr(q, "output_logits"):
        _shadow_output_logits(q, _PackedTiedProjection(q.embedding))
        q.register_load_state_dict_post_hook(lambda model, _: model.output_logits.pack())
    q.packed = True
    return q


class _Int8TiedProjection(nn.Module):
    """The output projection hidden -> logits with an int8 copy of the (tied) embedding matrix."""

    def __init__(self, weight: Tensor):
        super().__init__()
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

        v, d = weight.shape
        linear = nn.Linear(d, v, bias=False)
        linear.weight.data.copy_(weight.detach().float())
        self.linear = DynamicLinear.from_float(_with_qconfig(linear))

    def forward(self, hidden: Tensor) -> Tensor:
        return self.linear(hidden)


def _with_qconfig(module: nn.Module) -> nn.Module:
    from torch.ao.quantization import per_channel_dynamic_qconfig

    module.qconfig = per_channel_dynamic_qconfig
    return module


def _int8_copy(model: nn.Module) -> nn.Module:
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    if getattr(model, "int8", False):
        return model.eval()
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 decoding runs on CPU (fbgemm); use bf16 on GPUs")
    q = copy.deepcopy(model).float().eval()
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        q = quantize_dynamic(q, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
        _shadow_output_logits(q, _Int8TiedProjection(q.embedding.weight))
    q.int8 = True
    return q


# ---------------------------------------------------------------------------------------------------------
# Allocator.

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory in the process instead of handing it back to the OS.

    A training step allocates and frees the same large tensors every time; by default glibc serves blocks above
    32 MiB with mmap and returns them at free, and trims the heap, so every step page-faults its memory in again.
    With mmap off and trimming off the memory is reused; the process keeps its peak memory until it exits.
    Returns False where this is not glibc (then nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
