"""The runtime: devices that are not there are a clear error; "auto" dtype takes bf16 only where it is native."""

import os
import re
import subprocess
import sys

import pytest
import torch
from helpers import tiny_model
from torch import nn

from aiayn import runtime
from aiayn.decoding import inference
from aiayn.errors import UsageError


def test_auto_dtype_follows_the_cpu_flags_and_a_measured_gain(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(runtime, "_bf16_checked", True)  # no warning here (tested below)
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: 0.5)  # bf16 measured at 2x fp32's rate
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512f", "avx512_vnni"})  # bf16 emulated: 4x slower
    assert runtime.resolve_dtype("auto", cpu) == "fp32"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert runtime.resolve_dtype("auto", cpu) == "bf16"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"amx_bf16"})
    assert runtime.resolve_dtype("auto", cpu) == "bf16"
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: 1 / 1.1)  # instructions, but only 1.1x: not worth it
    assert runtime.resolve_dtype("auto", cpu) == "fp32"
    assert runtime.resolve_dtype("fp32", cpu) == "fp32" and runtime.resolve_dtype("bf16", cpu) == "bf16"
    with pytest.raises(UsageError, match="dtype must be one of"):
        runtime.resolve_dtype("fp8", cpu)


@pytest.mark.parametrize("device_type, bf16, want", [("cuda", True, "bf16"), ("cuda", False, "fp16"),
                                                      ("cpu", True, "bf16"), ("cpu", False, "fp32"),
                                                      ("mps", False, "fp32")])
def test_auto_dtype_takes_fp16_on_a_gpu_without_bf16_only(device_type, bf16, want):
    assert runtime.auto_dtype(device_type, bf16) == want


def test_fp16_autocasts_matmuls_and_scales_the_loss_while_bf16_and_fp32_do_not():
    cpu = torch.device("cpu")
    a = torch.randn(4, 4)
    for dtype, want, scaled in (("fp16", torch.float16, True), ("bf16", torch.bfloat16, False),
                                ("fp32", torch.float32, False)):
        rt = runtime.Runtime(cpu, dtype=dtype)
        with rt.autocast():
            assert (a @ a).dtype == want
        assert rt.grad_scaler().is_enabled() is scaled


def test_auto_picking_fp16_says_so_in_the_start_line(copy_data, tmp_path, monkeypatch, capsys):
    from aiayn.config import ModelConfig
    from aiayn.training.train import TrainConfig, train

    monkeypatch.setattr(runtime, "auto_dtype", lambda device_type, bf16: "fp16")  # as on a T4 or V100
    tc = TrainConfig(max_steps=1, max_tokens=400, save_every_minutes=0, threads=1, dtype="auto", device="cpu")
    train(copy_data, tmp_path / "run", ModelConfig.preset("tiny"), tc, progress=False)
    assert "; device cpu, fp16 (--dtype auto: no native bf16 on this GPU), 1 process(es)" in capsys.readouterr().out
    from aiayn.rundir import RunDir

    assert RunDir(tmp_path / "run").config["train"]["dtype"] == "fp16"  # a resumed run keeps it


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


@pytest.fixture
def emulated_bf16(monkeypatch):
    """A CPU without native bf16, where a bf16 matmul takes 3.9x fp32's time (as emulated bf16 does:
    docs/speed.md#cpus-where-bf16-does-not-pay)."""
    monkeypatch.setattr(runtime, "native_bf16", lambda device: False)
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: 3.9)
    monkeypatch.setattr(runtime, "_bf16_checked", False)


def _warnings(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]


def test_bf16_where_it_is_emulated_warns_once_and_still_runs(emulated_bf16, capsys):
    cpu = torch.device("cpu")
    assert runtime.resolve_dtype("fp32", cpu) == "fp32" and runtime.resolve_dtype("auto", cpu) == "fp32"
    assert not _warnings(capsys)
    with runtime.setup_runtime("cpu", "bf16", threads=1) as rt:
        assert rt.dtype == "bf16"  # the user asked: it runs
    assert runtime.resolve_dtype("bf16", cpu) == "bf16"  # the quickstart resolves again, then decodes in bf16
    inference.decoding_copy(tiny_model(20), "bf16")
    assert _warnings(capsys) == ["warning: bf16 matmuls are emulated on this CPU (no AVX512-BF16 or AMX-BF16): 3.9x "
                                 "slower than fp32 here (a 512^3 matmul); --dtype auto picks fp32 here"]


