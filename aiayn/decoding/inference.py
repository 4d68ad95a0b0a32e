"""Decoding precisions: the one place that turns a trained model into the copy that decoding runs.

    PRECISIONS                  "fp32" (the model's own weights), "bf16" (a copy converted once: autocast would cast
                                the weights again at every step), "int8" (every projection dynamically quantized:
                                int8 weights, one scale per output channel, the input quantized per batch on
                                torch's engines, per row on aiayn's: int8_rows; CPU)
    DecodingTransformer         a Transformer in one of those formats, `prepacked` or not; the same modules and maths
    decoding_copy(model, ...)   the trained model -> a DecodingTransformer (the model passed in is left as it was,
                                unless `consume`: then its tensors move into the copy or are freed as it is made)
    load(path, precision, ...)  a run directory or checkpoint -> (DecodingTransformer, vocabulary), converted once,
                                with no second copy of the weights in memory at any time (what Translator.load uses)
    PrepackedLinear             nn.Linear with its weight packed once for oneDNN's GEMM (CPU decoding)

Each format equals the model it came from up to its arithmetic (tests/test_inference.py): LayerNorm, softmax and
the log-softmax stay in fp32 (bf16: they accumulate in fp32); what each is worth in time: docs/speed.md.
"""

from __future__ import annotations

import copy
import functools
import itertools
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn import rundir
from aiayn.allocator import release_freed_memory
from aiayn.config import PRECISIONS
from aiayn.decoding import step
from aiayn.decoding.int8_rows import RowInt8Linear
from aiayn.errors import UsageError
from aiayn.model import FeedForward, Transformer
from aiayn.runtime import configure_process, fp32_gemm, int8_engine, int8_packing, int8_step_engine, warn_if_bf16_slow

_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise UsageError(f"the decoding precision must be {', '.join(PRECISIONS)}, not {precision!r}")
    return precision


class DecodingTransformer(Transformer):
    """A Transformer as decoding runs it: its weights converted once to `precision` (fp32, bf16, int8), its projections
    `prepacked` for oneDNN or not (or the largest alone: decoding_copy), and its tied output projection replaced by an
    equal one in the same format (`output_projection`, a plain callable: it owns no state of its own, so the state
    dict is the model's)."""

    precision: str = "fp32"
    prepacked: bool = False
    output_projection: Callable[[Tensor], Tensor] | None = None
    fused_qkv: list | None = None  # int8: per decoder layer, its self-attention's W^Q, W^K, W^V as one (_Int8Fused)

    def decode_hidden(self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor | None, cache=None) -> Tensor:
        """Transformer.decode_hidden; a step of one new position over a primed cache written out without module
        calls where it can be (aiayn.decoding.step: the same bits)."""
        if step.takes(self, tgt_in, cache):
            return step.step(self, tgt_in, src_pad, cache)
        return super().decode_hidden(tgt_in, memory, src_pad, cache)

    def output_logits(self, hidden: Tensor) -> Tensor:
        if self.output_projection is not None:
            return self.add_output_bias(self.output_projection(hidden))
        return super().output_logits(hidden)

    def output_rows(self, ids: Tensor) -> Callable[[Tensor], Tensor]:
        """The output projection of the pieces `ids` (V',) alone, in this model's format: hidden (..., D) -> logits
        (..., V'), output_logits(hidden)[..., ids] up to the order of the sums (aiayn.decoding.shortlist decodes with
        it)."""
        rows = self.output_projection.rows(ids) if self.output_projection is not None else functools.partial(
            F.linear, weight=self.embedding.weight.index_select(0, ids))  # (V', D)
        return rows if self.output_bias is None else lambda hidden: self.add_output_bias(rows(hidden), ids)


def _mark(q: nn.Module, precision: str, prepacked: bool) -> DecodingTransformer:
    """Make `q`, a copy of a Transformer that is the caller's own, the DecodingTransformer it now is."""
    q.__class__ = DecodingTransformer  # a subclass with no state of nn.Module's own: the copy becomes one as it is
    q.precision, q.prepacked = precision, prepacked
    for m in q.modules():
        if isinstance(m, FeedForward) and m.activation is F.relu:
            m.activation = torch.relu_  # on W1's product, which nothing else holds: no second (rows, d_ff) tensor
    return q.eval()


def _copy(model: nn.Module, tensors: str, linear: str = "kept") -> nn.Module:
    """A structural copy of `model`: its tensors "copied" or "shared" (the same tensors); the nn.Linear layers'
    weights and biases as the others ("kept") or "dropped" (None: the caller replaces those layers)."""
    memo = {}
    if tensors == "shared":
        memo = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    if linear == "dropped":
        linears = (t for m in model.modules() if isinstance(m, nn.Linear) for t in (m.weight, m.bias))
        memo.update({id(t): None for t in linears if t is not None})
    return copy.deepcopy(model, memo)


