"""aiayn's int8 kernel (aiayn/native_int8.c, aiayn.decoding.int8_rows): its sums exact against integer arithmetic at
every shape its blocks and tails take, each row quantized over its own range (a row's products its own, whatever the
batch beside it), and int8 decoding on it: every projection on the kernel, a shortlist's rows and the stacked
W^Q, W^K, W^V to the bit, a state dict round trip, and its weight bytes counted."""

import ctypes
import os
import shutil
import subprocess

import pytest
import torch
from helpers import tiny_model

from aiayn import native
from aiayn.decoding.inference import decoding_copy, weight_bytes
from aiayn.decoding.int8_rows import RowInt8Linear
from aiayn.decoding.search import SearchConfig, beam_search

pytestmark = pytest.mark.skipif(not native.int8_available(), reason=f"aiayn's int8 kernel: {native.status()}")


def _weights(n_out: int, n_in: int, bias: bool = True):
    w = torch.randn(n_out, n_in) * 0.05
    scale = w.abs().amax(1) / 127
    values = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return values, scale, torch.randn(n_out) if bias else None


def _exact(x: torch.Tensor, values, scale, bias) -> torch.Tensor:
    """What the kernel computes, in float64: each row to integers in [-63, 63] over its own range, exact int sums."""
    top = x.abs().amax(1, keepdim=True)
    q = torch.round(x.double() * 63 / top.double()).nan_to_num(0.0)
    out = (q @ values.double().T) * (top.double() / 63) * scale.double()
    return out + (0 if bias is None else bias.double())


@pytest.mark.parametrize("rows,n_in,n_out", [(1, 5, 3), (3, 8, 8), (4, 32, 16), (7, 193, 41), (261, 64, 24),
                                             (600, 257, 9), (5, 40, 100), (9, 12, 256), (6, 20, 59)])
