"""Eq. 1 for a decoding step on the CPU, compiled: one query per decoder row and head over the cached keys and values
(aiayn/native.c). torch runs each row's one-query products as separate matrix-vector calls, a generic kernel on some
CPUs; these two functions run a step's attention in one call each. Two helpers of a search beside them: greedy
search's argmax in one pass a row, and a reorder's copies of cache rows as whole rows (torch's ops for both read or
move one number at a time on a CPU). Equal to model.scaled_dot_product_attention to
rounding (tests/test_native.py); what they are worth: docs/speed-design.md. And int8 decoding's GEMM on CPUs with
AVX2 (native_int8.c, on VNNI's dot products where the CPU has them: each row of the input over its own range;
tests/test_int8_rows.py).

    self_attention(q, keys, values, rows, length)   over a time-major self-attention cache (aiayn.decoding.cache)
    cross_attention(q, keys, values, mask)          over the keys/values of each row's source sentence
    reads_keys(keys)                                whether cross_attention reads keys in this layout (K^T held)
    row_argmax(x)                                   torch.argmax(x, 1) of a step's (N, V) logits, in one pass a row
    move_rows(x, into, source)                      x[into] = x[source] in place, as memcpy: a cache's reorder
    int8_linear(x, weights)                         x W^T + b, int8, each row of x over its own range (native_int8.c;
                                                    Int8Weights: W packed once); int8_available() where it is built,
                                                    int8_instructions() with what
    available()                                     whether the kernels are built and in use; status() says why not
    set_enabled(on)                                 use them or not (an A/B's other side); AIAYN_NATIVE=0 starts off

The library (native.c and native_int8.c) is compiled at first use by the system's C compiler (CC, else cc) with
-march=native, into $AIAYN_CACHE_DIR (default ~/.cache/aiayn)/native/<key>/, the key naming the sources, the compiler
command and the CPU's features, so a machine builds it once and a changed source or another CPU builds anew. Without
a compiler, or where it fails, decoding runs torch's attention and int8 torch's fbgemm, and `aiayn doctor` says why.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from aiayn.errors import UsageError

SOURCE = Path(__file__).with_name("native.c")
SOURCES = (SOURCE, SOURCE.with_name("native_int8.c"))
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-shared", "-fPIC")

_lock = threading.Lock()
_state: dict = {"enabled": None, "library": None, "why": None}  # enabled: None until AIAYN_NATIVE is read


def available() -> bool:
    """Whether a decoding step's attention runs here: enabled, and the library built (built now if not yet). A
    UsageError if AIAYN_NATIVE is neither 0 nor 1."""
    return _enabled() and _library() is not None


def status() -> str:
    """One line: where the library is, or why attention runs torch's kernels instead."""
    try:
        enabled = _enabled()
    except UsageError as e:
        return str(e)
    if not enabled:
        return "torch's matmuls (aiayn's kernels off: AIAYN_NATIVE=0 or set_enabled(False))"
    library = _library()
    if library is None:
        return f"torch's matmuls (aiayn's kernels off: {_state['why']})"
    return f"aiayn's kernels, compiled here: {library._name}"


def set_enabled(on: bool) -> bool:
    """Use the kernels (where built) or torch's attention; returns the previous choice."""
    before, _state["enabled"] = _enabled(), bool(on)
    return before


def _enabled() -> bool:
    if _state["enabled"] is None:
        asked = os.environ.get("AIAYN_NATIVE", "").strip()
        if asked not in ("", "0", "1"):
            raise UsageError(f"AIAYN_NATIVE must be 0 (torch's attention) or 1 (aiayn's compiled kernels), "
                             f"not {asked!r}")
        _state["enabled"] = asked != "0"
    return _state["enabled"]


def self_attention(q: Tensor, keys: Tensor, values: Tensor, rows: int, length: int) -> Tensor:
    """Eq. 1 for one query per row over a time-major cache: q (rows, 1, h*d_k) fp32; keys (T, room, h,
    d_k) and values (T, room, h, d_v), contiguous buffers whose first `length` positions and first `rows` rows are
    held (room >= rows) -> heads (rows, 1, h*d_v), Concat(head_1..head_h) for each row."""
    q = _checked_inputs(q, keys, values)
    (positions, room, heads, d_k), (value_positions, value_room, _, d_v) = keys.shape, values.shape
    if not (q.numel() == rows * heads * d_k and rows <= min(room, value_room)
            and 0 < length <= min(positions, value_positions)):  # the C code reads what these shapes promise
        raise ValueError(f"{rows} rows of queries {tuple(q.shape)} over {length} positions do not fit caches "
                         f"{tuple(keys.shape)}, {tuple(values.shape)}")
    out = q.new_empty(rows, 1, heads * d_v)
    status = _library().self_attention(q.data_ptr(), keys.data_ptr(), keys.stride(0), values.data_ptr(),
                                       values.stride(0), out.data_ptr(), rows * heads, length, d_k, d_v, d_k ** 0.5)
    return _checked(status, out)


