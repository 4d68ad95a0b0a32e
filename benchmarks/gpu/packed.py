"""Padded against packed batches (aiayn train --packed): training tokens/s and MFU of the same sentences in both
layouts, base and big, bf16, eager and compiled. Not a test (CI has no GPU); on a GPU machine:

    python -m benchmarks.gpu.packed --compile --out packed.jsonl

`--cpu` runs the same code on tiny shapes for a couple of steps (tests/test_packed.py runs it, so it cannot rot).
Batches are the shared harness's (benchmarks/workloads.py: sentences of 25-30 tokens, ~25,000 target tokens);
--min-len/--max-len widen the lengths (more padding in the padded layout). FLOPs are the harness's model FLOPs of the
real tokens, the same for both layouts, so MFU compares them directly (against the peak of a large matmul in the
training dtype measured in the same run, and for bf16 the datasheet's where the device is known: as
benchmarks/gpu/check.py). Each packed record also says which
attention ran ("varlen flash" or "padded rows": aiayn.training.packed) and how far its loss is from the padded one's on
the same batch without dropout (relative difference; bf16 rounding makes it ~1e-3, fp32 ~1e-7).
"""

from __future__ import annotations

import argparse
import json

import torch

from aiayn.config import ModelConfig
from aiayn.data.batching import Batch, pack
from aiayn.model import Transformer, count_parameters
from aiayn.training.losses import TrainingObjective
from aiayn.training.packed import use_varlen_attention
from benchmarks.gpu.check import DATASHEET_BF16, peak_matmul, sync, training_setup
from benchmarks.timing import measure
from benchmarks.workloads import forward_flops, train_batch


def attention_route(cfg: ModelConfig, device: torch.device, dtype: str) -> str:
    """Which packed attention the model's shapes take on this device (aiayn.training.packed.use_varlen_attention)."""
    q = torch.empty(1, cfg.n_heads, cfg.d_k, device=device, dtype=torch.bfloat16 if dtype == "bf16" else None)
    v = torch.empty(1, cfg.n_heads, cfg.d_v, device=device, dtype=q.dtype)
    return "varlen flash" if use_varlen_attention(q, v) else "padded rows"


def loss_gap(model: Transformer, padded: Batch, device: torch.device, dtype: str) -> float:
    """|packed loss - padded loss| / padded loss of one batch, dropout off."""
    objective = TrainingObjective(model.eval())
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
        a, _ = objective(*padded.inputs())
        b, _ = objective(*pack(padded).inputs())
    model.train()
    return abs(b.item() - a.item()) / abs(a.item())


def train_speed(preset: str, dtype: str, layout: str, compile_: bool, args, device: torch.device) -> dict:
    cfg, model, objective, opt = training_setup(preset, device, compile_)
    src, tgt_in, tgt_out, src_l, tgt_l = train_batch(cfg.vocab_size, args.tokens, "cpu", lo=args.min_len,
                                                     hi=args.max_len)
    padded = Batch(src, tgt_in, tgt_out, sum(src_l), sum(tgt_l))
    batch = (pack(padded) if layout == "packed" else padded).to(device)
    n_tokens = sum(tgt_l)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss, _ = objective(*batch.inputs())
        (loss / n_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    dt = measure(step, repeats=1, warmup=args.warmup, number=args.steps, sync=lambda: sync(device)).mean
    rec = {"what": "train", "preset": preset, "dtype": dtype, "layout": layout, "compile": compile_,
           "batch_tgt_tokens": n_tokens, "sentences": len(tgt_l), "padded_tgt_slots": tgt_in.numel(),
           "params": count_parameters(model), "step_s": dt, "tgt_tok_s": n_tokens / dt,
           "tflops": 3 * forward_flops(cfg, src_l, tgt_l) / dt / 1e12}
    if layout == "packed":
        rec["attention"] = attention_route(cfg, device, dtype)
        rec["loss_vs_padded"] = loss_gap(model, padded.to(device), device, dtype)
    if device.type == "cuda":
        rec["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="smoke mode: CPU, tiny preset, fp32, 2 steps, no compile")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--presets", default="base,big")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--tokens", type=int, default=25_000, help="target tokens per training batch (paper: 25k)")
    ap.add_argument("--min-len", type=int, default=25, help="shortest sentence, EOS included")
    ap.add_argument("--max-len", type=int, default=30, help="longest sentence, EOS included")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per setting")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--compile", action="store_true", help="also measure torch.compile")
    ap.add_argument("--out", help="append JSON lines here")
    args = ap.parse_args()
    if args.cpu:
        args.device, args.presets, args.dtype, args.tokens, args.steps, args.warmup, args.compile = (
            "cpu", "tiny", "fp32", 256, 2, 1, False)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = peak_matmul(device, torch.bfloat16 if args.dtype == "bf16" else torch.float32,
                       n=8192 if device.type == "cuda" else 512)  # in the training dtype
    sheet = next((v for k, v in DATASHEET_BF16.items() if k in name), None) if args.dtype == "bf16" else None
    recs = [{"what": "device", "name": name, "torch": torch.__version__},
            {"what": f"peak_{args.dtype}_matmul", "tflops": peak / 1e12, "datasheet_tflops": sheet and sheet / 1e12}]
    for r in recs:
        print(json.dumps(r), flush=True)
    for preset in args.presets.split(","):
        for compile_ in (False, True) if args.compile else (False,):
            for layout in ("padded", "packed"):
                try:
                    rec = train_speed(preset, args.dtype, layout, compile_, args, device)
                    rec["mfu_measured_peak"] = rec["tflops"] * 1e12 / peak
                    if sheet:
                        rec["mfu_datasheet"] = rec["tflops"] * 1e12 / sheet
                except Exception as e:  # noqa: BLE001 (one failing setting is reported, the others still run)
                    rec = {"what": "train", "preset": preset, "layout": layout, "compile": compile_,
                           "error": f"{type(e).__name__}: {str(e)[:300]}"}
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                recs.append(rec)
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in rec.items()}), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
    print("\n| preset | layout | compile | s/step | target tokens/s | TFLOP/s | MFU measured peak | attention |")
    print("|---|---|---|---|---|---|---|---|")
    for r in recs[2:]:
        if "error" in r:
            print(f"| {r['preset']} | {r['layout']} | {r['compile']} | {r['error'][:80]} |")
        else:
            print(f"| {r['preset']} | {r['layout']} | {r['compile']} | {r['step_s']:.3f} | {r['tgt_tok_s']:,.0f} | "
                  f"{r['tflops']:.1f} | {100 * r['mfu_measured_peak']:.1f} % | {r.get('attention', 'padded SDPA')} |")


if __name__ == "__main__":
    main()
