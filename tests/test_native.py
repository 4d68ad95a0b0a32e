"""aiayn.native: a decoding step's attention compiled from C equals eq. 1 (model.scaled_dot_product_attention) to
rounding over the caches' own layouts, searches with it find the same words, it is built once per machine and CPU,
and without a compiler decoding runs torch's attention and `aiayn doctor` says why."""

import os
import subprocess
import sys

import pytest
import torch
from helpers import tiny_model

from aiayn import native
from aiayn.decoding.cache import by_sentence, keys_for_queries
from aiayn.decoding.inference import decoding_copy
from aiayn.model import scaled_dot_product_attention

needs_kernels = pytest.mark.skipif(not native.available(), reason=f"aiayn.native: {native.status()}")


def _reference(q, k, v, mask=None, is_causal=False, decoding=True):
    return scaled_dot_product_attention(q, k, v, mask, is_causal)[0]


@needs_kernels
@pytest.mark.parametrize("length", [1, 3, 17, 40])
def test_self_attention_over_a_time_major_cache_is_eq_1(length):
    """Rows fewer than the buffer's room (a reorder leaves room), d_k != d_v, scores spread over ~100 (exp's whole
    range): each row's heads equal eq. 1 over its own positions."""
    torch.manual_seed(length)
    rows, room, heads, d_k, d_v = 5, 7, 3, 8, 12
    keys, values = torch.randn(length + 4, room, heads, d_k), torch.randn(length + 4, room, heads, d_v)
    q = torch.randn(rows, 1, heads * d_k) * 6
    got = native.self_attention(q, keys, values, rows, length)  # (rows, 1, h*d_v)
    k, v = (x[:length, :rows].permute(1, 2, 0, 3) for x in (keys, values))  # (rows, h, t, d)
    want = _reference(q.view(rows, 1, heads, d_k).transpose(1, 2), k, v).transpose(1, 2).reshape(rows, 1, -1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert not torch.equal(got, native.self_attention(q, keys, values, rows, length + 1))  # the length is read


@needs_kernels
@pytest.mark.parametrize("group", [1, 3])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("length,d_k,layout", [(9, 8, "padded"), (3, 7, "padded"), (40, 12, "padded"),
                                               (17, 8, "transposed"), (16, 5, "transposed")])
def test_cross_attention_of_each_sentences_rows_is_eq_1(group, masked, length, d_k, layout):
    """g rows per sentence against that sentence's keys, held transposed as keys_for_queries holds them (padded to
    whole vectors of 8 positions) or without padding (K^T contiguous); lengths and head sizes that fill the kernel's
    blocks of 16 and 8 positions and of 4 numbers of d_k, or not; padded positions get no weight."""
    torch.manual_seed(group + length)
    sentences, heads, d_v = 4, 2, 12
    keys, values = torch.randn(sentences, heads, length, d_k), torch.randn(sentences, heads, length, d_v)
    held = keys_for_queries(keys, group) if layout == "padded" else keys.transpose(-2, -1).contiguous().transpose(
        -2, -1)
    assert native.reads_keys(held) and torch.equal(held, keys)
    mask = None
    if masked:
        mask = torch.ones(sentences, 1, 1, length, dtype=torch.bool)
        mask[1, ..., length // 2:] = False
        mask[3, ..., 1:] = False  # one position left
    q = torch.randn(sentences * group, 1, heads * d_k) * 3
    got = native.cross_attention(q, held, values, mask)
    want = by_sentence(_reference, q.view(-1, 1, heads, d_k).transpose(1, 2), keys, values, mask, False, True)
    torch.testing.assert_close(got, want.transpose(1, 2).reshape(sentences * group, 1, -1), rtol=1e-5, atol=1e-6)
    if masked:  # what a padded position holds changes nothing
        values[3, :, 1:] = 1e3
        torch.testing.assert_close(native.cross_attention(q, held, values, mask), got)


def test_inputs_it_cannot_take_are_refused():
    keys = torch.randn(4, 2, 3, 8)
    with pytest.raises(ValueError, match="fp32 CPU tensors"):
        native.self_attention(torch.randn(2, 1, 24).bfloat16(), keys, keys, 2, 3)
    with pytest.raises(ValueError, match="contiguous"):
        native.self_attention(torch.randn(2, 1, 24), keys.transpose(0, 1), keys, 2, 3)
    cache = torch.randn(5, 3, 2, 8)  # (T, room, h, d): what the C code would read past is refused
    with pytest.raises(ValueError, match="do not fit"):
        native.self_attention(torch.randn(4, 1, 16), cache, cache, 4, 3)  # more rows than the room
    with pytest.raises(ValueError, match="do not fit"):
        native.self_attention(torch.randn(2, 1, 16), cache, cache, 2, 6)  # more positions than held
    with pytest.raises(ValueError, match="held transposed"):
        native.cross_attention(torch.randn(4, 1, 16), keys, keys, None)  # K as computed, not K^T held
    held = keys.transpose(-2, -1).contiguous().transpose(-2, -1)
    with pytest.raises(ValueError, match="group evenly"):
        native.cross_attention(torch.randn(5, 1, 16), held, keys, None)  # 5 rows over 4 sentences
    with pytest.raises(ValueError, match="each contiguous"):
        native.row_argmax(torch.randn(8, 3).t())  # columns 8 numbers apart
    with pytest.raises(ValueError, match="fp32 CPU rows"):
        native.row_argmax(torch.randn(3, 8).double())


@needs_kernels
@pytest.mark.parametrize("columns", [1, 5, 8, 13, 4000])  # less than, one and a half, many vectors of 8
def test_row_argmax_is_torchs_argmax(columns):
    """The first of equal maxima, a row's first NaN, a row of -inf, and rows read with a stride (a slice of wider
    rows): the indices torch.argmax gives."""
    torch.manual_seed(0)
    wide = torch.randn(7, columns + 3)
    x = wide[:, 1: columns + 1]  # (7, columns), rows columns + 3 numbers apart
    x[1] = 2.0  # every column equal: the first
    x[2] = float("-inf")  # every token banned: the first
    if columns > 1:
        x[3, -1] = x[3, 0] = 100.0  # equal maxima at both ends
        x[4, columns // 2:] = float("nan")  # NaN after the maximum still wins, as torch's
        x[5, columns - 1] = 50.0  # the maximum in the last, possibly partial, vector
    assert torch.equal(native.row_argmax(x), x.argmax(1))
    assert torch.equal(native.row_argmax(x[:0]), x[:0].argmax(1))  # no rows


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_move_rows_is_torchs_indexed_copy(dtype):
    """Rows copied onto rows, a source among the rows written (read before it is overwritten), as index_copy_ of
    index_select; an index outside the rows refused with nothing written."""
    torch.manual_seed(0)
    x = torch.randn(12, 3, 5).gt(0) if dtype is torch.bool else torch.randn(12, 3, 5)
    into, source = torch.tensor([2, 7, 3, 11]), torch.tensor([7, 2, 2, 0])  # rows 2 and 7 swap
    want = x.clone().index_copy_(0, into, x.index_select(0, source))
    native.move_rows(x, into, source)
    assert torch.equal(x, want)
    native.move_rows(x, into[:0], source[:0])  # nothing to move
    assert torch.equal(x, want)
    for bad in (torch.tensor([12]), torch.tensor([-1])):
        with pytest.raises(ValueError, match="outside the 12 rows"):
            native.move_rows(x, bad, torch.tensor([0]))
        with pytest.raises(ValueError, match="outside the 12 rows"):
            native.move_rows(x, torch.tensor([0]), bad)
        assert torch.equal(x, want)
    with pytest.raises(ValueError, match="contiguous CPU tensor"):
        native.move_rows(x.transpose(0, 1), torch.tensor([0]), torch.tensor([1]))
    with pytest.raises(ValueError, match="int64"):
        native.move_rows(x, torch.tensor([0], dtype=torch.int32), torch.tensor([1]))


@needs_kernels
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_searches_find_the_same_words_with_the_kernels(precision, monkeypatch):
    """Greedy and beam search (sentences leaving the batch) take the kernels at every written-out step, self- and
    cross-attention (and greedy search's argmax, beam search's cache reorders), and find what torch finds, scores to
    rounding."""
    from aiayn.decoding.search import SearchConfig, beam_search, greedy_search

    model = tiny_model(40, eos_bias=3.0)
    q = decoding_copy(model, precision, prepack=False)
    src = torch.randint(4, 40, (6, 9))
    src[2, 5:] = 0  # padding: the cross-attention mask
    calls = {"self_attention": 0, "cross_attention": 0, "row_argmax": 0, "move_rows": 0}
    for name in calls:
        kernel = getattr(native, name)
        monkeypatch.setattr(native, name,
                            lambda *a, name=name, kernel=kernel: calls.__setitem__(name, calls[name] + 1) or kernel(*a))
    searches = [(greedy_search, SearchConfig(beam=1, max_len_b=8)), (beam_search, SearchConfig(beam=4, max_len_b=8))]
    with torch.no_grad():
        kernels = [search(q, src, config) for search, config in searches]
        assert calls["self_attention"] > 10 and calls["cross_attention"] == calls["self_attention"]
        assert calls["row_argmax"] >= 8  # greedy search's pick, a step each
        assert calls["move_rows"] > 0  # beam search's reorders of the self-attention cache
        before = native.set_enabled(False)
        try:
            matmuls = [search(q, src, config) for search, config in searches]
        finally:
            native.set_enabled(before)
    for a, b in zip(kernels, matmuls):
        assert [[h.tokens for h in s] for s in a] == [[h.tokens for h in s] for s in b]
        for x, y in zip(a, b):
            assert x[0].score == pytest.approx(y[0].score, rel=1e-5, abs=1e-5)


def test_built_once_per_machine_and_without_a_compiler_torch_runs_it(tmp_path, monkeypatch):
    """A cache directory of its own: compiled on first use, the same file found after (no compiler asked again);
    no compiler, or one that fails: unavailable, status says why, beam search's cross-attention keys are held as
    torch's matmul wants them (K^T), and a search still runs."""
    from aiayn.decoding.search import SearchConfig, greedy_search

    monkeypatch.setenv("AIAYN_CACHE_DIR", str(tmp_path))
    built = native._build()
    assert built.is_file() and built.is_relative_to(tmp_path / "native")
    monkeypatch.setattr(native.subprocess, "run", lambda *a, **k: pytest.fail("compiled again"))
    assert native._build() == built
    monkeypatch.undo()
    model = decoding_copy(tiny_model(40, eos_bias=3.0), "fp32", prepack=False)
    for compiler, why in (("/no/such/cc", "no C compiler: '/no/such/cc' not found"), ("false", "could not compile")):
        monkeypatch.setenv("AIAYN_CACHE_DIR", str(tmp_path / compiler.strip("/").replace("/", "-")))
        monkeypatch.setenv("CC", compiler)
        monkeypatch.setattr(native, "_state", {"enabled": True, "library": None, "why": None})
        assert not native.available()
        assert why in native.status() and native.status().startswith("torch's matmuls")
        assert not keys_for_queries(torch.randn(2, 4, 9, 8), 4).is_contiguous()  # K^T, read transposed
        with torch.no_grad():
            assert greedy_search(model, torch.randint(4, 40, (3, 6)), SearchConfig(beam=1, max_len_b=4))


def test_aiayn_native_other_than_0_or_1_is_one_clear_error(monkeypatch):
    from aiayn.errors import UsageError

    monkeypatch.setattr(native, "_state", {"enabled": None, "library": None, "why": None})
    monkeypatch.setenv("AIAYN_NATIVE", "off")
    with pytest.raises(UsageError, match="AIAYN_NATIVE must be 0 .* or 1 .*, not 'off'"):
        native.available()
    assert native.status().startswith("AIAYN_NATIVE must be 0")  # doctor reports it instead
    monkeypatch.setenv("AIAYN_NATIVE", " 1 ")
    assert native.set_enabled(True) is True


def test_aiayn_native_0_starts_it_off_and_doctor_says_so():
    env = {**os.environ, "AIAYN_NATIVE": "0"}
    code = ("from aiayn import native, doctor; print(native.available()); "
            "print(doctor.report(bench=False)['decoding_attention'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["False", "torch's matmuls (aiayn's kernels off: AIAYN_NATIVE=0 or set_enabled(False))"]
