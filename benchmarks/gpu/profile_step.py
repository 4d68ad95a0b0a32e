"""Where a training step's time goes, by kind of work: aiayn's training steps (as `aiayn train` takes them: autocast,
TrainingObjective, fused Adam on CUDA) under torch.profiler, every GPU kernel (or, on a CPU, every operator's own
time) put in one of KINDS. Not a test (CI has no GPU); on a GPU machine, from the repository root:

    python -m benchmarks.gpu.profile_step --presets base,big --dtype bf16 --layouts packed --compile --out DIR

Writes DIR/profile.jsonl (one record a cell: milliseconds per step of each kind, the kernels counted, the busiest
names) and DIR/profile-PRESET-LAYOUT-eager.txt (and -compiled.txt): the table by kind, then torch.profiler's own
table. A step's wall time beside the GPU's busy time shows what waits on the CPU's launches.

How a kernel is put in a kind (kind_of): first its own name (GEMM kernels are matrix products, flash kernels
attention; a kernel the compiler fused from several kinds counts as the first of KINDS its name names, e.g.
`triton_red_fused__log_softmax_...` is softmax and loss); else the operators that launched it, innermost first
(aten::native_layer_norm_backward: layer norm; aten::_to_copy: casts, autocast's copies; aten::addmm, and the bias
gradient's sum under AddmmBackward0: matrix products); else elementwise when its name or operator is one
(residual adds, ReLU, scaling); else other (embedding lookups and their gradient, indexing, reductions).
`--cpu` runs it on tiny shapes, fp32 (tests/test_gpu_scripts.py).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch

from aiayn.data.batching import Batch, pack
from benchmarks.gpu.check import sync, training_setup
from benchmarks.gpu.peers import train_step
from benchmarks.workloads import train_batch

KINDS = ("matrix products", "attention", "softmax and loss", "layer norm", "dropout", "optimizer", "casts",
         "elementwise", "other")

# A kernel's own name, where it says what it does (cuBLAS's and CUTLASS's GEMMs, flash attention, fused Adam, and
# the kernels torch.compile writes, named after what they fuse). Checked in this order: the first that matches.
KERNEL_NAMES = (
    ("attention", r"flash|fmha|attention|attn"),
    ("matrix products", r"gemm|nvjet|cutlass|xmma|cublas|wgmma|_mma"),
    ("softmax and loss", r"softmax|nll_loss|cross_entropy|logsumexp"),
    ("layer norm", r"layer_?norm"),
    ("dropout", r"dropout|philox|bernoulli"),
    ("optimizer", r"multi_tensor_apply|adam"),
)
# An operator's name (aten's, autograd's, or a record_function's). Names are matched ignoring case. Casts come before
# matrix products: under autocast the weights' copies to bf16 run inside aten::linear.
OPERATOR_NAMES = (
    ("attention", r"attention|attn|flash"),
    ("casts", r"^aten::_to_copy$|^aten::to$|ToCopyBackward"),
    ("matrix products", r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear)$|\b(Mm|Addmm|Bmm|Baddbmm)Backward"),
    ("softmax and loss", r"softmax|nll_loss|cross_?entropy|logsumexp"),
    ("layer norm", r"layer_?norm"),
    ("dropout", r"dropout|bernoulli|^aten::(random_|bitwise_and_)$"),  # the latter: aiayn.fast.Dropout's mask
    ("optimizer", r"^Optimizer\.|_foreach_|_fused_adam|multi_tensor"),
)
ELEMENTWISE = (r"elementwise|^aten::(add|sub|mul|div|relu|threshold|threshold_backward|where|masked_fill|fill|neg|"
               r"exp|copy|clone|cat)_?$|\b(Add|Sub|Mul|Div|Relu|Threshold)Backward")


def kind_of(kernel: str, ops: Sequence[str] = ()) -> str:
    """The kind of work (one of KINDS) of a kernel named `kernel`, launched under the operators `ops`, innermost
    first; on a CPU, kernel is "" and ops[0] is the operator whose own time is counted."""
    for kind, pattern in KERNEL_NAMES:
        if kernel and re.search(pattern, kernel, re.I):
            return kind
    for op in ops:
        for kind, pattern in OPERATOR_NAMES:
            if re.search(pattern, op, re.I):
                return kind
    if (kernel and re.search(ELEMENTWISE, kernel, re.I)) or (ops and re.search(ELEMENTWISE, ops[0], re.I)):
        return "elementwise"
    return "other"


def _chain(event) -> list[str]:
    """The names of an operator event and of the operators around it, innermost first."""
    names = []
    while event is not None:
        names.append(event.name)
        event = event.cpu_parent
    return names


def timed_work(events) -> list[tuple[str, list[str], float]]:
    """(kernel name, launching operators innermost first, microseconds) of every GPU kernel in a profile's events
    (a kernel no operator launched, e.g. one replayed from a CUDA graph, with no operators); where there are none
    (a CPU), ("", the operator and those around it, its own CPU microseconds) of every operator."""
    from torch.autograd import DeviceType

    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    if not kernels:
        return [("", _chain(e), e.self_cpu_time_total) for e in events
                if e.device_type == DeviceType.CPU and e.self_cpu_time_total > 0]
    work = [(k.name, _chain(e), k.duration) for e in events if e.device_type == DeviceType.CPU for k in e.kernels]
    linked = Counter((name, us) for name, _, us in work)
    for k in kernels:
        key = (k.name, k.time_range.end - k.time_range.start)
        if linked[key]:
            linked[key] -= 1
        else:
            work.append((k.name, [], key[1]))
    return work


def by_kind(work: list[tuple[str, list[str], float]], steps: int, top: int = 3) -> dict[str, dict]:
    """Kind -> {"ms": per step, "count": kernels (or operator calls) per step, "top": [[name, ms per step], ...]},
    every kind of KINDS present (zeros where none ran)."""
    out = {kind: {"ms": 0.0, "count": 0.0, "names": {}} for kind in KINDS}
    for kernel, ops, us in work:
        cell = out[kind_of(kernel, ops)]
        cell["ms"] += us / 1e3 / steps
        cell["count"] += 1 / steps
        name = kernel or (ops[0] if ops else "?")
        cell["names"][name] = cell["names"].get(name, 0.0) + us / 1e3 / steps
    for cell in out.values():
        names = cell.pop("names")
        cell["top"] = [[n, ms] for n, ms in sorted(names.items(), key=lambda kv: -kv[1])[:top]]
    return out


def kind_table(kinds: dict[str, dict], wall_ms: float, what: str) -> str:
    """The markdown table of by_kind's result, with the busy time against the step's wall time."""
    busy = sum(c["ms"] for c in kinds.values())
    lines = [f"{what}: {busy:.2f} ms of work a step in {wall_ms:.2f} ms wall ({100 * busy / wall_ms:.0f} % busy; "
             "profiled steps, the wall time measured without the profiler)", "",
             "| kind | ms a step | share | calls a step | busiest |", "|---|---|---|---|---|"]
    for kind in KINDS:
        c = kinds[kind]
        names = "; ".join(f"{n[:70]} {ms:.2f}" for n, ms in c["top"])
        share = 100 * c["ms"] / busy if busy else 0.0
        lines.append(f"| {kind} | {c['ms']:.2f} | {share:.1f} % | {c['count']:.0f} | {names} |")
    return "\n".join(lines)


def profile_cell(preset: str, dtype: str, layout: str, compile_: bool, args, device: torch.device
                 ) -> tuple[dict, str]:
    """(record, text) of aiayn's training steps on the harness's batch (sentences of 25-30 tokens): args.warmup
    steps, then args.steps under torch.profiler, then the same steps timed without it."""
    from torch.profiler import ProfilerActivity, profile

    cfg, model, objective, opt = training_setup(preset, device, compile_)
    src, tgt_in, tgt_out, src_l, tgt_l = train_batch(cfg.vocab_size, args.tokens, "cpu")
    batch = Batch(src, tgt_in, tgt_out, sum(src_l), sum(tgt_l))
    inputs = (pack(batch) if layout == "packed" else batch).to(device).inputs()
    step = train_step(lambda _: objective(*inputs)[0], [sum(tgt_l)], opt, device, dtype)
    for _ in range(args.warmup):
        step(0)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step(0)
    sync(device)
    wall_ms = (time.perf_counter() - t0) / args.steps * 1e3
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(args.steps):
            step(0)
        sync(device)
    kinds = by_kind(timed_work(prof.events()), args.steps)
    what = (f"aiayn {preset} {dtype} {layout} {'compiled' if compile_ else 'eager'}, {sum(tgt_l)} target tokens, "
            f"{'GPU kernels' if device.type == 'cuda' else 'CPU operators (own time)'}")
    key = "cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    text = (kind_table(kinds, wall_ms, what) + "\n\n" + f"torch.profiler, {args.steps} steps, by {key}:\n"
            + prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=90))
    rec = {"what": "profile", "preset": preset, "dtype": dtype, "layout": layout, "compile": compile_,
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "batch_tgt_tokens": sum(tgt_l), "wall_ms_per_step": wall_ms, "kinds": kinds}
    return rec, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="smoke mode: CPU, tiny preset, fp32, 2 steps, no compile")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--presets", default="base,big")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--layouts", default="packed", help="packed, padded or both (comma separated)")
    ap.add_argument("--compile", action="store_true", help="then each cell compiled (torch.compile, as --compile)")
    ap.add_argument("--tokens", type=int, default=25_000, help="target tokens per batch (paper: 25k)")
    ap.add_argument("--steps", type=int, default=5, help="profiled steps (and as many timed without the profiler)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", required=True, help="a folder: profile.jsonl and one text file per cell")
    args = ap.parse_args()
    if args.cpu:
        args.device, args.presets, args.tokens, args.steps, args.warmup = "cpu", "tiny", 256, 2, 1
        args.dtype, args.compile = "fp32", False
    device = torch.device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells = [(p, lay, c) for c in ([False, True] if args.compile else [False]) for p in args.presets.split(",")
             for lay in args.layouts.split(",")]
    for preset, layout, compile_ in cells:
        name = f"profile-{preset}-{layout}-{'compiled' if compile_ else 'eager'}"
        try:
            rec, text = profile_cell(preset, args.dtype, layout, compile_, args, device)
        except Exception as e:  # noqa: BLE001  (one failing cell does not stop the others)
            rec, text = {"what": "profile", "preset": preset, "layout": layout, "compile": compile_,
                         "error": f"{type(e).__name__}: {str(e)[:300]}"}, f"{name}: failed: {e}"
        (out / f"{name}.txt").write_text(text + "\n")
        with open(out / "profile.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(text.split("\n\ntorch.profiler")[0] + "\n", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
