"""The decoder's incremental state (section 3.2.3's masked self-attention, decoded one position at a time): what
step t needs from steps < t, so that a step costs one position's work instead of the whole prefix's.

    LayerCache     one decoder layer's self-attention keys/values (two layouts, below) and cross-attention keys/values;
                   `attend` runs a step of that layer's MultiHeadAttention on them
    DecoderCache   every layer's, and the position reached; `reorder` follows beam search's choices
    by_sentence    cross-attention of g decoder rows (beams) per source sentence against its keys kept once
    sentences_of   a tensor's rows of the sentences a search keeps (sentence_moves: what they move, found once)
    FixedLayerCache  one layer's keys/values in buffers of fixed shape, for the fixed-shape search
                   (aiayn.decoding.static_search): the same `attend`, with the step a device tensor

Incremental decoding equals full decoding of the same prefixes (tests/test_model.py, tests/test_cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from aiayn import native


@dataclass
class LayerCache:
    """Keys/values of one decoder layer.

    Self-attention: one entry per decoder row and target position, in one of two layouts.
    - time-major, (T, N, h, d) in a buffer with room to grow (T >= `length`): a step writes its positions in place
      instead of copying the whole past, and attention reads a strided view (N, h, t, d). Used in fp32 and on GPUs.
      A reorder (beam search: every step) copies the past once, rows picked, into a spare buffer of the same shape,
      which then holds the cache, and the old buffer becomes the spare for the next tensor copied: one spare for the
      whole decoder (DecoderCache.spares; two if keys and values differ in size), not one per layer and tensor.
    - concatenated, (N, h, t, d): each step appends by torch.cat (a reorder copies the past, the append copies it
      again). Used for CPU bf16 (its matmuls are slower on strided views). Measurements: docs/speed-design.md.
    benchmarks/ab/self_attention_cache.py measures the layouts.
    Cross-attention: computed once per source sentence and shared by all rows (beams) of it; on the CPU, for beams of
    4 or more, its keys are held as K^T (keys_for_queries)."""

    length: int = 0  # target positions held
    rows: int = 0  # decoder rows held (time-major: the buffer may have room for more, left by an in-place reorder)
    keys: Tensor | None = None  # self-attention: (T, N, h, dk) time-major, or (N, h, t, dk) concatenated
    values: Tensor | None = None  # (T, N, h, dv) or (N, h, t, dv)
    time_major: bool | None = None  # None: chosen at the first step as above
    cross_k: Tensor | None = None  # (B, h, S, dk), or a view of K^T held contiguous (keys_for_queries)
    cross_v: Tensor | None = None  # (B, h, S, dv)

    def attend(self, attention, q: Tensor, source: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        """One decoding step of `attention`, this layer's self- or cross-attention (a model.MultiHeadAttention): its
        queries q (N, h, n, dk) over the keys/values of source and the earlier steps -> heads (N, h, n, dv).
        Self-attention: source (N, n, D) holds the new positions, appended to the cached ones. Cross-attention: the
        keys/values of the memory source (B, S, D) are computed at the first step only, and the N = B * g rows
        attend to them g per sentence (`by_sentence`)."""
        decoding = not attention.training
        held = held_dtype(q, decoding)  # the dtype of the keys/values held here, and of attention over them
        if attention.self_attention:
            k, v = attention.keys_values(source)
            k, v = self.append(k.to(held), v.to(held))  # (N, h, t+n, dk), (N, h, t+n, dv)
            mask, is_causal = _last_positions(q, k, mask, is_causal)
            return attention.attention(q.to(held), k, v, mask, is_causal, decoding).to(q.dtype)
        if self.cross_k is None:  # laid out once: otherwise every step's matmul copies them again
            k, v = attention.keys_values(source)
            beams = q.size(0) // k.size(0)  # decoder rows per sentence: a step's queries per sentence and head
            self.cross_k, self.cross_v = keys_for_queries(k.to(held), beams), v.to(held).contiguous()
        heads = by_sentence(attention.attention, q.to(held), self.cross_k, self.cross_v, mask, is_causal, decoding)
        return heads.to(q.dtype)

    def append(self, k: Tensor, v: Tensor, views: bool = True) -> tuple[Tensor, Tensor] | None:
        """Add this step's keys k (N, h, n, dk) and values v (N, h, n, dv); return those of all `length` positions
        so far, (N, h, length, d) (views=False: nothing, for a reader of the buffers themselves: aiayn.native)."""
        end = self.length + k.size(2)
        if self.time_major is None:
            self.time_major = k.device.type != "cpu" or k.dtype == torch.float32
        if not self.time_major:
            if self.keys is not None:
                k, v = torch.cat([self.keys, k], dim=2), torch.cat([self.values, v], dim=2)
            self.keys, self.values, self.length = k, v, end
            return k, v
        self.rows = k.size(0)
        if self.keys is None or end > self.keys.size(0):  # grow: double the room (at least 16 positions)
            room = max(end, 2 * self.length, 16)
            self.keys = _time_major(self.keys, self.length, k, room)
            self.values = _time_major(self.values, self.length, v, room)
        self.keys[self.length: end, : self.rows] = k.permute(2, 0, 1, 3)
        self.values[self.length: end, : self.rows] = v.permute(2, 0, 1, 3)
        self.length = end
        return self._self_attention_view() if views else None

    def _self_attention_view(self) -> tuple[Tensor, Tensor]:
        if not self.time_major:
            return self.keys, self.values
        keys, values = self.keys[: self.length, : self.rows], self.values[: self.length, : self.rows]
        return keys.permute(1, 2, 0, 3), values.permute(1, 2, 0, 3)

    def reorder(self, rows: Tensor, sentences: Tensor | SentenceMoves | None = None, spares: dict | None = None,
                copies: tuple[Tensor, Tensor] | None = None) -> None:
        """Keep rows `rows` (and source sentences `sentences`, or their sentence_moves). spares: the free time-major
        buffers a reorder copies into (`_rows_into`), shared by the layers. copies: the (position, row) entries to
        copy, as flat indices into the time-major past (position * the buffer's rows + row), destinations and sources
        (entries_to_copy): only those are copied, in place (the rows kept come first; the buffer keeps its room for
        the rows left)."""
        if self.keys is not None and not self.time_major:
            self.keys, self.values = self.keys.index_select(0, rows), self.values.index_select(0, rows)
        elif self.keys is not None and copies is not None:
            into, source = copies
            for buf in (self.keys, self.values):  # every source read before any entry is overwritten
                move_rows(buf[: self.length].view(-1, *buf.shape[2:]), into, source)  # (length * N, h, d)
            self.rows = rows.numel()
        elif self.keys is not None:  # one copy of the past into a spare buffer, which then holds the cache
            spares = {} if spares is None else spares
            self.keys = _rows_into(self.keys, rows, self.length, spares)
            self.values = _rows_into(self.values, rows, self.length, spares)
            self.rows = rows.numel()
        if sentences is not None and self.cross_k is not None:
            self.cross_k = sentences_of(self.cross_k, sentences)
            self.cross_v = sentences_of(self.cross_v, sentences)


def keys_for_queries(k: Tensor, queries: int) -> Tensor:
    """Cross-attention keys k (B, h, S, dk) laid out for the steps that multiply Q K^T with them, `queries` rows of Q
    per sentence and head at a step (its beams: a search steps one position at a time, and the layout is chosen at
    its first step). On the CPU in fp32 where aiayn.native's kernels run the steps: K^T held, each head's (dk, S)
    rows padded to whole vectors of 8 positions (the kernel reads them 8 positions at a time, never attending to the
    padding), as a view (B, h, S, dk) of that buffer. Else, on the CPU, for 4 or more queries, a view of K^T held
    contiguous, since MKL's batched GEMM of a step's few queries per sentence against keys read transposed takes
    1.5-2.5x as long at beam 4's shapes, with the same products (benchmarks/ab/cross_attention_keys.py; the decoded
    lines stay bit for bit). For one or two queries (greedy search, beam 2) MKL multiplies with other kernels whose
    sums differ in the last bits, and gains little: there, and off the CPU (torch's fused attention kernel reads K),
    K contiguous."""
    if k.device.type != "cpu":
        return k.contiguous()
    if k.dtype == torch.float32 and native.available():
        b, h, s, d = k.shape
        held = k.new_zeros(b, h, d, -(-s // 8) * 8)
        held[..., :s] = k.transpose(-2, -1)
        return held[..., :s].transpose(-2, -1)
    if queries < 4:
        return k.contiguous()
    return k.transpose(-2, -1).contiguous().transpose(-2, -1)


@dataclass(frozen=True)
class SentenceMoves:
    """A reorder's sentences to keep (B',), and what `sentences_of` needs to know of them, found once for every
    tensor the reorder moves (a search's memory, mask and each layer's cross-attention keys and values): the rows
    whose sentence changes, the rows they take theirs from, and whether each of those lies from B' on."""

    keep: Tensor
    moved: Tensor
    sources: Tensor
    in_place: bool


