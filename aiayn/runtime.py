"""Where and how the maths runs: device, dtype (bf16 or fp16 autocast), CPU threads, and processes (torchrun/DDP), from
the process group's start (setup_runtime) to its end (`with runtime:`). Decided here only; the trainer, the dev
evaluation and the benchmarks take a `Runtime`. The process-wide settings (glibc's allocator, oneDNN's kernel caches,
torch's threads, TF32, cuDNN's attention) are applied here only, by configure_process, which every entry point calls."""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from aiayn import fast, torch_import
from aiayn.errors import UsageError

DTYPES = ("fp32", "bf16", "fp16", "auto")  # auto: auto_dtype()
FP16_DEVICES = ("cuda", "cpu")  # where fp16 autocast and torch's GradScaler run (a CPU slowly: for tests)


@dataclass
class Runtime:
    """Where the maths runs. Used as a context manager, it ends the process group it started (setup_runtime) when
    the block ends: all processes leave together after a clean end; after an error, each one at once."""

    device: torch.device
    rank: int = 0
    world_size: int = 1
    dtype: str = "fp32"  # "fp32"; "bf16" or "fp16": autocast around forward passes (fp32 master weights)
    owns_group: bool = False  # this Runtime started the process group (and so ends it)
    why_dtype: str = ""  # why this dtype, where --dtype auto picked it

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self.owns_group and dist.is_initialized():
            if exc_type is None:
                # Leave together: a process that tears gloo down while another still talks to it can abort (SIGABRT,
                # "terminate called without an active exception").
                dist.barrier()
            dist.destroy_process_group()
            self.owns_group = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.dtype in ("bf16", "fp16"):
            return torch.autocast(self.device.type, dtype=torch.bfloat16 if self.dtype == "bf16" else torch.float16)
        return contextlib.nullcontext()

    def grad_scaler(self) -> torch.amp.GradScaler:
        """Dynamic loss scaling for fp16 (fp16 gradients underflow without it); a pass-through for fp32 and bf16."""
        return torch.amp.GradScaler(self.device.type, enabled=self.dtype == "fp16")

    def all_reduce(self, values: list[float]) -> list[float]:
        """Sums over processes (the values themselves in a single process)."""
        if self.world_size == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def barrier(self) -> None:
        """Waits until every process gets here (nothing in a single process)."""
        if self.world_size > 1:
            dist.barrier()

    def any(self, flag: bool) -> bool:
        """True if `flag` is true in any process (so that all take the same branch)."""
        return bool(self.all_reduce([float(flag)])[0]) if self.world_size > 1 else flag

    def wrap(self, module: torch.nn.Module, compile: bool = False) -> torch.nn.Module:
        """DDP across processes when there are several, then torch.compile if asked."""
        if self.world_size > 1:
            module = torch.nn.parallel.DistributedDataParallel(
                module, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if not compile:
            return module
        from aiayn.training.packed import mark_constant_for_compile

        mark_constant_for_compile()
        return torch.compile(module)


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """"auto" (CUDA when there is one, else CPU), "cpu", "cuda" (this process's GPU under torchrun), "cuda:N",
    "mps"; a clear error when the device is not there."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type != "cpu":
        torch_import.finish()  # what torch registers for other devices, if its import deferred it
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: this PyTorch ({torch.__version__}) sees no CUDA GPU; use --device cpu "
                             "(or install a CUDA build of torch on a machine with a GPU)")
        if device.index is None:
            device = torch.device("cuda", local_rank)
        if device.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: only {torch.cuda.device_count()} GPU(s) visible")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS is not available on this machine; use --device cpu")
    return device


def native_bf16(device: torch.device) -> bool:
    """Whether bf16 matmuls run natively here: a CUDA GPU with bf16, or a CPU with AVX512-BF16 or AMX-BF16. Without
    them (a VM may hide the flags even on a CPU that has them) torch emulates bf16 matmuls at a fraction of fp32's
    speed (docs/speed.md)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def users_choice(variable: str, choices: tuple[str, ...]) -> str | None:
    """The choice the environment variable `variable` makes among `choices` (any case, spaces ignored), None where it
    is unset or empty; another value is a UsageError naming the choices."""
    asked = os.environ.get(variable, "").strip().lower()
    if asked and asked not in choices:
        raise UsageError(f"{variable} must be one of {', '.join(choices)}, not {asked!r}")
    return asked or None


INT8_ENGINES = ("aiayn", "fbgemm", "onednn")  # the int8 GEMMs decoding can pack its weights for: aiayn's, torch's


def int8_engine() -> str:
    """The int8 GEMM decoding packs its weights for: oneDNN's where the CPU has int8 dot products (AVX512-VNNI or
    AMX-INT8, and oneDNN is not capped below them by ONEDNN_MAX_CPU_ISA); elsewhere aiayn's own (aiayn/native_int8.c,
    where aiayn.native's kernels are built for a CPU with AVX2), else fbgemm's. torch's two quantize a batch's
    activations over one range (7 bits on fbgemm), aiayn's each row over its own (7 bits), faster on AVX2 and nearer
    fp32; measurements: docs/speed.md. AIAYN_INT8_ENGINE=aiayn|fbgemm|onednn chooses."""
    asked = users_choice("AIAYN_INT8_ENGINE", INT8_ENGINES)
    if asked == "aiayn" and not _aiayn_int8():
        raise UsageError("AIAYN_INT8_ENGINE=aiayn needs aiayn's compiled kernels on a CPU with AVX2 (`aiayn doctor` "
                         "says why they are not in use); choose fbgemm or onednn")
    if asked:
        return asked
    capped = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    vnni = {"avx512_vnni", "amx_int8"} & cpu_flags()
    if vnni and not (capped and capped != "ALL" and "VNNI" not in capped and "AMX" not in capped) and \
            "onednn" in torch.backends.quantized.supported_engines:
        return "onednn"
    return "aiayn" if _aiayn_int8() else "fbgemm"


def _aiayn_int8() -> bool:
    from aiayn import native  # compiles the kernels on first use

    return native.int8_available()


def int8_step_engine() -> str:
    """The quantized engine for the decoder's own projections, which run a step's few rows at a time (the encoder's
    and the output projection's stay on int8_engine()'s): fbgemm's where int8_engine() picks oneDNN's on a CPU
    without AMX-INT8. There torch's oneDNN int8 path costs ~20 us a call at one row where fbgemm's costs ~10 (a
    256 x 256 projection; benchmarks/ab/int8_engine.py), where the encoder's thousands of rows and the output
    projection's wide matrix run faster on oneDNN's. On the Xeon with AVX512-VNNI a Multi30k model's greedy search
    took 0.81x the CPU seconds, beam 4 0.93x, its BLEU within 0.13 (the two engines round some products differently:
    docs/speed.md). With AMX (unmeasured here) oneDNN's everywhere; AIAYN_INT8_ENGINE, when set, chooses for both."""
    engine = int8_engine()
    if users_choice("AIAYN_INT8_ENGINE", INT8_ENGINES) or engine != "onednn" or "amx_int8" in cpu_flags():
        return engine
    return "fbgemm" if "fbgemm" in torch.backends.quantized.supported_engines else engine


FP32_GEMMS = ("mkl", "onednn")  # the GEMMs fp32 decoding's projections can run on, on a CPU


FP32_MKL_LARGEST = 512 * 512  # weight elements: on a CPU with AVX2 alone, larger weights run on oneDNN's packed GEMM


def fp32_gemm(elements: int = 0) -> str:
    """The GEMM fp32 decoding runs a projection on, on a CPU, for a weight of `elements` numbers: MKL's sgemm on the
    plain weight (F.linear) or oneDNN's on a weight packed once (aiayn.decoding.inference.PrepackedLinear). MKL's on
    an Intel CPU where torch has MKL; oneDNN's on an AMD CPU with AVX-512 (oneDNN's kernels use it, MKL's do not
    there) and wherever torch lacks MKL; on a CPU with AVX2 alone, MKL's for weights of up to FP32_MKL_LARGEST
    numbers (its call costs less at a decoder step's few rows) and oneDNN's packed weights above (at a few rows it
    reads those faster: a base model's feed-forward, a vocabulary-wide output projection). Measurements:
    docs/speed-design.md. AIAYN_FP32_GEMM=mkl|onednn chooses for every projection."""
    chosen = users_choice("AIAYN_FP32_GEMM", FP32_GEMMS)
    if chosen or not torch.backends.mkl.is_available():
        return chosen or "onednn"
    if cpu_vendor() == "GenuineIntel":
        return "mkl"
    if "avx512f" in cpu_flags():
        return "onednn"
    return "mkl" if elements <= FP32_MKL_LARGEST else "onednn"


@contextlib.contextmanager
def int8_packing(engine: str | None = None):
    """Within: int8 weights are quantized and packed for `engine` (default int8_engine()); a packed weight keeps its
    engine's kernels wherever it runs afterwards."""
    before, engine = torch.backends.quantized.engine, engine or int8_engine()
    torch.backends.quantized.engine = "fbgemm" if engine == "aiayn" else engine  # aiayn's packs its own (int8_rows)
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


def cpu_flags() -> set[str]:
    """The CPU feature flags Linux reports (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        return set()


def cpu_vendor() -> str:
    """The CPU's vendor as Linux reports it ("GenuineIntel", "AuthenticAMD", ...; "unknown" elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")), "unknown")
    except OSError:
        return "unknown"


def cpu_model() -> str:
    """The CPU's name as Linux reports it ("model name"), else platform.processor(), else "unknown"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def auto_dtype(device_type: str, bf16: bool) -> str:
    """What --dtype auto trains in: bf16 where it pays (`bf16`: fast_bf16); else fp16 on a CUDA GPU (V100, T4, P100:
    tensor cores in fp16, none in bf16), fp32 elsewhere."""
    if bf16:
        return "bf16"
    return "fp16" if device_type == "cuda" else "fp32"


def resolve_dtype(dtype: str, device: torch.device) -> str:
    """"fp32", "bf16" or "fp16" as given; "auto" -> auto_dtype(). fp16 on a device in FP16_DEVICES only."""
    if dtype not in DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    if dtype == "auto":
        return auto_dtype(device.type, fast_bf16(device))
    if dtype == "bf16":
        warn_if_bf16_slow(device, f"--dtype auto picks {auto_dtype(device.type, False)} here")
    if dtype == "fp16" and device.type not in FP16_DEVICES:
        raise UsageError(f"--dtype fp16 (loss-scaled) runs on CUDA GPUs, not on {device.type}; use --dtype fp32")
    if dtype == "fp16" and device.type == "cpu" and os.environ.get("RANK", "0") == "0":
        print("warning: fp16 on a CPU runs slower than fp32 (it is meant for GPUs without bf16); use --dtype fp32 or "
              "auto here", file=sys.stderr, flush=True)
    return dtype


BF16_GAIN = 1.2  # "auto" takes bf16 on a CPU only where its matmuls measure at least this many times fp32's rate


def fast_bf16(device: torch.device) -> bool:
    """Whether bf16 pays here: a CUDA GPU with bf16; a CPU with the instructions (native_bf16) whose bf16 matmuls also
    measure at least BF16_GAIN x fp32's rate. Having the instructions is not enough: on one Xeon with AVX512-BF16 and
    no AMX, torch's bf16 matmuls ran at half fp32's rate (docs/speed.md)."""
    if device.type != "cpu":
        return native_bf16(device)
    return native_bf16(device) and 1 / bf16_slowdown() >= BF16_GAIN


def matmul_gflops(dtype: torch.dtype, n: int = 1024, repeats: int = 3) -> float:
    """The best rate of an n x n by n x n torch.mm in `dtype` on this CPU, on torch's current threads (GFLOP/s)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # warm-up: the first call picks and loads its kernel
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


@functools.cache
def bf16_slowdown(n: int = 512) -> float:
    """How many times longer a bf16 matmul takes than an fp32 one on this CPU (measured once per process, n x n)."""
    return matmul_gflops(torch.float32, n) / matmul_gflops(torch.bfloat16, n)


_bf16_checked = False  # the check below runs once per process (a quickstart asks for bf16 three times)


def warn_if_bf16_slow(device: torch.device, fix: str) -> None:
    """One "warning:" line on stderr where bf16 was asked for but does not pay (fast_bf16): a GPU without bf16, a CPU
    that emulates it, or one whose bf16 matmuls measure slower than fp32's. It still runs. fix: what to use instead,
    e.g. "--dtype auto"."""
    global _bf16_checked
    if _bf16_checked or device.type not in ("cpu", "cuda") or os.environ.get("RANK", "0") != "0":
        return
    _bf16_checked = True
    if device.type == "cuda":
        if native_bf16(device):
            return
        what = "bf16 is not native on this GPU (torch.cuda.is_bf16_supported() is false)"
    else:
        slowdown = bf16_slowdown()
        if 1 / slowdown >= BF16_GAIN or (not native_bf16(device) and slowdown < 1.5):
            return  # it pays; or the flags miss it (not Linux, say) but it runs at about fp32's speed
        if native_bf16(device):
            rate = (f"{slowdown:.1f}x slower than fp32" if slowdown >= 1.05
                    else f"at {1 / slowdown:.2f}x fp32's speed, short of the {BF16_GAIN}x that pays")
            what = f"this CPU has bf16 instructions, but its bf16 matmuls measure {rate} here (a 512^3 matmul)"
        else:
            what = (f"bf16 matmuls are emulated on this CPU (no AVX512-BF16 or AMX-BF16): {slowdown:.1f}x slower "
                    "than fp32 here (a 512^3 matmul)")
    print(f"warning: {what}; {fix}", file=sys.stderr, flush=True)


def free_cores(interval: float = 0.25) -> int:
    """CPU cores this process may use that other processes are not busy on, measured over `interval` seconds from
    /proc/stat (all usable cores where that cannot be read). On a shared machine a thread on a busy core stalls the
    others at every synchronisation, so that two threads, one on a busy core, run slower than one
    (benchmarks/ab/busy_threads.py measures it)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    try:
        t0, i0 = _cpu_ticks()
        time.sleep(interval)
        t1, i1 = _cpu_ticks()
    except (OSError, ValueError, IndexError):
        return usable
    machine = os.cpu_count() or usable
    busy = machine * (1 - (i1 - i0) / max(t1 - t0, 1))
    return max(1, min(usable, round(machine - busy)))


def _cpu_ticks() -> tuple[int, int]:
    """(all, idle + iowait) CPU ticks of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat", encoding="utf-8") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]


def attention_without_shape_plans(device: torch.device) -> None:
    """On a CUDA GPU, take cuDNN's attention out of what torch's scaled_dot_product_attention may pick (the flash and
    memory-efficient kernels remain). cuDNN builds an execution plan for every new shape of batch, forward and
    backward, and real batches come in hundreds of shapes, so training runs slowly until every shape has its plan
    (measured in docs/speed-peers.md). AIAYN_CUDNN_ATTENTION=1 leaves cuDNN in (a benchmark of one fixed shape, where
    the plan is built once)."""
    if device.type == "cuda" and os.environ.get("AIAYN_CUDNN_ATTENTION") != "1":
        torch.backends.cuda.enable_cudnn_sdp(False)


def setup_runtime(device: str = "auto", dtype: str = "fp32", threads: int = 0) -> Runtime:
    """A single process, or one process of a torchrun job (gloo on CPU, NCCL on GPU). threads: CPU threads for
    torch; 0 = the free cores (free_cores), unless OMP_NUM_THREADS says otherwise or several processes share the
    machine (torchrun)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if not threads and world == 1 and "OMP_NUM_THREADS" not in os.environ and device in ("cpu", "auto") \
            and not torch.cuda.is_available():
        threads = free_cores()
    configure_process(kernel_cache=True, threads=threads)  # before the first kernel (the dtype check below runs one)
    rank = int(os.environ.get("RANK", "0"))
    dev = resolve_device(device, int(os.environ.get("LOCAL_RANK", "0")))
    asked, dtype = dtype, resolve_dtype(dtype, dev)
    why = "--dtype auto: no native bf16 on this GPU" if asked == "auto" and dtype == "fp16" else ""
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    configure_process(device=dev, tf32=dtype == "fp32")
    owns = world > 1 and not dist.is_initialized()
    if owns:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return Runtime(dev, rank, world, dtype, owns_group=owns, why_dtype=why)


# ---------------------------------------------------------------------------------------------------------
# Process-wide settings: applied here only.

APPLIED: dict[str, Any] = {}  # what configure_process has changed in this process: setting -> value


def configure_process(*, kernel_cache: bool = False, keep_freed_memory: bool = False, threads: int = 0,
                      device: torch.device | None = None, tf32: bool | None = None) -> dict[str, Any]:
    """Apply aiayn's process-wide settings: the one place that does. `aiayn`'s main, serve's workers, setup_runtime
    and inference.load call it, each with what it knows; nothing else sets these. A setting already as asked is left
    alone, so that a second call with the same arguments changes nothing. Returns what this call changed (and adds it
    to APPLIED). None of them changes what is computed.

        kernel_cache       oneDNN's and ideep's per-shape caches bounded (fast.bound_kernel_cache): before any kernel
        keep_freed_memory  glibc keeps freed memory for reuse (fast.keep_freed_memory); once set, it stays set
        threads            torch's CPU threads (0: as they are)
        device             on a CUDA GPU: cuDNN's attention left out (attention_without_shape_plans) and,
        tf32               unless None, TF32 matmuls on (training in fp32) or off
    """
    changed: dict[str, Any] = {}
    if kernel_cache and not all(name in os.environ for name in fast.KERNEL_CACHES):
        changed["kernel_cache"] = fast.bound_kernel_cache()
    if keep_freed_memory and "keep_freed_memory" not in APPLIED:  # glibc's settings cannot be read back
        changed["keep_freed_memory"] = fast.keep_freed_memory()
    # torch.set_num_threads does more than the count it reports (MKL's dynamic threads off, for one): left alone only
    # where it was called here with the same count
    if threads and (APPLIED.get("threads") != threads or torch.get_num_threads() != threads):
        torch.set_num_threads(threads)
        changed["threads"] = threads
    if device is not None and device.type == "cuda":
        if torch.backends.cuda.cudnn_sdp_enabled():
            attention_without_shape_plans(device)
            if not torch.backends.cuda.cudnn_sdp_enabled():
                changed["cudnn_attention"] = False
        if tf32 is not None and torch.backends.cuda.matmul.allow_tf32 != tf32:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            changed["tf32"] = tf32
    APPLIED.update(changed)
    return changed


def set_threads_here(count: int) -> None:
    """torch's CPU threads for the work of the calling thread (its own OpenMP team; MKL's and torch's count are the
    process's): what each of a translation's batches side by side takes in its thread, and what the caller restores
    after (aiayn.decoding.translator.in_parallel). How many threads, nothing else: not a configure_process setting."""
    torch.set_num_threads(count)


class StopOnSignal:
    """Turns SIGINT/SIGTERM into a request to stop after the current update (so a checkpoint can be written)."""

    def __init__(self, enabled: bool):
        self.enabled, self.signal, self._old = enabled, None, {}

    def __enter__(self) -> StopOnSignal:
        if self.enabled:
            self._old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _on_signal(self, signum, _frame) -> None:
        self.signal = signum

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