def decoding_copy(model: Transformer, precision: str = "fp32", prepack: bool | None = None,
                  consume: bool = False) -> DecodingTransformer:
    """The model to decode with, in eval mode, its weights in `precision` (PRECISIONS). prepack (fp32 and bf16 on CPU;
    None: bf16 wherever oneDNN runs it, fp32 where runtime.fp32_gemm picks oneDNN's GEMM over MKL's): every
    projection, the tied output projection included, becomes a PrepackedLinear. fp32 left to choose (None) and not
    packed still packs those whose weights runtime.fp32_gemm gives oneDNN's GEMM by their size; False: none.
    A DecodingTransformer already in that format is returned as it is. The model passed in is left as it was (fp32
    not prepacked shares its tensors), unless `consume` (its caller needs it no more): then the copy takes over its
    tensors where they fit and frees each projection's weight as soon as it is converted, so that the process never
    holds the weights twice."""
    q = _decoding_copy(model, check_precision(precision), prepack, consume)
    if consume:
        release_freed_memory()  # the weights the conversion freed, which `keep_freed_memory` would keep
    return q


def _decoding_copy(model: Transformer, precision: str, prepack: bool | None, consume: bool) -> DecodingTransformer:
    first, auto = next(model.parameters()), prepack is None
    if precision != "int8" and prepack is None:  # fp32 on MKL's GEMM: the plain weights (runtime.fp32_gemm)
        prepack = (first.device.type == "cpu" and (precision != "fp32" or fp32_gemm() == "onednn")
                   and _prepacking_works(_DTYPE[precision]))
    if isinstance(model, DecodingTransformer) and model.precision == precision and (
            precision == "int8" or model.prepacked == prepack):
        return model  # already in that format (what `load` returns): converted once, never again
    if precision == "bf16":
        warn_if_bf16_slow(first.device, "decode with --precision fp32 (or int8) here")
    if precision == "int8":
        return _int8_copy(model, consume)
    target = _DTYPE[precision]
    if prepack:
        return _prepacked_copy(model, precision, consume)
    q = _mark(_copy(model, "shared" if first.dtype == target or consume else "copied").to(target), precision,
              prepacked=False)
    if auto and precision == "fp32" and first.device.type == "cpu" and _prepacking_works(torch.float32):
        _pack_the_largest(q, model, consume)
    return q


def _pack_the_largest(q: DecodingTransformer, model: nn.Module, consume: bool) -> None:
    """fp32 on MKL's GEMM: the projections whose weights runtime.fp32_gemm gives oneDNN's GEMM instead by their size
    (on a CPU with AVX2 alone, the largest), the tied output projection among them, packed for it; consume: each
    weight of `model` packed freed, as _prepacked_copy does."""
    for name, m in list(q.named_modules()):
        if isinstance(m, nn.Linear) and fp32_gemm(m.weight.numel()) == "onednn":
            parent, _, attr = name.rpartition(".")
            setattr(q.get_submodule(parent) if parent else q, attr, PrepackedLinear(m.weight, m.bias))
            if consume:
                original = model.get_submodule(name)
                original.weight = original.bias = None
    if fp32_gemm(q.embedding.weight.numel()) == "onednn":
        _pack_output_projection(q)


def load(path: str | Path, precision: str = "fp32", device: str | torch.device = "cpu",
         prepack: bool | None = None) -> tuple[DecodingTransformer, object]:
    """(decoding model, vocabulary) from a run directory (the checkpoint aiayn.rundir.inference_checkpoint picks) or a
    checkpoint file: the one place that loads a model for decoding (Translator.load, once per ensemble member). The
    file is read as aiayn.rundir.load_for_inference reads it (header and shapes checked first, then the vocabulary,
    then the weights), onto `device`, and converted once to `precision` (PRECISIONS), prepacked or not; decoding_copy
    returns the result as it is. bf16 is converted in place first: the fp32 weights are not needed again, so the
    process never holds fp32 and bf16 copies at once; the other formats consume the loaded model likewise."""
    check_precision(precision)  # before reading a file that may be large
    device = torch.device(device)
    model, vocab, _ = rundir.load_for_inference(path, device=device)
    configure_process(device=device)  # cuDNN's attention out: decoding meets a new shape at every step
    if precision == "bf16":
        model.to(torch.bfloat16)
    return decoding_copy(model, precision, prepack, consume=True), vocab