def sentence_moves(keep: Tensor) -> SentenceMoves:
    """The SentenceMoves of keeping sentences `keep` (B',), rows into the tensors held now."""
    m = keep.numel()
    moved = (keep != torch.arange(m, device=keep.device)).nonzero().squeeze(1)
    sources = keep[moved]
    return SentenceMoves(keep, moved, sources, bool((sources >= m).all()))


def sentences_of(x: Tensor, keep: Tensor | SentenceMoves) -> Tensor:
    """x.index_select(0, keep) in x's own layout (keys_for_queries), for tensors with a row per sentence that the
    caller owns (x may change). Where `keep` is what a search's going_on gives (rows 0..m-1 kept in place but for some
    that take the place of rows from m on), only the rows that move are copied, in place, and x's first m rows are
    returned as a view: when one of 128 sentences ends, one row moves instead of all 127. keep: the rows, or their
    sentence_moves (what is the same for every tensor of a reorder, found once)."""
    moves = keep if isinstance(keep, SentenceMoves) else sentence_moves(keep)
    if not (torch.is_grad_enabled() and x.requires_grad) and moves.in_place:
        if moves.moved.numel():
            move_rows(x, moves.moved, moves.sources)
        return x[: moves.keep.numel()]
    if x.is_contiguous():
        return x.index_select(0, moves.keep)
    kept = x.new_empty((x.stride(0) * moves.keep.numel(),)).as_strided((moves.keep.numel(), *x.shape[1:]), x.stride())
    return kept.copy_(x.index_select(0, moves.keep))  # in x's layout (K^T held, padded or not)


