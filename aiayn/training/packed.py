"""Packed batches: the sentences of a batch one after another in one (N, D) stream per side, no padding, and
attention kept within each sentence. Opt-in for training (`aiayn train --packed`); the maths is the padded model's.

    N  tokens of one side, all sentences together     L  the longest sentence of that side

    Sentences     where each sentence lies in a stream (cu_seqlens, as flash attention names it) and each token's
                  position in its own sentence (the sinusoids restart at 0 for every sentence)
    PackedMask    what MultiHeadAttention takes as `mask` for packed inputs: the queries' and the keys' Sentences
                  (encoder: source and source; decoder self-attention: target and target, causal; cross-attention:
                  target sentence i attends to source sentence i)
    varlen_attention       eq. 1 per sentence by torch's variable-length flash kernel, where it runs: CUDA, fp16 or
                           bf16, d_k = d_v <= 256 and a multiple of 8 (`use_varlen_attention`)
    Sentences.pad / unpad  elsewhere (CPU, fp32 on a GPU): each sentence scattered into a zero-padded row, attended
                           as a padded batch is, and gathered back

Both compute what the padded model computes for the same sentences (tests/test_packed.py, against block-diagonal
masks and against padded batches). What packing is worth: docs/speed.md.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

_UNLOADED = object()
varlen_attn = _UNLOADED  # torch's variable-length flash kernel (torch 2.10 and later; None before): `_varlen`


def _varlen():
    """torch.nn.attention.varlen.varlen_attn, or None where this torch lacks it; imported at first use, not with
    this module: importing it imports torch.compile's machinery, about a second of every command's start."""
    global varlen_attn
    if varlen_attn is _UNLOADED:
        try:
            from torch.nn.attention.varlen import varlen_attn as kernel
        except ImportError:
            kernel = None
        varlen_attn = kernel
    return varlen_attn


@dataclass(frozen=True)
class Sentences:
    """Where the B sentences of a packed stream lie: rows cu_seqlens[i]:cu_seqlens[i+1] are sentence i."""

    cu_seqlens: Tensor  # (B+1,) int32: 0, l_0, l_0 + l_1, ..., N (the flash kernels' format)
    positions: Tensor  # (N,) long: each token's position in its sentence, from 0
    slots: Tensor  # (N,) long: each token's place in a (B, L) padded layout, sentence * L + position
    key_mask: Tensor  # (B, 1, 1, L) bool: True at the real positions of the padded layout
    max_len: int  # L (the kernels take it as a Python int)

    @classmethod
    def from_lengths(cls, lengths: Sequence[int] | Tensor, device: torch.device | str | None = None) -> Sentences:
        lengths = torch.as_tensor(lengths, dtype=torch.long).cpu()
        if lengths.ndim != 1 or len(lengths) == 0 or int(lengths.min()) < 1:
            raise ValueError(f"sentence lengths must be a non-empty list of lengths >= 1, got {lengths.tolist()}")
        b, longest = len(lengths), int(lengths.max())
        cu = torch.zeros(b + 1, dtype=torch.long)
        cu[1:] = lengths.cumsum(0)
        sentence = torch.arange(b).repeat_interleave(lengths)  # (N,)
        positions = torch.arange(int(cu[-1])) - cu[:-1].repeat_interleave(lengths)  # (N,)
        key_mask = (torch.arange(longest)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, L)
        return cls(cu.to(torch.int32), positions, sentence * longest + positions, key_mask, longest).to(device)

    def __len__(self) -> int:
        return self.cu_seqlens.numel() - 1

    @property
    def n_tokens(self) -> int:
        return self.positions.numel()

    def to(self, device: torch.device | str | None) -> Sentences:
        if device is None:
            return self
        move = functools.partial(Tensor.to, device=device, non_blocking=True)
        return Sentences(move(self.cu_seqlens), move(self.positions), move(self.slots), move(self.key_mask),
                         self.max_len)

    def pad(self, x: Tensor) -> Tensor:
        """(N, h, w) packed -> (B, h, L, w): one row per sentence, zeros after its end."""
        n, h, w = x.shape
        rows = x.new_zeros(len(self) * self.max_len, h, w).index_copy(0, self.slots, x)  # (B*L, h, w)
        return rows.view(len(self), self.max_len, h, w).transpose(1, 2)  # (B, h, L, w)

    def unpad(self, x: Tensor) -> Tensor:
        """(B, h, L, w) -> (N, h, w): the real positions of each row, packed again."""
        b, h, length, w = x.shape
        return x.transpose(1, 2).reshape(b * length, h, w).index_select(0, self.slots)  # (N, h, w)


@dataclass(frozen=True)
class PackedMask:
    """Packed attention: query sentence i (of `queries`) attends to key sentence i (of `keys`) only."""

    queries: Sentences
    keys: Sentences

    def __post_init__(self) -> None:
        if len(self.queries) != len(self.keys):
            raise ValueError(f"{len(self.queries)} query sentences cannot attend to {len(self.keys)} key sentences; "
                             "a packed batch pairs each target sentence with its own source sentence")


# ---------------------------------------------------------------------------------------------------------
# The CUDA kernel.


def _flash_runs_on(device: torch.device) -> bool:
    """Whether torch has the variable-length flash kernel and this GPU runs it (compute capability 8.0 or newer;
    both answers cached by torch)."""
    return (_varlen() is not None and torch.backends.cuda.is_flash_attention_available()
            and torch.cuda.get_device_capability(device) >= (8, 0))


def use_varlen_attention(q: Tensor, v: Tensor) -> bool:
    """Whether `varlen_attention` can run these queries (N, h, dk) and values (N, h, dv): CUDA, fp16 or bf16, and
    head widths the flash kernel takes. Elsewhere packed attention goes through the padded layout."""
    width = q.size(-1)
    return (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and v.size(-1) == width and width % 8 == 0
            and width <= 256 and _flash_runs_on(q.device))


def _varlen_takes_window() -> bool:
    """How this torch asks varlen_attn for causal attention: torch 2.10 took is_causal=True, later versions a
    window_size of (-1, 0) (every key before the query, none after)."""
    return "window_size" in inspect.signature(_varlen()).parameters


def mark_constant_for_compile() -> None:
    """Tell torch.compile that the two questions above have constant answers (torch.compiler.assume_constant_result:
    it asks them while tracing instead of tracing them). runtime.Runtime.wrap calls it before compiling; marking them
    here at import would import torch.compile's machinery into every command."""
    for question in (_flash_runs_on, _varlen_takes_window):
        torch.compiler.assume_constant_result(question)


