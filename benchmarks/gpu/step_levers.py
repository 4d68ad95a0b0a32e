"""Where a GPU training step's time goes, and what each lever buys: base (or big) bf16 training steps timed under
several settings in one run, and a kernel-level profile of the chosen ones. Not a test (CI has no GPU):

    python -m benchmarks.gpu.step_levers --variants eager,fused,closs,compile --profile eager,compile --out DIR

Variants (comma-separated; each builds on the defaults below, names combine with '+'); every lever is a parameter
of aiayn or torch, nothing is patched:
    eager      foreach Adam, aiayn's loss path (aiayn.training.losses.TrainingObjective: the real-token rows picked by a
    boolean
               mask) with the chunked fused loss (loss_kernel="chunked"), no compiler
    fused      Adam(fused=True)
    closs      the loss as the reference formula under torch.compile (loss_kernel="compiled")
    formula    the loss as the reference formula, eager (loss_kernel="formula")
    compile    torch.compile of model + loss (aiayn train --compile)
    cudagraph  torch.compile(mode="reduce-overhead"): compiled and replayed as CUDA graphs
    cudnn      attention through the cuDNN kernel (padded batches need a mask, which flash refuses)
    nodrop     dropout off (what dropout costs, for the table only)
    library    whatever aiayn.training.train does now (make_optimizer, TrainingObjective with loss_kernel="auto")

Batches are the shared harness's shape (sentences of 25-30 tokens, ~25,000 target tokens) and FLOPs are counted as
benchmarks/gpu/check.py does (the harness's model FLOPs, benchmarks/workloads.py); MFU is against the bf16 matmul
peak measured in the same run and the H100 datasheet's 989 TFLOP/s. (Earlier versions also had `index`, `mattn` and
`bf16ln`, which patched aiayn's code; aiayn has no parameter for them, so they are gone: benchmarks/results holds
what they measured.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import torch

from aiayn.config import ModelConfig
from aiayn.model import Transformer
from aiayn.training import losses
from aiayn.training.train import make_optimizer
from benchmarks.gpu.check import peak_matmul
from benchmarks.timing import measure, once
from benchmarks.workloads import forward_flops, train_batch

VARIANT_FLAGS = {"eager", "fused", "closs", "formula", "compile", "cudagraph", "cudnn", "nodrop", "library"}


def build(variant: str, preset: str, device):
    flags = set(variant.split("+"))
    unknown = flags - VARIANT_FLAGS
    if unknown:
        raise ValueError(f"unknown lever(s) {sorted(unknown)}; choose from {sorted(VARIANT_FLAGS)}")
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset, **({"dropout": 0.0} if "nodrop" in flags else {}))
    model = Transformer(cfg).to(device).train()
    if "library" in flags:
        opt = make_optimizer(model, (0.9, 0.98), 1e-9)
        for group in opt.param_groups:
            group["lr"] = 1e-4
        kernel = "auto"
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                               **({"fused": True} if "fused" in flags else {"foreach": True}))
        kernel = "compiled" if "closs" in flags else "formula" if "formula" in flags else "chunked"
    obj = losses.TrainingObjective(model, loss_kernel=kernel)
    if "compile" in flags:
        obj = torch.compile(obj, dynamic=False)
    if "cudagraph" in flags:
        obj = torch.compile(obj, mode="reduce-overhead", dynamic=False)
    return cfg, model, opt, obj


def timed(variant: str, preset: str, tokens: int, steps: int, device, peak: float, profile_dir: Path | None):
    flags = set(variant.split("+"))
    cfg, model, opt, obj = build(variant, preset, device)
    src, tgt_in, tgt_out, src_l, tgt_l = train_batch(cfg.vocab_size, tokens, "cpu")
    src, tgt_in, tgt_out = (t.pin_memory().to(device, non_blocking=True) for t in (src, tgt_in, tgt_out))
    n_tokens = sum(tgt_l)
    flops = 3 * forward_flops(cfg, src_l, tgt_l)
    sdpa = contextlib.nullcontext
    if "cudnn" in flags:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sdpa = lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION])  # noqa: E731

    def step():
        with sdpa(), torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _nll = obj(src, tgt_in, tgt_out)
        (loss / n_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    _, warm_s = once(lambda: [step() for _ in range(3)], sync=torch.cuda.synchronize)
    torch.cuda.reset_peak_memory_stats()
    times = sorted(measure(step, repeats=steps, warmup=0, sync=torch.cuda.synchronize).times)
    dt = times[len(times) // 2]
    rec = {"variant": variant, "preset": preset, "tokens": n_tokens, "step_ms": dt * 1e3, "tok_s": n_tokens / dt,
           "tflops": flops / dt / 1e12, "mfu_measured": flops / dt / peak, "mfu_datasheet": flops / dt / 989e12,
           "peak_gb": torch.cuda.max_memory_allocated() / 1e9, "warmup_s": warm_s,
           "spread_ms": (times[-1] - times[0]) * 1e3}
    if profile_dir is not None:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                step()
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=60)
        name = variant.replace("+", "_")
        (profile_dir / f"profile-{preset}-{name}.txt").write_text(table)
        kernel_us = sum(e.self_device_time_total for e in prof.key_averages()
                        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
        rec["gpu_busy_ms_per_step"] = kernel_us / 2 / 1e3
        print(table[:6000], flush=True)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="eager,fused,fused+closs,compile+fused,library")
    ap.add_argument("--profile", default="", help="variants to profile (kernel table), comma-separated")
    ap.add_argument("--presets", default="base")
    ap.add_argument("--tokens", type=int, default=25_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    peak = peak_matmul(device)
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "peak_bf16_tflops": round(peak / 1e12, 1)}), flush=True)
    profiled = set(args.profile.split(",")) if args.profile else set()
    recs = []
    for preset in args.presets.split(","):
        for variant in args.variants.split(","):
            try:
                rec = timed(variant, preset, args.tokens, args.steps, device, peak,
                            args.out if variant in profiled else None)
            except Exception as e:  # a variant that fails is reported, the others still run
                rec = {"variant": variant, "preset": preset, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            torch.cuda.empty_cache()
            recs.append(rec)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in rec.items()}), flush=True)
            with open(args.out / "gpu_profile.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")
    print("\n| preset | variant | step ms | tokens/s | TFLOP/s | MFU (measured peak) | MFU (989) | peak GB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in recs:
        if "error" in r:
            print(f"| {r['preset']} | {r['variant']} | {r['error'][:80]} |")
        else:
            print(f"| {r['preset']} | {r['variant']} | {r['step_ms']:.1f} | {r['tok_s']:,.0f} | {r['tflops']:.0f} | "
                  f"{100 * r['mfu_measured']:.1f} % | {100 * r['mfu_datasheet']:.1f} % | {r['peak_gb']:.1f} |")


if __name__ == "__main__":
    main()