def move_rows(x: Tensor, into: Tensor, source: Tensor) -> None:
    """x.index_copy_(0, into, x.index_select(0, source)), the same bytes: by aiayn.native's copies of whole rows where
    they run (x contiguous on the CPU), else by torch's indexed copies, which move a row a number at a time."""
    if x.is_cpu and x.is_contiguous() and native.available():
        native.move_rows(x, into, source)
    else:
        x.index_copy_(0, into, x.index_select(0, source))


def held_dtype(q: Tensor, decoding: bool) -> torch.dtype:
    """The dtype a decoder's cached keys/values are held in, and attention over them runs in, for queries q: fp32
    where a CPU decodes in bf16, else q's own. On the CPU torch's bf16 attention for a step's few queries is its
    fused kernel, several times slower than the fp32 path's two matmuls (aiayn.fast.use_matmul_attention: bf16
    matmuls meet a new key length at every step); keys and values are cast once, when they are computed, and the
    fp32 result is cast back, so the projections stay bf16. Equal to the bf16 attention up to rounding (the bf16
    path rounds the weights to bf16 before multiplying the values; this one does not)."""
    return torch.float32 if decoding and q.dtype == torch.bfloat16 and q.device.type == "cpu" else q.dtype


def _last_positions(q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool) -> tuple[Tensor | None, bool]:
    """(mask, is_causal) for queries q (N, h, n, dk) that are the last n of the m positions of keys k (N, h, m, dk):
    a causal step of several new positions gets an explicit mask, since torch's fused kernel aligns is_causal to the
    first positions; a single new position sees every cached one and needs none."""
    n, m = q.size(2), k.size(2)
    if not is_causal or n == m:
        return mask, is_causal
    if n == 1:
        return mask, False
    return torch.ones(n, m, dtype=torch.bool, device=q.device).tril(m - n), False  # (n, m): query i sees <= m-n+i