# ---------------------------------------------------------------------------------------------------------
# Prepacked weights (CPU): oneDNN's GEMM on a weight reordered once.


@functools.cache
def _prepacking_works(dtype: torch.dtype) -> bool:
    """Whether this torch build and CPU run a PrepackedLinear in `dtype` (oneDNN's bf16 kernels, for one, need AVX-512
    or newer; builds for other architectures may lack the ops): tried once on a 2 x 2 layer."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        layer = nn.Linear(2, 2).to(dtype)
        with torch.no_grad():
            x = torch.ones(1, 2, dtype=dtype)
            return torch.allclose(PrepackedLinear(layer.weight, layer.bias)(x).float(), layer(x).float(), atol=1e-2)
    except (RuntimeError, NotImplementedError):
        return False


ROWS_HINT = 256  # rows a decoder step multiplies (64 sentences x 4 beams): oneDNN picks its kernel for this


class PrepackedLinear(nn.Module):
    """y = x W^T + b (nn.Linear) for decoding on CPU, with W packed once into oneDNN's blocked layout.

    `F.linear` hands the plain weight to the GEMM, which reorders it at every call: at a decoder step's few rows
    that reordering is a large share of the work (benchmarks/ab/packed_linear.py). The result equals nn.Linear's up
    to the order of the sums (tests/test_inference.py). Inference only: the packed weight has no gradient."""

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

    # The state dict holds nn.Linear's plain tensors, so a prepacked copy saves and loads as the model it came from.
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


class _PrepackedTiedProjection:
    """hidden -> logits with a packed copy of the (tied) embedding matrix; `pack` packs it again (after a
    load_state_dict)."""

    def __init__(self, embedding: nn.Embedding):
        self.embedding = embedding
        self.pack()

    def pack(self) -> None:
        self.linear = PrepackedLinear(self.embedding.weight, None)

    def __call__(self, hidden: Tensor) -> Tensor:
        return self.linear(hidden)

    def rows(self, ids: Tensor) -> PrepackedLinear:
        """The projection of the pieces `ids` alone, packed likewise."""
        return PrepackedLinear(self.embedding.weight.index_select(0, ids), None)


def _prepacked_copy(model: nn.Module, precision: str, consume: bool = False) -> DecodingTransformer:
    """A copy of `model` in `precision` whose nn.Linear layers, and tied output projection, are PrepackedLinear;
    consume: the other tensors are shared with `model` and its projections' weights freed one by one as they are
    packed (each freed block is then reused for the next packed weight)."""
    target = _DTYPE[precision]
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    q = _copy(model, "shared" if consume else "copied", linear="dropped").to(target)  # projections packed below
    q = _mark(q, precision, prepacked=True)
    for name, m in linears:
        parent, _, attr = name.rpartition(".")
        bias = None if m.bias is None else m.bias.to(target)
        setattr(q.get_submodule(parent) if parent else q, attr, PrepackedLinear(m.weight.to(target), bias))
        if consume:
            m.weight = m.bias = None
    _pack_output_projection(q)
    return q


def _pack_output_projection(q: DecodingTransformer) -> None:
    """q's tied output projection on a packed copy of its embedding matrix, packed again after a load_state_dict."""
    q.output_projection = _PrepackedTiedProjection(q.embedding)
    q.register_load_state_dict_post_hook(lambda module, _: module.output_projection.pack())


# ---------------------------------------------------------------------------------------------------------
# int8 (CPU): dynamic quantization, the int8 GEMM of oneDNN (VNNI, AMX), fbgemm, or aiayn's own with each row over
# its own range (AVX2 alone: int8_rows.RowInt8Linear) (runtime.int8_engine; the decoder's: runtime.int8_step_engine).


class _Int8TiedProjection:
    """hidden -> logits with an int8 copy of the (tied) embedding matrix `weight` (fp32, the model's own; `rows`
    takes some of the int8 rows); `pack` quantizes it again (after a load_state_dict)."""

    def __init__(self, weight: Tensor):
        self.weight = weight
        self.pack()

    def pack(self) -> None:
        self._int8 = None
        self.linear = _int8_projection(self.weight, None, int8_engine())

    def __call__(self, hidden: Tensor) -> Tensor:
        return self.linear(hidden)

    def rows(self, ids: Tensor) -> _Int8Rows:
        """The projection of the pieces `ids` alone: one scale per row, so their int8 rows and scales are the full
        matrix's, taken from it (quantized once, on the first call) and packed (a shortlist's batch: ~10 ms for
        3,400 x 256 where quantizing those rows anew took 22)."""
        if isinstance(self.linear, RowInt8Linear):
            return self.linear.rows(ids)
        if self._int8 is None:
            q, _ = self.linear._packed_params._weight_bias()  # (V, D) qint8, a scale per row
            self._int8 = (q.int_repr(), q.q_per_channel_scales(), q.q_per_channel_zero_points())
        values, scales, zeros = (t.index_select(0, ids) for t in self._int8)
        return _Int8Rows(torch._make_per_channel_quantized_tensor(values, scales, zeros, 0))