def test_bf16_decoding_weights_where_emulated_warn_once(emulated_bf16, capsys):
    model = tiny_model(20)
    inference.decoding_copy(model, "fp32")
    inference.decoding_copy(model, "int8")
    assert not _warnings(capsys)
    inference.decoding_copy(model, "bf16")
    inference.decoding_copy(model, "bf16")
    assert _warnings(capsys) == ["warning: bf16 matmuls are emulated on this CPU (no AVX512-BF16 or AMX-BF16): 3.9x "
                                 "slower than fp32 here (a 512^3 matmul); decode with --precision fp32 (or int8) here"]


@pytest.mark.parametrize("slowdown, rate", [(2.0, "2.0x slower than fp32"),
                                            (1.0, "at 1.00x fp32's speed, short of the 1.2x that pays")])
def test_bf16_warning_where_native_but_not_faster(monkeypatch, capsys, slowdown, rate):
    monkeypatch.setattr(runtime, "_bf16_checked", False)
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512_bf16"})
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: slowdown)
    assert runtime.resolve_dtype("auto", torch.device("cpu")) == "fp32"
    assert runtime.resolve_dtype("bf16", torch.device("cpu")) == "bf16"
    assert _warnings(capsys) == [f"warning: this CPU has bf16 instructions, but its bf16 matmuls measure {rate} here "
                                 "(a 512^3 matmul); --dtype auto picks fp32 here"]


def test_no_bf16_warning_where_bf16_is_native_or_measured_fast(monkeypatch, capsys):
    monkeypatch.setattr(runtime, "_bf16_checked", False)
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512_bf16"})
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: 0.5)  # bf16 at twice fp32's rate
    assert runtime.resolve_dtype("auto", torch.device("cpu")) == "bf16"
    runtime.resolve_dtype("bf16", torch.device("cpu"))
    monkeypatch.setattr(runtime, "cpu_flags", set)  # no flags (not Linux), but bf16 measured as fast as fp32
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: 1.0)
    runtime.resolve_dtype("bf16", torch.device("cpu"))
    assert not _warnings(capsys)


def test_bf16_instructions_that_measure_slow_leave_auto_at_fp32_and_warn(monkeypatch, capsys):
    monkeypatch.setattr(runtime, "_bf16_checked", False)
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512_bf16"})
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: 1.9)  # measured on a Xeon without AMX
    cpu = torch.device("cpu")
    assert runtime.resolve_dtype("auto", cpu) == "fp32" and not _warnings(capsys)
    assert runtime.resolve_dtype("bf16", cpu) == "bf16"
    assert _warnings(capsys) == ["warning: this CPU has bf16 instructions, but its bf16 matmuls measure 1.9x slower "
                                 "than fp32 here (a 512^3 matmul); --dtype auto picks fp32 here"]


@pytest.mark.parametrize("device, env, enabled", [("cuda", None, False), ("cuda", "1", True), ("cpu", None, True)])
def test_cudnn_attention_is_left_out_on_gpus_unless_asked(monkeypatch, device, env, enabled):
    """cuDNN's attention builds a plan for every new batch shape: aiayn takes it out of torch's choice on a GPU
    (AIAYN_CUDNN_ATTENTION=1 keeps it); the CPU has no cuDNN, and nothing changes there."""
    from aiayn.runtime import attention_without_shape_plans

    was = torch.backends.cuda.cudnn_sdp_enabled()
    monkeypatch.delenv("AIAYN_CUDNN_ATTENTION", raising=False)
    if env is not None:
        monkeypatch.setenv("AIAYN_CUDNN_ATTENTION", env)
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        attention_without_shape_plans(torch.device(device))
        assert torch.backends.cuda.cudnn_sdp_enabled() is enabled
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)


def test_process_settings_are_applied_once(monkeypatch):
    """configure_process sets what is not so already and records it: called again with the same arguments it changes
    nothing; a setting changed behind its back is set again; a CPU leaves the GPU settings alone."""
    from aiayn import fast

    monkeypatch.setattr(runtime, "APPLIED", {})
    for name in fast.KERNEL_CACHES:
        monkeypatch.setenv(name, "")  # so that monkeypatch restores the variable as it was
        monkeypatch.delenv(name)
    mallopt = []
    monkeypatch.setattr(fast, "keep_freed_memory", lambda: mallopt.append(1) or True)
    threads = torch.get_num_threads()
    asked = {"kernel_cache": True, "keep_freed_memory": True, "threads": threads + 1, "device": torch.device("cpu"),
             "tf32": True}
    try:
        assert runtime.configure_process(**asked) == {"kernel_cache": True, "keep_freed_memory": True,
                                                      "threads": threads + 1}
        assert all(os.environ[name] == str(fast.KERNEL_CACHE) for name in fast.KERNEL_CACHES)
        assert torch.get_num_threads() == threads + 1
        assert runtime.configure_process(**asked) == {} and mallopt == [1]
        torch.set_num_threads(threads)
        assert runtime.configure_process(**asked) == {"threads": threads + 1}
        assert runtime.APPLIED == {"kernel_cache": True, "keep_freed_memory": True, "threads": threads + 1}
    finally:
        torch.set_num_threads(threads)