def test_the_kernel_sums_exactly_at_every_block_and_tail(rows, n_in, n_out):
    """Rows in blocks of 4 and a tail, panels of 256 and a tail, inputs not a multiple of 4, outputs in blocks of 16
    with a single block of 8 after them and the last block part empty,
    a row of zeros (its output the bias), a row of large and of tiny numbers: each equals integer arithmetic to fp32
    rounding (7-bit rows: 8-bit ones would saturate AVX2's 16-bit pair sums and miss by far more)."""
    torch.manual_seed(rows)
    values, scale, bias = _weights(n_out, n_in)
    x = torch.randn(rows, n_in)
    x[0] = 0
    x[-1] *= 1e4
    if rows > 2:
        x[1] *= 1e-4
    weights = native.pack_int8(values, scale, bias)
    assert torch.equal(native.unpack_int8(weights), values)
    some = torch.tensor([n_out - 1, 0, n_out // 2, n_out - 1])  # rows read where they lie (a shortlist's)
    assert torch.equal(native.unpack_int8(weights, some), values[some])
    got, exact = native.int8_linear(x, weights), _exact(x, values, scale, bias)
    assert got.shape == (rows, n_out) and torch.equal(got[0], bias)
    assert torch.allclose(got.double(), exact, rtol=1e-5, atol=1e-5 * exact.abs().max().item())


def test_a_rows_products_are_its_own_whatever_the_batch():
    """The same bits for a row alone and beside others of any scale, and a row of small numbers keeps its precision
    beside a row 10^5 times larger (one range for the batch, torch's dynamic int8, loses it)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    projection = RowInt8Linear.quantized(linear.weight, linear.bias)
    small = torch.randn(1, 64) * 0.01
    batch = torch.cat([torch.randn(5, 64) * 1000, small, torch.randn(3, 64)])
    with torch.no_grad():
        alone, beside, fp32 = projection(small), projection(batch)[5:6], linear(small)
    assert torch.equal(alone, beside)
    assert (beside - fp32).norm() / (fp32 - linear.bias).norm() < 0.05
    assert projection(batch.view(3, 3, 64)).shape == (3, 3, 48)  # any leading dimensions


def test_bad_inputs_are_refused_clearly():
    projection = RowInt8Linear.quantized(torch.randn(4, 8), None)
    with pytest.raises(ValueError, match="fp32 CPU rows of 8 numbers, not torch.float32 \\(2, 7\\)"):
        projection(torch.randn(2, 7))
    with pytest.raises(ValueError, match="not torch.float64"):
        projection(torch.randn(2, 8, dtype=torch.float64))


@pytest.fixture
def aiayn_int8(monkeypatch):
    monkeypatch.setenv("AIAYN_INT8_ENGINE", "aiayn")


def test_int8_decoding_runs_every_projection_on_the_kernel(aiayn_int8):
    """Every projection of the int8 copy, the tied output projection and the decoder's stacked W^Q, W^K, W^V
    included, is a RowInt8Linear; a shortlist's rows give the full projection's columns to the bit; weight_bytes
    counts what they hold (a byte a weight, padded, and three numbers an output) besides the fp32 parameters."""
    torch.manual_seed(0)
    model = tiny_model(60)
    q = decoding_copy(model, "int8")
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert sum(isinstance(m, RowInt8Linear) for m in q.modules()) == len(linears)
    assert isinstance(q.output_projection.linear, RowInt8Linear)
    assert all(isinstance(f.projection, RowInt8Linear) for f in q.fused_qkv)
    hidden = torch.randn(3, 2, q.cfg.d_model)
    ids = torch.tensor([5, 0, 41, 7])
    with torch.no_grad():
        assert torch.equal(q.output_rows(ids)(hidden), q.output_logits(hidden)[..., ids])
    outside = [q.output_projection.linear, *(f.projection for f in q.fused_qkv)]  # held beside the modules
    held = [*q.parameters(), *q.buffers(), *(b for m in outside for b in m.buffers())]
    assert weight_bytes(q) == sum(t.numel() * t.element_size() for t in held)
    kernels = [m for m in q.modules() if isinstance(m, RowInt8Linear)] + outside
    assert sum(m.packed.numel() for m in kernels) >= sum(m.weight.numel() for m in linears)  # a byte a weight


def test_a_state_dict_round_trip_and_search_on_the_kernel(aiayn_int8):
    """An int8 copy given another's state dict searches as that one does (its buffers filled in place, the output
    projection and the stacked projections made again), and the search's words are the same at one batch as at
    another (each row quantized alone)."""
    torch.manual_seed(0)
    q, other = decoding_copy(tiny_model(40, eos_bias=3.0), "int8"), decoding_copy(tiny_model(40, seed=1), "int8")
    src = torch.randint(4, 40, (6, 7))
    config = SearchConfig(beam=3, max_len_b=8)
    with torch.no_grad():
        expected = beam_search(other, src, config)
        q.load_state_dict(other.state_dict())
        assert beam_search(q, src, config) == expected
        one_by_one = [beam_search(q, src[i:i + 1], config)[0] for i in range(len(src))]
    assert [h[0].tokens for h in one_by_one] == [h[0].tokens for h in expected]


def test_many_rows_split_over_torchs_threads_give_the_same_bits(monkeypatch):
    """From INT8_SPLIT_PRODUCTS multiply-adds, rows are split over torch's threads (the others on native's pool):
    each row's products the same bits as on one thread."""
    torch.manual_seed(0)
    projection = RowInt8Linear.quantized(torch.randn(40, 24), torch.randn(40))
    x = torch.randn(2, 101, 24)
    threads = torch.get_num_threads()
    monkeypatch.setattr(native, "INT8_SPLIT_PRODUCTS", 1000)
    submitted = []
    pool = native._pool()
    monkeypatch.setattr(native, "_pool", lambda: submitted.append(1) or pool)
    try:
        torch.set_num_threads(1)
        one = projection(x)
        assert not submitted
        torch.set_num_threads(3)
        assert torch.equal(projection(x), one) and len(submitted) == 2
    finally:
        torch.set_num_threads(threads)


@pytest.mark.skipif(native.int8_instructions() != "VNNI" or shutil.which(os.environ.get("CC") or "cc") is None,
                    reason="the kernel is built here without VNNI (the AVX2 build is the one in use), or no compiler")
def test_the_vnni_build_and_the_avx2_build_give_the_same_bits(tmp_path):
    """VNNI's one-instruction dot products (the build in use here) against the same source built for AVX2 alone
    (three instructions): every output the same bits, so int8 translations do not depend on
    the CPU's instruction set."""
    library = tmp_path / "avx2.so"
    subprocess.run([os.environ.get("CC") or "cc", "-O3", "-mavx2", "-mfma", "-mno-avx512f", "-shared", "-fPIC", "-o",
                    str(library), str(native.SOURCES[1])], check=True, capture_output=True, timeout=120)
    avx2 = ctypes.CDLL(str(library))
    p, n = ctypes.c_void_p, ctypes.c_long
    avx2.int8_linear.argtypes = [p, n, n, n, p, p, p, p, n, p]
    assert avx2.int8_kernel() == 1
    for rows, n_in, n_out in ((1, 5, 3), (7, 193, 41), (261, 64, 24), (5, 40, 100), (130, 256, 1000)):
        torch.manual_seed(rows)
        values, scale, bias = _weights(n_out, n_in)
        weights, x = native.pack_int8(values, scale, bias).with_pointers(), torch.randn(rows, n_in)
        out = torch.empty(rows, n_out)
        assert avx2.int8_linear(x.data_ptr(), rows, *weights.arguments, out.data_ptr()) == 0
        assert torch.equal(native.int8_linear(x, weights), out)