class _Int8Rows:
    """x -> x W^T + b with int8 rows `q` (V', D) of a projection (a tied one's, or several stacked: _Int8Fused) and
    their fp32 bias, packed for `engine`'s GEMM (default int8_engine()) and called as Int8Linear calls its operator
    (_int8_linear_class)."""

    def __init__(self, q: Tensor, bias: Tensor | None = None, engine: str | None = None):
        with int8_packing(engine):
            self.packed = torch.ops.quantized.linear_prepack(q, bias)

    def __call__(self, x: Tensor) -> Tensor:
        with torch._C.DisableTorchFunction():
            return _int8_op()(x, self.packed, True)


class _Int8Fused:
    """x -> Concat(x W^Q + b^Q, x W^K + b^K, x W^V + b^V): a decoder self-attention's three int8 projections as one
    GEMM, for the decoder step (aiayn.decoding.step). Their int8 rows, per-row scales and biases are taken as they
    are and stacked (one scale per row: the rows quantize alike either way); the input, quantized once per call with
    one scale for the whole tensor, is quantized as each of the three would quantize it. So the same products to
    the bit, with one quantization of the input and one call where there were three. `pack` stacks them again (after
    a load_state_dict)."""

    def __init__(self, attention: nn.Module):
        self.attention = attention
        self.pack()

    def pack(self) -> None:
        a = self.attention
        if isinstance(a.w_q, RowInt8Linear):
            self.projection = RowInt8Linear.stacked([a.w_q, a.w_k, a.w_v])
            return
        parts = [m._packed_params._weight_bias() for m in (a.w_q, a.w_k, a.w_v)]  # (qint8 (out, D), bias or None)
        weights = [w for w, _ in parts]
        q = torch._make_per_channel_quantized_tensor(
            torch.cat([w.int_repr() for w in weights]), torch.cat([w.q_per_channel_scales() for w in weights]),
            torch.cat([w.q_per_channel_zero_points() for w in weights]), 0)
        biases = [b for _, b in parts]
        self.projection = _Int8Rows(q, None if None in biases else torch.cat(biases), int8_step_engine())

    def __call__(self, x: Tensor) -> Tensor:
        return self.projection(x)

    def _weight_bias(self) -> tuple[Tensor, ...]:  # what weight_bytes counts
        if isinstance(self.projection, RowInt8Linear):
            return tuple(self.projection.buffers())
        return torch.ops.quantized.linear_unpack(self.projection.packed)


