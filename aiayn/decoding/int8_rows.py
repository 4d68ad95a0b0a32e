"""int8 projections on aiayn's own kernel (aiayn/native_int8.c): what int8 decoding runs where runtime.int8_engine()
picks "aiayn" (a CPU with AVX2 and no int8 dot products, where torch's engines are fbgemm's and oneDNN's AVX2 paths).

    RowInt8Linear.quantized(W, b)    x -> x W^T + b: W quantized once to int8 per output channel (max |W_n| / 127),
                                     each row of x quantized on the fly over its own range (7 bits and a sign), the
                                     products summed in int32 and scaled back in one pass
    RowInt8Linear.of(values, scale, bias)      from int8 values already made (a shortlist's rows of the output
                                               projection, a self-attention's W^Q, W^K, W^V stacked)

torch's dynamic int8 (fbgemm, oneDNN) quantizes a whole batch over one range, so a row's products depend on the
other rows beside it and a row of small numbers keeps few levels; here a row's products are its own. The kernel runs
on the calling thread alone (aiayn searches batches side by side, one thread each: translator.in_parallel). Its
buffers are the module's, so a state dict holds them and a load_state_dict fills them in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from aiayn import native


class RowInt8Linear(nn.Module):
    def __init__(self, weights: native.Int8Weights):
        super().__init__()
        self.in_features, self.out_features = weights.n_in, weights.n_out
        for name in ("packed", "colsum", "scale", "bias"):
            self.register_buffer(name, getattr(weights, name))
        self.weights = weights

    @classmethod
    def quantized(cls, weight: Tensor, bias: Tensor | None) -> RowInt8Linear:
        w = weight.detach().float()
        scale = w.abs().amax(1) / 127
        values = torch.round(w / scale.clamp_min(torch.finfo(torch.float32).tiny)[:, None]).clamp_(-127, 127)
        return cls.of(values.to(torch.int8), scale, bias)

    @classmethod
    def of(cls, values: Tensor, scale: Tensor, bias: Tensor | None) -> RowInt8Linear:
        return cls(native.pack_int8(values, scale, None if bias is None else bias.detach().float()))

    @classmethod
    def stacked(cls, parts: Sequence[RowInt8Linear]) -> RowInt8Linear:
        """The projections `parts` (the same inputs) as one: their outputs side by side, each to the bit its own
        (its rows' int8 values and scales as they are; a row of x quantizes alike in either)."""
        values, scales, biases = zip(*(p.weight_bias() for p in parts))
        return cls.of(torch.cat(values), torch.cat(scales), None if None in biases else torch.cat(biases))

    def forward(self, x: Tensor) -> Tensor:
        return native.int8_linear(x, self.weights)

    def weight_bias(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """(int8 values (N, K), scales (N,), bias (N,) or None where it is all zeros)."""
        n = self.out_features
        bias = self.bias[:n]
        return native.unpack_int8(self.weights), self.scale[:n], bias if bias.any() else None

    def rows(self, ids: Tensor) -> RowInt8Linear:
        """The projection of the outputs `ids` alone (a shortlist's, each batch): the same int8 rows and scales, so
        the same products; those rows read from the packed matrix, not the whole of it unpacked."""
        bias = self.bias.index_select(0, ids)
        return RowInt8Linear.of(native.unpack_int8(self.weights, ids), self.scale.index_select(0, ids),
                                bias if bias.any() else None)

    def _apply(self, fn, recurse=True):  # .to() and the like replace the buffers: the kernel reads the new ones
        super()._apply(fn, recurse)
        self.weights = self.weights._replace(**{name: getattr(self, name)
                                                for name in ("packed", "colsum", "scale", "bias")}).with_pointers()
        return self

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows (aiayn's kernel)"