def test_int8_engine_follows_the_cpu_and_the_users_choice(monkeypatch):
    monkeypatch.delenv("AIAYN_INT8_ENGINE", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    onednn = "onednn" in torch.backends.quantized.supported_engines
    monkeypatch.setattr(runtime, "_aiayn_int8", lambda: True)  # aiayn's kernel built for AVX2
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_vnni"})
    assert runtime.int8_engine() == ("onednn" if onednn else "aiayn")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "fma"})  # no int8 dot products: aiayn's
    assert runtime.int8_engine() == "aiayn"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "amx_int8"})
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # oneDNN capped below VNNI: as an AVX2 CPU
    assert runtime.int8_engine() == "aiayn"
    monkeypatch.setattr(runtime, "_aiayn_int8", lambda: False)  # no kernel (no compiler, no AVX2): fbgemm
    assert runtime.int8_engine() == "fbgemm"
    with monkeypatch.context() as m:
        m.setenv("AIAYN_INT8_ENGINE", "aiayn")
        with pytest.raises(UsageError, match="AIAYN_INT8_ENGINE=aiayn needs aiayn's compiled kernels"):
            runtime.int8_engine()
    monkeypatch.setattr(runtime, "_aiayn_int8", lambda: True)
    monkeypatch.setenv("AIAYN_INT8_ENGINE", "FBGEMM")  # the user's choice wins, any case
    assert runtime.int8_engine() == "fbgemm"
    monkeypatch.setenv("AIAYN_INT8_ENGINE", "Aiayn")
    assert runtime.int8_engine() == "aiayn"
    monkeypatch.setenv("AIAYN_INT8_ENGINE", "mkl")
    with pytest.raises(UsageError, match="AIAYN_INT8_ENGINE must be one of aiayn, fbgemm, onednn"):
        runtime.int8_engine()


@pytest.mark.parametrize("engine", ["fbgemm", "onednn"])
def test_int8_packing_packs_for_an_engine_and_restores_the_setting(engine):
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    from aiayn.runtime import int8_packing

    if engine not in torch.backends.quantized.supported_engines:
        pytest.skip(f"torch has no {engine} engine here")
    before = torch.backends.quantized.engine
    torch.manual_seed(0)
    linear, x = nn.Linear(64, 96), torch.randn(8, 64)
    linear.qconfig = per_channel_dynamic_qconfig
    with int8_packing(engine):
        assert torch.backends.quantized.engine == engine
        q = DynamicLinear.from_float(linear)
    assert torch.backends.quantized.engine == before
    torch.testing.assert_close(q(x), linear(x), rtol=0.05, atol=0.05)  # int8 products, to quantization error


