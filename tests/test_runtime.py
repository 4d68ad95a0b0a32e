"""The runtime: devices that are not there are a clear error; "auto" dtype takes bf16 only where it is native."""

import pytest
import torch

from aiayn import runtime
from aiayn.errors import UsageError


def test_auto_dtype_follows_the_cpu_flags(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512f", "avx512_vnni"})  # bf16 emulated: 4x slower
    assert runtime.resolve_dtype("auto", cpu) == "fp32"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert runtime.resolve_dtype("auto", cpu) == "bf16"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"amx_bf16"})
    assert runtime.resolve_dtype("auto", cpu) == "bf16"
    assert runtime.resolve_dtype("fp32", cpu) == "fp32" and runtime.resolve_dtype("bf16", cpu) == "bf16"
    with pytest.raises(UsageError, match="dtype must be one of"):
        runtime.resolve_dtype("fp16", cpu)


def test_devices():
    assert runtime.resolve_device("cpu") == torch.device("cpu")
    assert runtime.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(UsageError, match="unknown device"):
        runtime.resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="sees no CUDA GPU"):
            runtime.resolve_device("cuda")


@pytest.mark.parametrize("idle_ticks, free", [(1000, 2), (500, 1), (0, 1), (760, 2)])
def test_free_cores_counts_idle_ones(monkeypatch, idle_ticks, free):
    # 1000 ticks pass on a 2-core machine; of them `idle_ticks` idle: busy cores = 2 * (1 - idle share).
    samples = iter([(0, 0), (1000, idle_ticks)])
    monkeypatch.setattr(runtime, "_cpu_ticks", lambda: next(samples))
    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    monkeypatch.setattr(runtime.time, "sleep", lambda _: None)
    assert runtime.free_cores() == free