def by_sentence(attention, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
                decoding: bool) -> Tensor:
    """attention(q, k, v, ...) for q (B*g, h, n, dk) holding g decoder rows (beams) per source sentence of keys
    k (B, h, S, dk) and values v (B, h, S, dv), sentence-major: the g*n queries of a sentence attend to its keys
    together, so the keys are neither copied per row nor read once per row. -> (B*g, h, n, dv)."""
    b, group = k.size(0), q.size(0) // k.size(0)
    if group * b != q.size(0):
        raise ValueError(f"{q.size(0)} decoder rows do not group evenly over {b} source sentences")
    if group == 1:
        return attention(q, k, v, mask, is_causal, decoding)
    _, h, n, dk = q.shape
    q = q.view(b, group, h, n, dk).transpose(1, 2).reshape(b, h, group * n, dk)  # (B*g, h, n) -> (B, h, g*n)
    out = attention(q, k, v, mask, is_causal, decoding)  # (B, h, g*n, dv)
    return out.view(b, h, group, n, -1).transpose(1, 2).reshape(b * group, h, n, -1)  # (B*g, h, n, dv)


def entries_to_copy(rows: Tensor, shared: Tensor, length: int, stride: int) -> tuple[Tensor, Tensor] | None:
    """A reorder that keeps `rows` (N',) of the N rows held, N' <= N, whose first `length` positions rows i and j
    hold as copies of the same keys/values for shared[i, j] positions (N, N), in a time-major buffer with room for
    `stride` rows: the (position, row) entries that change, as flat indices (position * stride + row) to write and
    to read, (E,) each; None where copying them in place (out, then in: twice their bytes) would move more than
    copying every entry once into the spare buffer. Row i takes row rows[i]'s past, of which its first
    shared[i, rows[i]] positions are already the same: a beam that keeps its parent copies nothing, one that takes a
    sibling's prefix only the positions since they parted, a row kept in its place when others leave nothing."""
    n = rows.numel()
    same = shared[:n].gather(1, rows[:, None]).squeeze(1)  # (N',) leading positions row i already holds
    change = torch.arange(length, device=rows.device)[:, None] >= same[None, :]  # (length, N')
    position, row = change.nonzero(as_tuple=True)  # (E,) each, position-major
    if 2 * position.numel() > length * n:
        return None
    return position * stride + row, position * stride + rows[row]


def _rows_into(buf: Tensor, rows: Tensor, length: int, spares: dict) -> Tensor:
    """The time-major buffer `buf`'s first `length` positions with `rows` picked along N, in a buffer of buf's room:
    the spare of that shape if there is one (else a new buffer), returned; `buf` becomes the spare in its place.
    spares holds one buffer per kind (dtype, device, heads, head size), so one stale since the room grew or the rows
    changed is dropped at the next reorder."""
    if torch.is_grad_enabled() and buf.requires_grad:  # out= records no graph: a new buffer instead
        return buf.index_select(1, rows)
    shape, kind = (buf.size(0), rows.numel(), *buf.shape[2:]), (buf.dtype, buf.device, *buf.shape[2:])
    into = spares.pop(kind, None)
    if into is None or into.shape != shape:
        into = buf.new_empty(shape)
    torch.index_select(buf[:length], 1, rows, out=into[:length])
    spares[kind] = buf
    return into


def _time_major(old: Tensor | None, length: int, like: Tensor, room: int) -> Tensor:
    """A (room, N, h, d) buffer for keys/values shaped like `like` (N, h, n, d), holding old[:length]."""
    n, h, _, d = like.shape
    buf = like.new_empty((room, n, h, d))
    if old is not None:
        buf[:length] = old[:length, :n]
    return buf


