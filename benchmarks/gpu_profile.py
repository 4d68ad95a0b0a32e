"""Where a GPU training step's time goes, and what each lever buys: base (or big) bf16 training steps timed under
several settings in one run, and a kernel-level profile of the chosen ones. Not a test (CI has no GPU):

    python benchmarks/gpu_profile.py --variants eager,fused,index,compile --profile eager,compile --out DIR

Variants (comma-separated; each builds on the defaults below, names combine with '+'):
    eager      what aiayn trained with before this script: foreach Adam, the real-token rows picked by a boolean
               mask on the GPU (a host sync), the chunked fused loss, no compiler
    fused      Adam(fused=True)
    index      the real-token rows picked by indices computed on the host and copied without blocking (no sync)
    closs      the loss as the reference formula under torch.compile (the fused kernels are the compiler's)
    compile    torch.compile of model + loss (aiayn train --compile)
    cudagraph  torch.compile(mode="reduce-overhead"): compiled and replayed as CUDA graphs
    cudnn      attention through the cuDNN kernel (padded batches need a mask, which flash refuses)
    nodrop     dropout off (what dropout costs, for the table only)
    mattn      attention as two batched matmuls with an fp32 softmax (model.scaled_dot_product_attention)
    bf16ln     LayerNorm returns bf16 under autocast (the residual stream in bf16; statistics still in fp32)
    library    whatever aiayn.train does now (the current defaults of the library)

Batches are the shared harness's shape (sentences of 25-30 tokens, ~25,000 target tokens) and FLOPs are counted as
benchmarks/gpu_check.py does (the harness's model FLOPs); MFU is against the bf16 matmul peak measured in the same
run and the H100 datasheet's 989 TFLOP/s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import gpu_check  # noqa: E402

from aiayn import losses  # noqa: E402
from aiayn import model as model_module  # noqa: E402
from aiayn.config import PAD_ID, ModelConfig  # noqa: E402
from aiayn.model import Transformer  # noqa: E402


def _mask_loss(model, src, tgt_in, tgt_out, eps, loss_fn):
    memory = model.encode(src)
    hidden = model.decode_hidden(tgt_in, memory, src.eq(PAD_ID))
    real = tgt_out.ne(PAD_ID)
    logits = model.output_logits(hidden[real])
    return loss_fn(logits, tgt_out[real], eps)


def _index_loss(model, src, tgt_in, tgt_out, index, eps, loss_fn):
    memory = model.encode(src)
    hidden = model.decode_hidden(tgt_in, memory, src.eq(PAD_ID))
    flat = hidden.reshape(-1, hidden.size(-1)).index_select(0, index)
    logits = model.output_logits(flat)
    return loss_fn(logits, tgt_out.reshape(-1).index_select(0, index), eps)


def _reference_loss(logits, target, eps):
    return losses.label_smoothed_nll_loss(torch.log_softmax(logits.float(), dim=-1), target, eps)


class Objective(torch.nn.Module):
    def __init__(self, model, index: bool, loss_fn):
        super().__init__()
        self.model, self.index, self.loss_fn = model, index, loss_fn

    def forward(self, src, tgt_in, tgt_out, index):
        eps = self.model.cfg.label_smoothing
        if self.index:
            return _index_loss(self.model, src, tgt_in, tgt_out, index, eps, self.loss_fn)
        return _mask_loss(self.model, src, tgt_in, tgt_out, eps, self.loss_fn)


def _bf16_layer_norm_forward(self, x, sublayer):
    y = (x + self.dropout(sublayer(x))).to(torch.bfloat16)
    with torch.autocast("cuda", enabled=False):
        return F.layer_norm(y, self.norm.normalized_shape, self.norm.weight.to(y.dtype), self.norm.bias.to(y.dtype),
                            self.norm.eps)


_ORIGINAL = {"attn": model_module.use_matmul_attention, "sublayer": model_module.SublayerConnection.forward}


def patch(flags: set) -> None:
    torch._dynamo.reset()
    model_module.use_matmul_attention = (lambda *a, **k: True) if "mattn" in flags else _ORIGINAL["attn"]
    model_module.SublayerConnection.forward = _bf16_layer_norm_forward if "bf16ln" in flags else _ORIGINAL["sublayer"]


def build(variant: str, preset: str, device):
    flags = set(variant.split("+"))
    patch(flags)
    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset)
    if "nodrop" in flags:
        cfg = ModelConfig.preset(preset, dropout=0.0)
    model = Transformer(cfg).to(device).train()
    if "library" in flags:
        from aiayn.train import make_optimizer
        opt = make_optimizer(model, (0.9, 0.98), 1e-9)
        for group in opt.param_groups:
            group["lr"] = 1e-4
        obj = losses.TrainingObjective(model)
        if "compile" in flags:
            obj = torch.compile(obj)
        return cfg, model, opt, lambda s, ti, to, idx: obj(s, ti, to)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                           **({"fused": True} if "fused" in flags else {"foreach": True}))
    loss_fn = losses.LabelSmoothedCrossEntropy.apply
    if "closs" in flags:
        loss_fn = torch.compile(_reference_loss, dynamic=True)
    obj = Objective(model, "index" in flags, loss_fn)
    if "compile" in flags:
        obj = torch.compile(obj, dynamic=False)
    if "cudagraph" in flags:
        obj = torch.compile(obj, mode="reduce-overhead", dynamic=False)
    return cfg, model, opt, obj


def timed(variant: str, preset: str, tokens: int, steps: int, device, peak: float, profile_dir: Path | None):
    flags = set(variant.split("+"))
    cfg, model, opt, obj = build(variant, preset, device)
    src, tgt_in, tgt_out, src_l, tgt_l = gpu_check.batch(cfg.vocab_size, tokens, "cpu")
    index = tgt_out.reshape(-1).ne(PAD_ID).nonzero().squeeze(1)
    src, tgt_in, tgt_out = (t.pin_memory().to(device, non_blocking=True) for t in (src, tgt_in, tgt_out))
    index = index.pin_memory().to(device, non_blocking=True)
    n_tokens = sum(tgt_l)
    flops = 3 * gpu_check.forward_flops(cfg, src_l, tgt_l)
    sdpa = contextlib.nullcontext
    if "cudnn" in flags:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sdpa = lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION])  # noqa: E731

    def step():
        with sdpa(), torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _nll = obj(src, tgt_in, tgt_out, index)
        (loss / n_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    times.sort()
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
    ap.add_argument("--variants", default="eager,fused,fused+index,fused+index+closs,compile+fused+index")
    ap.add_argument("--profile", default="", help="variants to profile (kernel table), comma-separated")
    ap.add_argument("--presets", default="base")
    ap.add_argument("--tokens", type=int, default=25_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    peak = gpu_check.peak_matmul(device)
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