def varlen_attention(q: Tensor, k: Tensor, v: Tensor, mask: PackedMask, is_causal: bool) -> Tensor:
    """Eq. 1 within each sentence by torch's variable-length flash kernel: q (Nq, h, dk), k (Nk, h, dk),
    v (Nk, h, dv) -> (Nq, h, dv). is_causal: query j of a sentence sees keys 0..j of the same sentence."""
    causal = {} if not is_causal else {"window_size": (-1, 0)} if _varlen_takes_window() else {"is_causal": True}
    return _varlen()(q, k, v, mask.queries.cu_seqlens, mask.keys.cu_seqlens, mask.queries.max_len,
                       mask.keys.max_len, **causal)


# ---------------------------------------------------------------------------------------------------------
# MultiHeadAttention over packed sentences.


def packed_attention(q: Tensor, k: Tensor, v: Tensor, heads: int, mask: PackedMask, is_causal: bool,
                     attention: Callable[..., Tensor]) -> Tensor:
    """Every head's eq. 1 with each query within its own sentence: projected queries q (Nq, h*dk), keys k (Nk, h*dk),
    values v (Nk, h*dv) -> (Nq, h*dv). By the variable-length flash kernel where it runs, else through the padded
    layout with `attention` (MultiHeadAttention's padded eq. 1). Training only: no cache."""
    q = q.view(-1, heads, q.size(-1) // heads)  # (Nq, h*dk) -> (Nq, h, dk)
    k = k.view(-1, heads, k.size(-1) // heads)  # (Nk, h, dk)
    v = v.view(-1, heads, v.size(-1) // heads)  # (Nk, h, dv)
    if use_varlen_attention(q, v):
        out = varlen_attention(q, k, v, mask, is_causal)  # (Nq, h, dv)
    else:
        queries, keys = mask.queries, mask.keys
        q, k, v = queries.pad(q), keys.pad(k), keys.pad(v)  # (B, h, Lq, dk), (B, h, Lk, dk), (B, h, Lk, dv)
        key_mask = None if is_causal else keys.key_mask  # causal: no real query sees a later pad
        out = queries.unpad(attention(q, k, v, key_mask, is_causal))  # (Nq, h, dv)
    return out.reshape(-1, heads * v.size(-1))  # (Nq, h, dv) -> (Nq, h*dv)
