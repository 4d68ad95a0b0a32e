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