def cross_attention(q: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None) -> Tensor:
    """Eq. 1 for one query per row over its source sentence's keys: q (B*g, 1, h*d_k) fp32, g rows per
    sentence, sentence-major; keys (B, h, S, d_k) held transposed (`reads_keys`: keys.transpose(-2, -1) a contiguous
    (B, h, d_k, S') buffer's first S positions, S' >= S, as aiayn.decoding.cache.keys_for_queries holds them) and
    values (B, h, S, d_v) contiguous; mask broadcastable to (B, 1, 1, S), True where a row may attend, or None ->
    heads (B*g, 1, h*d_v)."""
    if not reads_keys(keys):
        raise ValueError(f"aiayn.native's cross-attention reads keys held transposed (keys_for_queries), not keys "
                         f"of strides {keys.stride()}")
    q = _checked_inputs(q, values)
    sentences, heads, length, d_k = keys.shape
    d_v, rows, stride = values.size(3), q.size(0), keys.stride(3)
    if rows % sentences or q.numel() != rows * heads * d_k or values.shape[:3] != keys.shape[:3]:
        raise ValueError(f"queries {tuple(q.shape)} do not group evenly over keys {tuple(keys.shape)} and values "
                         f"{tuple(values.shape)}")
    if mask is not None:
        mask = mask.reshape(-1, length).expand(sentences, length).contiguous()
    out = q.new_empty(rows, 1, heads * d_v)
    status = _library().cross_attention(q.data_ptr(), keys.data_ptr(), stride, values.data_ptr(),
                                        None if mask is None else mask.data_ptr(), out.data_ptr(), sentences,
                                        rows // sentences, heads, length, d_k, d_v, d_k ** 0.5)
    return _checked(status, out)


def row_argmax(x: Tensor) -> Tensor:
    """x.argmax(1) for x (N, V) fp32 on the CPU with its columns one after the other (any row stride): the same
    indices, the first of equal maxima, a row's first NaN where it holds one (a greedy search's pick: torch's argmax
    reduces a row one number at a time)."""
    if not (x.dtype is torch.float32 and x.is_cpu and x.dim() == 2 and x.size(1) > 0
            and (x.stride(1) == 1 or x.size(1) == 1)):
        raise ValueError(f"aiayn.native's row_argmax takes (rows, columns) fp32 CPU rows, each contiguous, not "
                         f"{x.dtype} {tuple(x.shape)} of strides {x.stride()}")
    out = torch.empty(x.size(0), dtype=torch.long)
    _library().row_argmax(x.data_ptr(), x.size(0), x.size(1), x.stride(0), out.data_ptr())
    return out


def move_rows(x: Tensor, into: Tensor, source: Tensor) -> None:
    """x.index_copy_(0, into, x.index_select(0, source)): rows `source` of x copied onto rows `into`, in place, every
    source read before any row is written; x a contiguous CPU tensor of any dtype, into and source (E,) int64. A
    ValueError, x unchanged, where an index lies outside x's rows."""
    if not (x.is_cpu and x.is_contiguous() and x.dim() > 0 and into.dtype is source.dtype is torch.int64
            and into.is_cpu and source.is_cpu and into.dim() == source.dim() == 1 and into.numel() == source.numel()):
        raise ValueError(f"aiayn.native's move_rows takes a contiguous CPU tensor and two (E,) int64 CPU indices, "
                         f"not {tuple(x.shape)} ({'' if x.is_contiguous() else 'not '}contiguous), "
                         f"{into.dtype} {tuple(into.shape)}, {source.dtype} {tuple(source.shape)}")
    into, source = into.contiguous(), source.contiguous()
    status = _library().move_rows(x.data_ptr(), x.size(0), x[:1].numel() * x.element_size(), into.data_ptr(),
                                  source.data_ptr(), into.numel())
    if status == 2:
        raise ValueError(f"aiayn.native's move_rows: an index outside the {x.size(0)} rows")
    if status != 0:
        raise MemoryError("aiayn.native's move_rows could not allocate its copy of the rows")


class Int8Weights(NamedTuple):
    """A projection's weights as int8_linear reads them: W (N, K) quantized per output channel and packed (see
    native_int8.c; pack_int8 makes them)."""

    packed: Tensor  # (ceil(N/8), ceil(K/4), 8, 4) int8
    colsum: Tensor  # (N'): int32, each output channel's int8 weights summed; N' = N rounded up to 8, zeros after N
    scale: Tensor  # (N'): fp32, each channel's scale (max |W_n| / 127)
    bias: Tensor  # (N'): fp32, b (zeros where the projection has none)
    n_in: int
    n_out: int
    arguments: tuple[int, ...] = ()  # what the C call takes after the rows: K, K rounded up to 4, the four tensors'
    #                                   addresses, N (with_pointers)

    def with_pointers(self) -> Int8Weights:
        """These weights, their addresses taken once (a step calls int8_linear tens of times)."""
        addresses = (t.data_ptr() for t in (self.packed, self.colsum, self.scale, self.bias))
        return self._replace(arguments=(self.n_in, self.packed.size(1) * 4, *addresses, self.n_out))


def pack_int8(values: Tensor, scale: Tensor, bias: Tensor | None) -> Int8Weights:
    """Int8Weights of W = values * scale[:, None]: values (N, K) int8 in [-127, 127], scale (N,), bias (N,) or None."""
    n, k = values.shape
    n8, k4 = -(-n // 8) * 8, -(-k // 4) * 4
    full = values.new_zeros(n8, k4)
    full[:n, :k] = values
    packed = full.view(n8 // 8, 8, k4 // 4, 4).transpose(1, 2).contiguous()

    def padded(t: Tensor | None, dtype: torch.dtype) -> Tensor:
        out = torch.zeros(n8, dtype=dtype)
        if t is not None:
            out[:n] = t
        return out
    return Int8Weights(packed, padded(values.sum(1, dtype=torch.int32), torch.int32), padded(scale, torch.float32),
                       padded(bias, torch.float32), k, n).with_pointers()


def unpack_int8(weights: Int8Weights, ids: Tensor | None = None) -> Tensor:
    """The (N, K) int8 values pack_int8 packed; ids (N',): those rows alone, (N', K), read where they lie."""
    packed = weights.packed
    if ids is None:
        return packed.transpose(1, 2).reshape(packed.size(0) * 8, -1)[:weights.n_out, :weights.n_in]
    return packed[ids // 8, :, ids % 8].reshape(ids.numel(), -1)[:, :weights.n_in]


def int8_available() -> bool:
    """Whether int8_linear runs here: the kernels available() and compiled for a CPU with AVX2."""
    return int8_instructions() is not None


def int8_instructions() -> str | None:
    """What int8_linear sums its byte products with here: "VNNI" (one dot-product instruction a 4 products), "AVX2"
    (three), None where it does not run; the sums, and so the outputs, are the same."""
    return {1: "AVX2", 2: "VNNI"}.get(_library().int8_kernel()) if available() else None


def int8_linear(x: Tensor, weights: Int8Weights) -> Tensor:
    """x W^T + b for x (..., K) fp32 on the CPU: each row of x quantized to int8 over its own range, W's int8 values
    (native_int8.c); a row's products depend on that row alone."""
    n_in = weights.n_in
    if not (x.dtype is torch.float32 and x.is_cpu and x.size(-1) == n_in):
        raise ValueError(f"aiayn.native's int8_linear takes fp32 CPU rows of {n_in} numbers, not {x.dtype} "
                         f"{tuple(x.shape)}")
    rows = x if x.is_contiguous() else x.contiguous()  # (..., K): its rows one after the other
    n_out, count = weights.n_out, rows.numel() // n_in
    out = x.new_empty(*x.shape[:-1], n_out)
    if count < 8 or count * n_in * n_out < INT8_SPLIT_PRODUCTS or torch.get_num_threads() == 1:  # a step's few rows
        status = _library().int8_linear(rows.data_ptr(), count, *weights.arguments, out.data_ptr())
    else:  # an encoder's thousands of rows on torch's threads: the rows split, the other parts on _pool's threads
        library, threads = _library(), torch.get_num_threads()

        def run(first: int, last: int) -> int:  # rows [first, last)
            return library.int8_linear(rows.data_ptr() + first * n_in * 4, last - first, *weights.arguments,
                                       out.data_ptr() + first * n_out * 4)

        bounds = [count * i // threads for i in range(threads + 1)]
        others = [_pool().submit(run, bounds[i], bounds[i + 1]) for i in range(1, threads)]
        status = min([run(bounds[0], bounds[1]), *(f.result() for f in others)])
    if status == -2:
        raise RuntimeError("aiayn.native's int8_linear was compiled without AVX2 here (see int8_available())")
    if status != 0:
        raise MemoryError("aiayn.native's int8_linear could not allocate its buffer of quantized rows")
    return out


INT8_SPLIT_PRODUCTS = 1 << 21  # int8_linear splits its rows over torch's threads from ~2 million multiply-adds


@functools.cache
def _pool() -> ThreadPoolExecutor:
    """Threads for int8_linear's other parts (ctypes lets go of the GIL during each call)."""
    return ThreadPoolExecutor(max(1, (os.cpu_count() or 2) - 1), thread_name_prefix="aiayn-int8")


def reads_keys(keys: Tensor) -> bool:
    """Whether cross_attention reads these keys (B, h, S, d_k): fp32 on the CPU, held transposed, each head's K^T
    (d_k, S') rows of S' >= S numbers, one after the other."""
    if keys.dtype is not torch.float32 or not keys.is_cpu or keys.dim() != 4:
        return False
    sentences, heads, length, d_k = keys.shape
    stride = keys.stride(3)
    return (keys.stride(2) == 1 and stride >= length and keys.stride(1) == d_k * stride
            and (sentences == 1 or keys.stride(0) == heads * d_k * stride))


def _checked_inputs(q: Tensor, *held: Tensor) -> Tensor:
    """q, contiguous; what the caches hold (`held`: keys and values, or the cross-attention's values, its keys
    checked by reads_keys) must be contiguous already."""
    if not (q.dtype is torch.float32 and q.is_cpu
            and all(t.dtype is torch.float32 and t.is_cpu and t.is_contiguous() for t in held)):
        raise ValueError("aiayn.native's attention takes fp32 CPU tensors, its keys and values contiguous")
    return q.contiguous()


def _checked(status: int, out: Tensor) -> Tensor:
    if status != 0:
        raise MemoryError("aiayn.native's attention could not allocate its scores")
    return out


def _library():
    """The loaded library, built first if this machine has none yet; None (and _state['why']) if it cannot be."""
    if _state["library"] is None and _state["why"] is None:
        with _lock:
            if _state["library"] is None and _state["why"] is None:
                try:
                    _state["library"] = _typed(ctypes.CDLL(str(_build())))
                except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                    _state["why"] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return _state["library"]


def _build() -> Path:
    """The compiled library's path: the cached one, else compiled now (into a temporary name, then renamed, so that
    processes building at once each get a whole file)."""
    compiler = os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C compiler: {compiler!r} not found (install gcc, or set CC)")
    source = b"\0".join(path.read_bytes() for path in SOURCES)
    key = hashlib.sha256(b"\0".join([source, compiler.encode(), " ".join(FLAGS).encode(),
                                     platform.machine().encode(), _cpu_features()])).hexdigest()[:16]
    root = Path(os.environ.get("AIAYN_CACHE_DIR") or Path.home() / ".cache" / "aiayn")
    target = root / "native" / key / "libaiayn_native.so"
    if target.is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RuntimeError(f"cannot write the kernel cache {target.parent}: {e.strerror}") from e
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so")
    os.close(fd)
    try:
        for flags in (FLAGS, tuple(f for f in FLAGS if f != "-march=native")):  # some compilers know no -march
            done = subprocess.run([compiler, *flags, "-o", tmp, *map(str, SOURCES), "-lm"], capture_output=True,
                                  text=True, timeout=120)
            if done.returncode == 0:
                os.replace(tmp, target)
                return target
        names = " and ".join(p.name for p in SOURCES)
        raise RuntimeError(f"{compiler} could not compile {names}: {(done.stderr or done.stdout).strip()}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _cpu_features() -> bytes:
    """The CPU's feature flags (Linux: /proc/cpuinfo's first flags line), so that -march=native code built on one CPU
    is not loaded on another sharing the cache; elsewhere the processor's name."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            return next((line for line in f if line.startswith((b"flags", b"Features"))), b"")
    except OSError:
        return platform.processor().encode()


def _typed(library):
    i, f, p, n = ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_long
    library.self_attention.argtypes = [p, p, n, p, n, p, i, i, i, i, f]
    library.cross_attention.argtypes = [p, p, i, p, p, p, i, i, i, i, i, i, f]
    library.self_attention.restype = library.cross_attention.restype = i
    library.row_argmax.argtypes = [p, n, n, n, p]
    library.row_argmax.restype = None
    library.move_rows.argtypes = [p, n, n, p, p, n]
    library.move_rows.restype = i
    library.int8_kernel.argtypes, library.int8_kernel.restype = [], i
    library.int8_linear.argtypes = [p, n, n, n, p, p, p, p, n, p]
    library.int8_linear.restype = i
    return library
