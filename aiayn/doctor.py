"""What this machine will use and why (`aiayn doctor`): the CPU and its instruction sets, whether bf16 is native,
what `--dtype auto` and `--threads 0` pick, whether a decoding step's attention runs aiayn's compiled kernel
(aiayn.native: built here at first use), the torch build, GPUs, the optional extras installed, and a measured
matmul rate per dtype. `report()` returns a plain dict (the CLI prints it, or dumps it with --json); the decisions
themselves are aiayn.runtime's, called here, not repeated."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

import torch

from aiayn import native, runtime
from aiayn.errors import UsageError
from aiayn.extras import OPTIONAL, installed, pip_line

# /proc/cpuinfo flag -> the name people know it by: the instruction sets torch's CPU kernels choose between
ISA = {"avx2": "AVX2", "avx512f": "AVX-512F", "avx512_bf16": "AVX512-BF16", "amx_bf16": "AMX-BF16",
       "avx512_vnni": "AVX512-VNNI", "avx_vnni": "AVX-VNNI"}
# environment variables that cap the instruction sets a library uses (how the AVX2 case is reproduced on an
# AVX-512 machine: docs/speed-peers.md); the CPU's flags do not change, what runs does
ISA_CAPS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
            "FBGEMM_ENABLE_INSTRUCTIONS", "CT2_FORCE_CPU_ISA")
BENCH_N = 1024  # matmul size of the measurement (n x n by n x n)
EMULATED = 2.5  # bf16 this many times slower than fp32 or more: emulated (~4x: docs/speed.md; native, no AMX: ~2x)


def report(bench: bool = True) -> dict[str, Any]:
    """Everything `aiayn doctor` says, as a dict (JSON-ready). bench=False skips the matmul measurement."""
    cpu = torch.device("cpu")
    device = runtime.resolve_device("auto")
    threads, threads_why = _threads()
    out = {
        "aiayn": _version("aiayn"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": {"model": runtime.cpu_model(), "isa": _isa(), "kernels": torch.backends.cpu.get_cpu_capability(),
                "isa_caps": {name: os.environ[name] for name in ISA_CAPS if os.environ.get(name)},
                "machine_cores": os.cpu_count(),
                "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()},
        "bf16_native_cpu": runtime.native_bf16(cpu),
        "device_auto": str(device),
        "dtype_auto": runtime.resolve_dtype("auto", device),
        "threads_0": threads,
        "threads_0_why": threads_why,
        "decoding_gemms": _decoding_gemms(),
        "translate_batches": _translate_batches(),
        "decoding_attention": native.status(),
        "torch": _torch(),
        "gpus": _gpus(),
        "extras": {name: _extra(name) for name in OPTIONAL},
        "matmul": None,
        "verdict": None,
    }
    if bench:
        out["matmul"] = _bench(threads)
    out["verdict"] = _verdict(out)
    return out


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _isa() -> dict[str, bool | None]:
    """Each instruction set of ISA: present or not; None (unknown) where the CPU flags cannot be read (not Linux)."""
    flags = runtime.cpu_flags()
    return {name: (flag in flags) if flags else None for flag, name in ISA.items()}


def _translate_batches() -> dict[str, int]:
    """How `aiayn translate` searches on this CPU with torch's threads as they are here (its default
    --parallel-batches: aiayn.decoding.batches.side_by_side): batches side by side, and threads each."""
    from aiayn.decoding.batches import side_by_side

    threads = torch.get_num_threads()
    side = side_by_side(None, threads)
    return {"threads": threads, "side_by_side": side, "threads_each": max(1, threads // side)}


def _threads() -> tuple[int, str]:
    """What `--threads 0` gives a single-process CPU run now (runtime.setup_runtime's rule), and why."""
    if "OMP_NUM_THREADS" in os.environ:
        return torch.get_num_threads(), f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    if torch.cuda.is_available():
        return torch.get_num_threads(), "torch's default: a GPU does the maths"
    return runtime.free_cores(), "the cores other processes are not busy on now: runtime.free_cores"


def _decoding_gemms() -> dict[str, str] | str:
    """The GEMMs CPU decoding runs its projections on here (runtime.fp32_gemm, for small weights and the largest,
    runtime.int8_engine, and for the decoder's int8 projections runtime.int8_step_engine),
    or what is wrong with the AIAYN_FP32_GEMM / AIAYN_INT8_ENGINE the user set."""
    try:
        return {"fp32": runtime.fp32_gemm(), "fp32_large": runtime.fp32_gemm(runtime.FP32_MKL_LARGEST + 1),
                "int8": runtime.int8_engine(), "int8_decoder": runtime.int8_step_engine()}
    except UsageError as e:
        return str(e)


def _gemms_text(gemms: dict[str, str] | str) -> str:
    if isinstance(gemms, str):
        return gemms
    int8, decoder = (f"aiayn ({native.int8_instructions()})" if name == "aiayn" else name
                     for name in (gemms["int8"], gemms["int8_decoder"]))
    both = int8 if decoder == int8 else f"{int8}, the decoder's {decoder}"
    fp32 = gemms["fp32"] if gemms["fp32_large"] == gemms["fp32"] else (
        f"{gemms['fp32']} (weights over {runtime.FP32_MKL_LARGEST:,} numbers: {gemms['fp32_large']})")
    return f"fp32 {fp32}; int8 {both} (AIAYN_FP32_GEMM, AIAYN_INT8_ENGINE choose)"


def _torch() -> dict[str, Any]:
    cuda = torch.version.cuda
    return {"version": torch.__version__, "build": f"CUDA {cuda}" if cuda else "CPU-only",
            "onednn": torch.backends.mkldnn.is_available(), "mkl": torch.backends.mkl.is_available()}


def _gpus() -> list[dict[str, Any]]:
    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        bf16 = runtime.native_bf16(torch.device("cuda", i))
        gpus.append({"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1), "bf16": bf16,
                     "dtype_auto": runtime.auto_dtype("cuda", bf16)})
    return gpus


def _extra(name: str) -> dict[str, Any]:
    extra, modules, needed_by = OPTIONAL[name]
    have = {m: installed(m) for m in modules}
    return {"installed": all(have.values()), "modules": {m: _version(m) if ok else None for m, ok in have.items()},
            "extra": extra, "install": pip_line(extra), "needed_by": needed_by}


def _bench(threads: int) -> dict[str, Any]:
    """Best-of-3 GFLOP/s of an n x n torch.mm in fp32 and bf16 on `threads` threads (torch's own count restored)."""
    before = torch.get_num_threads()
    runtime.configure_process(threads=threads)
    try:
        fp32 = runtime.matmul_gflops(torch.float32, BENCH_N)
        bf16 = runtime.matmul_gflops(torch.bfloat16, BENCH_N)
    finally:
        runtime.configure_process(threads=before)
    return {"n": BENCH_N, "threads": threads, "fp32_gflops": round(fp32, 1), "bf16_gflops": round(bf16, 1),
            "bf16_slowdown": round(fp32 / bf16, 2)}


def _verdict(r: dict[str, Any]) -> str:
    """One plain sentence on bf16 here: native or emulated, measured, and what to train with."""
    auto, m = r["dtype_auto"], r["matmul"]
    native = "native" if r["bf16_native_cpu"] else "not native (no AVX512-BF16 or AMX-BF16 flag)"
    if m is None:
        return f"bf16 is {native} on this CPU; --dtype auto trains in {auto}"
    x = m["bf16_slowdown"]
    if x >= EMULATED:
        return f"bf16 is emulated here: {x:.1f}x slower than fp32; train with --dtype fp32 or auto"
    if x > 1.1:
        return f"bf16 is {native} but {x:.1f}x slower than fp32 in this matmul; --dtype auto trains in {auto}"
    return f"bf16 is {native}: {1 / x:.1f}x fp32's matmul rate; --dtype auto trains in {auto}"


def format_report(r: dict[str, Any]) -> str:
    """The report as aligned "name  value" lines."""
    isa = r["cpu"]["isa"]
    if all(v is None for v in isa.values()):
        isa_text = "unknown (no /proc/cpuinfo flags)"
    else:
        isa_text = " ".join(name for name, ok in isa.items() if ok) or "none of them"
        missing = [name for name, ok in isa.items() if not ok]
        isa_text += f"  (missing: {', '.join(missing)})" if missing else ""
    t = r["torch"]
    gpus = "; ".join(f"{g['name']}, {g['memory_gib']} GiB, bf16 {'yes' if g['bf16'] else 'no'}, --dtype auto "
                     f"{g['dtype_auto']}" for g in r["gpus"])
    rows = [
        ("aiayn", f"{r['aiayn'] or 'not installed'} (Python {r['python']}, {r['platform']})"),
        ("cpu", r["cpu"]["model"]),
        ("instruction sets", isa_text),
        ("torch kernels", r["cpu"]["kernels"] + (
            "; instruction sets capped by " + " ".join(f"{k}={v}" for k, v in r["cpu"]["isa_caps"].items())
            if r["cpu"]["isa_caps"] else "")),
        ("cores", f"{r['cpu']['usable_cores']} usable of {r['cpu']['machine_cores']}"),
        ("bf16 native (cpu)", "yes" if r["bf16_native_cpu"] else "no"),
        ("--device auto", r["device_auto"]),
        ("--dtype auto", r["dtype_auto"]),
        ("--threads 0", f"{r['threads_0']} ({r['threads_0_why']})"),
        ("decoding GEMMs", _gemms_text(r["decoding_gemms"])),
        ("translate (CPU)", "{side_by_side} batch(es) side by side, {threads_each} thread(s) each, of torch's "
                            "{threads} (--parallel-batches)".format(**r["translate_batches"])),
        ("attention kernel", r["decoding_attention"]),
        ("torch", f"{t['version']} ({t['build']}); oneDNN {'yes' if t['onednn'] else 'no'}, "
                  f"MKL {'yes' if t['mkl'] else 'no'}"),
        ("gpus", f"{len(r['gpus'])}: {gpus}" if r["gpus"] else "none"),
    ]
    for name, e in r["extras"].items():
        if e["installed"]:
            value = "yes (" + ", ".join(f"{m} {v}" for m, v in e["modules"].items()) + ")"
        else:
            missing = ", ".join(m for m, v in e["modules"].items() if v is None)
            value = f"no, missing {missing}: {e['install']} (for {e['needed_by']})"
        rows.append((f"extra {name}", value))
    if r["matmul"]:
        m = r["matmul"]
        for dtype in ("fp32", "bf16"):
            rows.append((f"matmul {dtype}", f"{m[dtype + '_gflops']:.1f} GFLOP/s ({m['n']}^3, {m['threads']} "
                                            f"thread{'s' if m['threads'] > 1 else ''}, best of 3)"))
    rows.append(("verdict", r["verdict"]))
    width = max(len(name) for name, _ in rows)
    return "".join(f"{name:<{width}}  {value}\n" for name, value in rows)

