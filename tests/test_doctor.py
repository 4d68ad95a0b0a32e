"""`aiayn doctor`: every key there, the extras' pip lines name real extras of pyproject.toml, a CPU without bf16
flags reports bf16 not native and auto -> fp32, --json parses, --no-bench measures nothing."""

import json
import sys

import pytest
import torch
from helpers import REPO

from aiayn import doctor, native, runtime
from aiayn.cli import main
from aiayn.extras import OPTIONAL

KEYS = {"aiayn", "python", "platform", "cpu", "bf16_native_cpu", "device_auto", "dtype_auto", "threads_0",
        "threads_0_why", "decoding_gemms", "translate_batches", "decoding_attention", "torch", "gpus", "extras",
        "matmul", "verdict"}


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    monkeypatch.setattr(runtime, "free_cores", lambda interval=0.25: 1)  # it watches /proc/stat for 0.25 s


def _no_timing(*a, **k):
    raise AssertionError("--no-bench timed a matmul")


def test_json_has_every_key_and_no_bench_times_nothing(monkeypatch, capsys):
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: 2.0)  # what --dtype auto measures, decided here
    monkeypatch.setattr(runtime, "matmul_gflops", _no_timing)
    assert main(["doctor", "--json", "--no-bench"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r) == KEYS and r["matmul"] is None
    assert set(r["cpu"]) == {"model", "isa", "kernels", "isa_caps", "machine_cores", "usable_cores"}
    assert r["cpu"]["kernels"] == torch.backends.cpu.get_cpu_capability()
    assert set(r["cpu"]["isa"]) == {"AVX2", "AVX-512F", "AVX512-BF16", "AMX-BF16", "AVX512-VNNI", "AVX-VNNI"}
    assert r["torch"]["version"] == torch.__version__
    assert r["torch"]["build"] == (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only")
    assert set(r["extras"]) == set(OPTIONAL) == {"viz", "serve", "export", "tensorboard", "datasets"}
    assert r["gpus"] == [] or torch.cuda.is_available()


def test_doctor_says_how_translate_splits_its_threads_into_batches(capsys):
    """Two batches side by side, one thread each, where torch has two threads; one batch on one; half each on more."""
    before = torch.get_num_threads()
    try:
        for threads, side, each in [(1, 1, 1), (2, 2, 1), (4, 2, 2)]:
            torch.set_num_threads(threads)
            assert main(["doctor", "--json", "--no-bench"]) == 0
            got = json.loads(capsys.readouterr().out)["translate_batches"]
            assert got == {"threads": threads, "side_by_side": side, "threads_each": each}
        torch.set_num_threads(2)
        assert main(["doctor", "--no-bench"]) == 0
        assert "2 batch(es) side by side, 1 thread(s) each, of torch's 2" in capsys.readouterr().out
    finally:
        torch.set_num_threads(before)


def test_the_pip_lines_name_real_extras_that_bring_the_modules():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, e in doctor.report(bench=False)["extras"].items():
        assert e["install"] == f'pip install -e ".[{e["extra"]}]"', name
        requirements = " ".join(extras[e["extra"]]).replace("-", "_").lower()  # python-multipart: python_multipart
        assert all(m in requirements for m in e["modules"]), (name, e["extra"])


def test_a_cpu_without_bf16_flags_reports_it_emulated_and_auto_fp32(monkeypatch, capsys):
    if torch.cuda.is_available():
        pytest.skip("--dtype auto follows the GPU here")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_vnni"})
    monkeypatch.setattr(runtime, "matmul_gflops", lambda dtype, n=1024, repeats=3: 100.0 if dtype == torch.float32
                        else 25.0)  # emulated bf16: several times fp32's time (docs/speed.md)
    r = doctor.report()
    assert r["bf16_native_cpu"] is False and r["dtype_auto"] == "fp32"
    assert r["cpu"]["isa"]["AVX2"] and not r["cpu"]["isa"]["AVX512-BF16"] and not r["cpu"]["isa"]["AMX-BF16"]
    assert r["matmul"]["bf16_slowdown"] == 4.0
    assert r["verdict"] == "bf16 is emulated here: 4.0x slower than fp32; train with --dtype fp32 or auto"
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "--dtype auto       fp32" in text and "100.0 GFLOP/s" in text and "missing: AVX512-BF16, AMX-BF16" in text


def test_bf16_instructions_that_measure_slower_than_fp32_leave_auto_at_fp32(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("--dtype auto follows the GPU here")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: 1.9)  # a Xeon with AVX512-BF16, no AMX
    r = doctor.report(bench=False)
    assert r["bf16_native_cpu"] is True and r["dtype_auto"] == "fp32"
    monkeypatch.setattr(runtime, "bf16_slowdown", lambda n=512: 0.5)  # an EPYC where bf16 runs at 2x fp32
    assert doctor.report(bench=False)["dtype_auto"] == "bf16"


def test_flags_that_cannot_be_read_are_unknown(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_flags", set)
    r = doctor.report(bench=False)
    assert set(r["cpu"]["isa"].values()) == {None}
    assert "instruction sets   unknown" in doctor.format_report(r)


def test_a_missing_extra_is_reported_with_its_pip_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    r = doctor.report(bench=False)
    assert r["extras"]["serve"]["installed"] is False and r["extras"]["serve"]["modules"]["uvicorn"] is None
    assert 'extra serve        no, missing uvicorn: pip install -e ".[serve]" (for aiayn serve)' in \
        doctor.format_report(r).splitlines()


def test_instruction_set_caps_in_the_environment_are_named(monkeypatch, capsys):
    """The AVX2 case reproduced on an AVX-512 machine: the CPU's flags still list AVX-512, so the report names the
    variables that cap what the libraries use (and torch's kernel level), else a bug report would mislead."""
    for name in doctor.ISA_CAPS:
        monkeypatch.delenv(name, raising=False)
    assert doctor.report(bench=False)["cpu"]["isa_caps"] == {}
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert doctor.report(bench=False)["cpu"]["isa_caps"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2",
                                                             "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert main(["doctor", "--no-bench"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("torch kernels"))
    assert line.endswith("; instruction sets capped by MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2")
    assert torch.backends.cpu.get_cpu_capability() in line


def test_each_gpu_says_what_auto_trains_in(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    names = ["NVIDIA H100", "Tesla T4"]
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(name=names[i],
                                                                                       total_memory=16 * 2**30))
    monkeypatch.setattr(runtime, "native_bf16", lambda device: device.index == 0)
    gpus = doctor._gpus()
    assert [(g["bf16"], g["dtype_auto"]) for g in gpus] == [(True, "bf16"), (False, "fp16")]


def test_doctor_names_the_decoders_int8_engine_where_it_differs():
    mixed = doctor._gemms_text({"fp32": "mkl", "fp32_large": "onednn", "int8": "onednn", "int8_decoder": "fbgemm"})
    assert "fp32 mkl (weights over 262,144 numbers: onednn); int8 onednn, the decoder's fbgemm" in mixed
    same = doctor._gemms_text({"fp32": "onednn", "fp32_large": "onednn", "int8": "fbgemm", "int8_decoder": "fbgemm"})
    assert "fp32 onednn; int8 fbgemm (" in same and "decoder" not in same and "weights" not in same
    assert set(doctor.report(bench=False)["decoding_gemms"]) == {"fp32", "fp32_large", "int8", "int8_decoder"}


def test_doctor_says_what_aiayns_int8_kernel_sums_with(monkeypatch):
    monkeypatch.setattr(native, "int8_instructions", lambda: "VNNI")
    own = doctor._gemms_text({"fp32": "onednn", "fp32_large": "onednn", "int8": "aiayn", "int8_decoder": "aiayn"})
    assert "; int8 aiayn (VNNI) (" in own and "decoder" not in own