@functools.cache
def _int8_linear_class() -> type[nn.Module]:
    """torch.ao's dynamic quantized Linear whose forward calls its operator's one overload directly: the same call
    as torch's forward (int8 weights, reduce_range), less its Python (~10 us a call) and less the search for a
    `__torch_function__` on its arguments, which on the packed weights (a TorchScript object) raises and catches a
    C++ exception at every call (~10 us more: a 256 x 256 projection of one row costs ~20 us on oneDNN's int8 GEMM
    through this call, ~39 through torch's module; benchmarks/ab/int8_engine.py); made on first use, so that importing
    this module imports no torch.ao."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    op = _int8_op()
    plain = torch._C.DisableTorchFunction  # no tensor subclass or torch function mode takes part in this call

    class Int8Linear(DynamicLinear):
        operator = staticmethod(op)  # (x, packed weights, reduce_range): aiayn.decoding.step calls it directly

        def forward(self, x: Tensor) -> Tensor:
            with plain():
                return op(x, self._packed_params._packed_params, True)

    return Int8Linear


@functools.cache
def _int8_op():
    """torch's dynamic quantized linear operator's one overload, as its C++ function: no check for tracing's fake
    objects (~2.5 us a call)."""
    overload = torch.ops.quantized.linear_dynamic.default
    return getattr(overload, "_op", overload)


def _int8_projection(weight: Tensor, bias: Tensor | None, engine: str) -> nn.Module:
    """x W^T + b in int8 for `engine` (runtime.INT8_ENGINES): aiayn's kernel, or an Int8Linear packed for torch's."""
    if engine == "aiayn":
        return RowInt8Linear.quantized(weight, bias)
    with int8_packing(engine):
        q = _int8_linear(weight, bias)
    q.packed_for = engine  # a load_state_dict packs it under torch's engine of the moment: _pack_again packs it back
    return q


def _int8_linear(weight: Tensor, bias: Tensor | None) -> nn.Module:
    """An Int8Linear (_int8_linear_class) of the projection x W^T + b, as torch.ao's dynamic quantization makes it
    (DynamicLinear.from_float with per_channel_dynamic_qconfig: the weight observed and quantized to int8 per output
    channel, packed for the current quantized engine), to the bit. from_float first makes its module at full size,
    packing an empty weight of that size before the real one (half of a model's conversion time); this one is made
    at 1 x 1, then given the real weight. torch.ao.quantization announces its move to torchao: not the user's
    business."""
    from torch.ao.nn.quantized.modules.utils import _quantize_weight
    from torch.ao.quantization import per_channel_dynamic_qconfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        observer = per_channel_dynamic_qconfig.weight()
        observer(weight.detach())
        q = _int8_linear_class()(1, 1, dtype=torch.qint8)
    q.in_features, q.out_features = weight.size(1), weight.size(0)
    q.set_weight_bias(_quantize_weight(weight.detach().float(), observer), None if bias is None else bias.detach())
    return q


def _int8_copy(model: nn.Module, consume: bool = False) -> DecodingTransformer:
    """consume: `model` itself is quantized (its fp32 projections freed as they are replaced), not a copy."""
    if next(model.parameters()).device.type != "cpu":
        raise UsageError("int8 decoding runs on CPU (oneDNN's, fbgemm's or aiayn's int8 GEMM); use --precision bf16 "
                         "on GPUs")
    q = (model if consume else copy.deepcopy(model)).float().eval()
    decoder = {id(m) for m in q.decoder.modules()}
    for name, m in [(name, m) for name, m in q.named_modules() if isinstance(m, nn.Linear)]:
        parent, _, attr = name.rpartition(".")
        # the decoder's own projections run a step's few rows at a time: their engine (int8_step_engine)
        engine = int8_step_engine() if id(m) in decoder else int8_engine()
        setattr(q.get_submodule(parent) if parent else q, attr, _int8_projection(m.weight, m.bias, engine))
        if consume:
            m.weight = m.bias = None
    projection = _Int8TiedProjection(q.embedding.weight)
    q = _mark(q, "int8", prepacked=False)
    q.output_projection = projection
    q.fused_qkv = [_Int8Fused(layer.self_attn) for layer in q.decoder.layers]
    q.register_load_state_dict_post_hook(_pack_again)
    return q


def _pack_again(model: DecodingTransformer, _) -> None:
    """After a load_state_dict: torch's int8 projections packed again for their engine (loading packed them for
    torch's current one, whose kernels may round differently), the output projection quantized from the loaded
    embedding, the stacked projections taken from the loaded ones."""
    for m in model.modules():
        if getattr(m, "packed_for", None) is not None:
            with int8_packing(m.packed_for):
                m.set_weight_bias(*m._weight_bias())
    model.output_projection.pack()
    for fused in model.fused_qkv:
        fused.pack()


# ---------------------------------------------------------------------------------------------------------
# What a decoding model holds.


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the tensors a decoding model holds, each counted once, in every format above: its parameters and
    buffers, the weights packed into tensors of their own (PrepackedLinear's blocked layout), what a packed output
    projection holds (_PrepackedTiedProjection, _Int8TiedProjection: plain objects), and int8's quantized weights
    (packed by oneDNN or fbgemm, counted unpacked; the decoder step's stacked W^Q, W^K, W^V among them)."""
    holders: list[object] = list(model.modules())
    for module in list(holders):
        for value in vars(module).values():
            if isinstance(value, (_PrepackedTiedProjection, _Int8TiedProjection)):
                holders += [value, *value.linear.modules()]
            elif isinstance(value, list):
                holders += [v for v in value if isinstance(v, _Int8Fused)]
    seen: dict[int, Tensor] = {}  # by id: a tensor shared by two holders counts once (and stays alive till the end)
    for holder in holders:
        tensors = [v for v in vars(holder).values() if isinstance(v, Tensor)]
        if isinstance(holder, nn.Module):
            tensors += [*holder._parameters.values(), *holder._buffers.values()]
        if isinstance(getattr(holder, "_packed_params", None), torch.ScriptObject) or isinstance(holder, _Int8Fused):
            tensors += holder._weight_bias()  # int8: oneDNN's or fbgemm's packed weights
        seen.update((id(t), t) for t in tensors if t is not None)
    return sum(t.numel() * t.element_size() for t in seen.values())