@dataclass
class DecoderCache:
    """Everything step t of incremental decoding needs from steps < t.

    Rows and sentences: the decoder may run N = B * g rows for B source sentences, grouped sentence-major (row r
    belongs to sentence r // g; g = beams). Self-attention state is per row, cross-attention keys/values per
    sentence, so beam search never copies the latter when it reorders its beams."""

    layers: list[LayerCache] = field(default_factory=list)
    length: int = 0  # target positions already cached
    spares: dict = field(default_factory=dict)  # a free time-major buffer per kind, for reorders (_rows_into)
    shared: Tensor | None = None  # (N, N) int32: leading positions rows i and j hold as copies of the same keys/values

    def reorder(self, rows: Tensor, sentences: Tensor | SentenceMoves | None = None) -> None:
        """Keep decoder rows `rows` (LongTensor (N',)), in that order; and source sentences `sentences`
        (LongTensor (B',), or its sentence_moves) when the set of sentences changes (None: the same sentences)."""
        first = self.layers[0] if self.layers else None
        copies = None
        if first is not None and first.keys is not None and first.time_major and not first.keys.requires_grad:
            shared = self.shared_positions(first.rows, rows.device)
            if rows.numel() <= first.rows:  # the same for every layer: found once
                copies = entries_to_copy(rows, shared, self.length, first.keys.size(1))
            self.shared = shared.index_select(0, rows).index_select(1, rows)  # rows i, j share what their sources did
        for layer in self.layers:
            layer.reorder(rows, sentences, self.spares, copies)


    def shared_positions(self, n: int, device: torch.device | None = None) -> Tensor:
        """(n, n) int32: for rows i and j of the n in the cache, how many leading positions they hold as copies of
        the same keys/values (a beam reorder's copies: rows computed apart share none; a row holds all of its own)."""
        if self.shared is None or self.shared.size(0) != n:
            self.shared = torch.zeros(n, n, dtype=torch.int32, device=device)
        self.shared.diagonal().fill_(self.length)
        return self.shared


@dataclass
class FixedLayerCache:
    """One decoder layer's keys/values for the fixed-shape search (aiayn.decoding.static_search): nothing changes shape
    from step to step, and nothing is read back to the host, so that one step can be captured as a CUDA graph.

    Self-attention keys/values live in preallocated (N, h, W, d) buffers: step `t` (a 0-d device tensor, advanced by
    the search) writes position t in place, and the query attends over all W positions, those after t masked.
    Cross-attention keys/values (B, h, S, d) are loaded once per batch (`load`), source padding masked by the mask the
    decoder passes. `attend` runs the layer's own MultiHeadAttention.attention, as LayerCache.attend does."""

    t: Tensor  # () long: the step, shared by the layers
    self_k: Tensor  # (N, h, W, dk)
    self_v: Tensor  # (N, h, W, dv)
    cross_k: Tensor  # (B, h, S, dk)
    cross_v: Tensor  # (B, h, S, dv)

    def attend(self, attention, q: Tensor, source: Tensor | None, mask: Tensor | None, is_causal: bool) -> Tensor:
        """One step of `attention` (a model.MultiHeadAttention) for queries q (N, h, 1, dk) -> heads (N, h, 1, dv)."""
        decoding = not attention.training
        if attention.self_attention:
            k, v = attention.keys_values(source)  # (N, h, 1, dk), (N, h, 1, dv)
            self.self_k.index_copy_(2, self.t.view(1), k)
            self.self_v.index_copy_(2, self.t.view(1), v)
            seen = torch.arange(self.self_k.size(2), device=q.device).le(self.t)[None]  # (1, W): positions <= t
            return attention.attention(q, self.self_k, self.self_v, seen, False, decoding)
        return by_sentence(attention.attention, q, self.cross_k, self.cross_v, mask, False, decoding)

    def load(self, attention, memory: Tensor) -> None:
        """A new batch: this layer's cross-attention keys/values of `memory` (B, S, D), the self-attention emptied.
        In place: a captured step reads these very tensors."""
        k, v = attention.keys_values(memory)
        self.cross_k.copy_(k)
        self.cross_v.copy_(v)
        self.self_k.zero_()
        self.self_v.zero_()

    def reorder(self, rows: Tensor) -> None:
        """Row r now continues the prefix of row rows[r] (N,): the self-attention keys/values follow, in place."""
        for buf in (self.self_k, self.self_v):
            buf.copy_(buf.index_select(0, rows))
