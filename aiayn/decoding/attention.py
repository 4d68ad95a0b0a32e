"""The attention weights a model computes, kept: `recording(model)` gives every MultiHeadAttention an
AttentionRecorder as its `attention` (eq. 1 as two matmuls, the softmax weights kept) and restores them after;
`record` runs ONE teacher-forced forward (model.encode + model.decode on the whole target) so that each recorder
holds its weights (B, h, n, m); `align` runs that forward only up to one decoder layer's cross-attention and turns
its weights into word links (aiayn.decoding.alignment's recipe): what aiayn's engine gives with `alignments=True`.
aiayn.viz draws what `record` keeps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding.alignment import alignment_layer, word_links
from aiayn.errors import UsageError
from aiayn.model import MultiHeadAttention, scaled_dot_product_attention


def attention_modules(model: nn.Module) -> dict[str, list[MultiHeadAttention]]:
    """The model's MultiHeadAttention modules by kind, one per layer, bottom layer first."""
    return {"encoder": [layer.self_attn for layer in model.encoder.layers],
            "decoder": [layer.self_attn for layer in model.decoder.layers],
            "cross": [layer.cross_attn for layer in model.decoder.layers]}


class AttentionRecorder:
    """A MultiHeadAttention's `attention` that keeps the weights: eq. 1 as two matmuls
    (model.scaled_dot_product_attention), the softmax weights of the last call in `weights` (B, h, n, m)."""

    def __init__(self) -> None:
        self.weights: Tensor | None = None

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False,
                 decoding: bool = False) -> Tensor:
        out, weights = scaled_dot_product_attention(q, k, v, mask, is_causal)
        self.weights = weights.detach()
        return out


@contextmanager
def recording(model: nn.Module) -> Iterator[dict[str, list[MultiHeadAttention]]]:
    """Keep every attention module's weights inside the block: each module's `attention` is an AttentionRecorder
    (its `.weights`). Afterwards the modules this changed compute attention as before, the recorders dropped (they
    hold memory, and they use the matmul kernel); modules that were recording already are left as they were."""
    changed = {m: m.attention for m in model.modules()
               if isinstance(m, MultiHeadAttention) and not isinstance(m.attention, AttentionRecorder)}
    for m in changed:
        m.attention = AttentionRecorder()
    try:
        yield attention_modules(model)
    finally:
        for m, before in changed.items():
            m.attention = before


@contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """The model in eval mode (no dropout) inside the block, in its own mode after."""
    was_training = model.training
    if was_training:
        model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()


def record(model: nn.Module, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, dict[str, list[Tensor]]]:
    """One teacher-forced forward: src (B, S) and tgt_in (B, T) (BOS first), both padded with PAD_ID ->
    (logits (B, T, V), {kind: [fp32 weights (B, h, n, m) per layer]}). Runs in eval mode (no dropout)."""
    with _evaluating(model), recording(model) as modules, torch.no_grad():
        logits = model.decode(tgt_in, model.encode(src), src.eq(PAD_ID))
        weights = {kind: [m.attention.weights.float() for m in ms] for kind, ms in modules.items()}
    return logits, weights


class _Recorded(Exception):
    """Raised by a forward hook once the weights wanted are recorded: nothing computed after them is needed."""


def _forward_until(module: nn.Module, model: nn.Module, *inputs: Tensor) -> None:
    """model(*inputs), stopped as soon as `module` has run (the layers above it, that layer's feed-forward and the
    output projection, the widest product of all, are not computed)."""
    def stop(_module, _inputs, _output):
        raise _Recorded

    hook = module.register_forward_hook(stop)
    try:
        model(*inputs)
    except _Recorded:
        pass
    finally:
        hook.remove()


def align(model: nn.Module, vocab, sources: Sequence[list[int] | None], targets: Sequence[list[int]],
          layer: int | None = None, batch_size: int = 32) -> list[list[tuple[int, int]]]:
    """Word alignments of many sentence pairs. sources: ids with EOS (as Translator.encode gives them; None, a
    blank line, gets no pairs); targets: ids without BOS/EOS (as Hypothesis.tokens). layer: encoder-decoder
    attention layer, from 0 (default: alignment_layer's, the top one)."""
    n_layers = model.cfg.n_dec_layers
    layer = alignment_layer(n_layers) if layer is None else layer
    if not 0 <= layer < n_layers:
        raise UsageError(f"--alignment-layer {layer}: the decoder's layers are numbered 0..{n_layers - 1}")
    device = next(model.parameters()).device
    out: list[list[tuple[int, int]]] = [[] for _ in sources]
    todo = sorted((n for n, s in enumerate(sources) if s is not None and targets[n]), key=lambda n: len(sources[n]))
    with _evaluating(model), recording(model) as modules, torch.no_grad():
        cross = modules["cross"][layer]  # what `record` computes, up to this layer's cross-attention
        for start in range(0, len(todo), batch_size):
            rows = todo[start: start + batch_size]
            srcs, tgts = [sources[n] for n in rows], [targets[n] for n in rows]
            src = padded(srcs, device)
            tgt_in = padded([[BOS_ID, *t] for t in tgts], device)
            _forward_until(cross, model, src, tgt_in)  # the teacher-forced forward, as `record`
            weights = cross.attention.weights.float().mean(dim=1).cpu()  # (B, T, S): heads averaged
            for b, (n, s, t) in enumerate(zip(rows, srcs, tgts)):
                src_pieces = [vocab.piece(i) for i in s if i != EOS_ID]  # Translator.encode puts EOS last only
                out[n] = word_links(weights[b, : len(t), : len(src_pieces)], src_pieces, [vocab.piece(i) for i in t])
    return out


def padded(rows: Sequence[Sequence[int]], device: str | torch.device = "cpu") -> Tensor:
    """Rows of token ids as one (len(rows), longest) long tensor, PAD after each row's end, on `device`."""
    batch = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for r, ids in enumerate(rows):
        batch[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return batch.to(device)