def test_int8_decoding_packs_the_decoders_projections_for_the_step_engine(monkeypatch):
    # The decoder's projections are packed for int8_step_engine (fbgemm here), the encoder's and the tied output
    # projection for int8_engine (oneDNN): each returns, to the bit, what its own int8 weights packed for that engine
    # return, and not what the other engine returns where the two round some products differently (with VNNI they
    # differ at ordinary inputs; on an AVX2-only CPU at a few, so inputs of several scales and shapes are tried).
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    if not {"fbgemm", "onednn"} <= set(torch.backends.quantized.supported_engines):
        pytest.skip("torch lacks one of the two int8 engines here")
    monkeypatch.setattr(inference, "int8_step_engine", lambda: "fbgemm")
    monkeypatch.setattr(runtime, "int8_engine", lambda: "onednn")
    monkeypatch.setattr(inference, "int8_engine", lambda: "onednn")
    torch.manual_seed(0)
    q = inference.decoding_copy(tiny_model(64), "int8")
    inputs = [torch.randn(rows, q.cfg.d_model) * scale for rows in (7, 64) for scale in (0.01, 1, 3, 100, 1000)]
    inputs += [x.index_fill(1, torch.tensor([0]), 1e4 * x.abs().max()) for x in inputs]  # one outlying feature

    def packed_for(engine: str, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        with runtime.int8_packing(engine):
            params = torch.ops.quantized.linear_prepack(*m._packed_params._weight_bias())
        return torch.ops.quantized.linear_dynamic(x, params, True)

    layers = {"decoder": q.decoder.layers[0].self_attn.w_q, "encoder": q.encoder.layers[0].self_attn.w_q,
              "output": q.output_projection.linear}
    assert all(isinstance(m, DynamicLinear) for m in layers.values())
    for part, m in layers.items():
        engine, other = ("fbgemm", "onednn") if part == "decoder" else ("onednn", "fbgemm")
        with torch.no_grad():
            assert all(torch.equal(m(x), packed_for(engine, m, x)) for x in inputs), part
            assert any(not torch.equal(m(x), packed_for(other, m, x)) for x in inputs), part


def test_int8_step_engine_is_fbgemm_beside_onednn_without_amx(monkeypatch):
    monkeypatch.delenv("AIAYN_INT8_ENGINE", raising=False)
    monkeypatch.setattr(runtime, "int8_engine", lambda: "onednn")
    fbgemm = "fbgemm" in torch.backends.quantized.supported_engines
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_vnni"})
    assert runtime.int8_step_engine() == ("fbgemm" if fbgemm else "onednn")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512_vnni", "amx_int8"})  # AMX: oneDNN's
    assert runtime.int8_step_engine() == "onednn"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512_vnni"})
    monkeypatch.setenv("AIAYN_INT8_ENGINE", "onednn")  # the user's choice holds for the decoder too
    assert runtime.int8_step_engine() == "onednn"
    monkeypatch.setattr(runtime, "int8_engine", lambda: "fbgemm")
    monkeypatch.delenv("AIAYN_INT8_ENGINE")
    assert runtime.int8_step_engine() == "fbgemm"
    monkeypatch.setattr(runtime, "int8_engine", lambda: "aiayn")  # AVX2 alone: aiayn's kernel for every projection
    assert runtime.int8_step_engine() == "aiayn"


def test_fp32_gemm_follows_the_cpu_vendor_its_avx512_the_weights_size_and_the_users_choice(monkeypatch):
    """MKL's GEMM on an Intel CPU; oneDNN's packed weights on an AMD CPU with AVX-512 (MKL's kernels do not use it
    there); on one with AVX2 alone, MKL's for weights of up to 512 x 512 numbers, oneDNN's above; the user's choice
    for all."""
    monkeypatch.delenv("AIAYN_FP32_GEMM", raising=False)
    mkl = "mkl" if torch.backends.mkl.is_available() else "onednn"
    big = runtime.FP32_MKL_LARGEST + 1
    monkeypatch.setattr(runtime, "cpu_vendor", lambda: "GenuineIntel")
    for flags in ({"avx2"}, {"avx2", "avx512f"}):
        monkeypatch.setattr(runtime, "cpu_flags", lambda flags=flags: flags)
        assert runtime.fp32_gemm() == runtime.fp32_gemm(big) == mkl
    monkeypatch.setattr(runtime, "cpu_vendor", lambda: "AuthenticAMD")
    assert runtime.fp32_gemm() == runtime.fp32_gemm(big) == "onednn"  # a Zen 4 or 5
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2"})  # a Zen 3
    assert runtime.fp32_gemm(512 * 512) == mkl and runtime.fp32_gemm(big) == "onednn"
    monkeypatch.setenv("AIAYN_FP32_GEMM", " MKL ")  # the user's choice wins, any case, for every projection
    assert runtime.fp32_gemm() == runtime.fp32_gemm(big) == "mkl"
    monkeypatch.setenv("AIAYN_FP32_GEMM", "fbgemm")
    with pytest.raises(UsageError, match="AIAYN_FP32_GEMM must be one of mkl, onednn, not 'fbgemm'"):
        runtime.fp32_gemm()


def test_cpu_vendor_reads_the_vendor_linux_reports():
    vendor = runtime.cpu_vendor()
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        assert vendor == "unknown"
        return
    if "vendor_id" not in text:  # not an x86 CPU
        assert vendor == "unknown"
        return
    assert vendor != "unknown" and re.search(rf"^vendor_id\s*:\s*{re.escape(vendor)}$", text, re.MULTILINE)


_FAULTS = """
import resource, sys
if sys.argv[1] == "keep":
    from aiayn.allocator import keep_freed_memory
    assert keep_freed_memory()
bytearray(40 << 20)  # the first block: faulted in either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    bytearray(40 << 20)  # zero-filled (touched) and freed; over 32 MiB glibc always serves a block with mmap
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_kept_freed_memory_is_reused_without_page_faults():
    """aiayn.allocator.keep_freed_memory, in a fresh process (glibc's settings are process-wide): a 40 MiB block
    allocated, touched and freed five times faults its ~10,000 pages in every time by default, and almost never once
    freed memory is kept."""

    def faults(mode: str) -> int:
        return int(subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True,
                                  check=True).stdout)

    assert faults("default") > 5 * 9_000
    assert faults("keep") < 1_000
