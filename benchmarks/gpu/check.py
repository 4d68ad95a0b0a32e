"""The CUDA path, measured on one GPU: base-model training tokens/s and bf16 MFU, decoding speed, and which attention
kernel runs. Not a test (CI has no GPU); run it on a GPU machine:

    python -m benchmarks.gpu.check --out results.jsonl

MFU = model FLOPs per second / peak. Model FLOPs are counted as the shared peer harness does
(benchmarks/workloads.py: forward_flops): 2 FLOPs per matmul weight per token (the tied output projection once, on the
target side), plus 4*d*n*m per attention (scores and context, causal not halved); training = 3 x forward. The peak
is measured in the same run (a large bf16 matmul) and also given as the datasheet number (H100 SXM dense bf16:
989 TFLOP/s) when the device is an H100.
"""

from __future__ import annotations

import argparse
import json

import torch

from aiayn.config import ModelConfig
from aiayn.decoding.inference import decoding_copy
from aiayn.decoding.search import SearchConfig, beam_search, greedy_search
from aiayn.decoding.static_search import StaticDecoder
from aiayn.model import Transformer, count_parameters
from aiayn.runtime import attention_without_shape_plans
from aiayn.training.losses import TrainingObjective
from aiayn.training.train import make_optimizer
from benchmarks.timing import measure
from benchmarks.workloads import forward_flops, train_batch

DATASHEET_BF16 = {"H100": 989e12, "H200": 989e12}
DATASHEET_TF32 = {"H100": 494.7e12, "H200": 494.7e12}  # dense TF32 tensor-core peak (SXM)


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_matmul(device, dtype=torch.bfloat16, n: int = 8192, reps: int = 20) -> float:
    """FLOP/s of a large (n x n) matmul: the peak MFU is measured against."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    t = measure(lambda: a @ b, repeats=1, warmup=3, number=reps, sync=lambda: sync(device))
    return 2 * n**3 / t.best


def training_setup(preset: str, device, compile_: bool):
    """(config, model, objective, optimizer) of a preset as `aiayn train` builds them, seeded, at lr 1e-4."""
    attention_without_shape_plans(device)  # as aiayn.runtime.setup_runtime does
    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset)
    model = Transformer(cfg).to(device).train()
    objective = torch.compile(TrainingObjective(model)) if compile_ else TrainingObjective(model)
    opt = make_optimizer(model, (0.9, 0.98), 1e-9)  # what aiayn train uses: fused Adam on CUDA
    for group in opt.param_groups:
        group["lr"] = 1e-4
    return cfg, model, objective, opt


def train_speed(preset: str, dtype: str, tokens: int, steps: int, device, compile_: bool) -> dict:
    cfg, model, objective, opt = training_setup(preset, device, compile_)
    src, tgt_in, tgt_out, src_l, tgt_l = train_batch(cfg.vocab_size, tokens, device)
    n_tokens = sum(tgt_l)
    flops = 3 * forward_flops(cfg, src_l, tgt_l)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss, _ = objective(src, tgt_in, tgt_out)
        (loss / n_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = measure(step, repeats=1, warmup=3, number=steps, sync=lambda: sync(device))
    dt = t.mean
    rec = {"what": "train", "preset": preset, "dtype": dtype, "compile": compile_, "batch_tgt_tokens": n_tokens,
           "params": count_parameters(model), "step_s": dt, "tgt_tok_s": n_tokens / dt, "tflops": flops / dt / 1e12}
    if device.type == "cuda":
        rec["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return rec


def decoder(preset: str, dtype: str, beam: int, sents: int, n_tokens: int, device, graphed: bool = False):
    """A call that decodes `sents` random sources of 23-27 tokens, every hypothesis forced to n_tokens words.
    graphed: by aiayn.decoding.static_search's fixed-shape steps (on CUDA one captured graph replayed per step), not
    aiayn.decoding.search's."""
    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset)
    attention_without_shape_plans(device)  # as aiayn.decoding.inference.load does
    model = decoding_copy(Transformer(cfg).to(device), dtype)
    src = train_batch(cfg.vocab_size, sents * 27, device, seed=1, lo=23, hi=27)[0][:sents]
    search = SearchConfig(beam=beam, max_len_a=0.0, max_len_b=n_tokens, min_len=n_tokens)
    if graphed:
        static = StaticDecoder(model, max_len=n_tokens)
        return lambda: static.search(src, search)
    run = greedy_search if beam == 1 else beam_search
    return lambda: run(model, src, search)


def decode_speed(preset: str, dtype: str, beam: int, sents: int, n_tokens: int, device, graphed: bool = False) -> dict:
    call = decoder(preset, dtype, beam, sents, n_tokens, device, graphed)
    with torch.inference_mode():
        dt = measure(call, repeats=1, warmup=1, number=3, sync=lambda: sync(device)).mean
    return {"what": "decode", "preset": preset, "dtype": dtype, "beam": beam, "sents": sents, "out_tokens": n_tokens,
            "graphed": graphed, "batch_s": dt, "sent_s": sents / dt}


def attention_kernel(device) -> dict:
    """Whether the model's training forward runs under the flash kernel alone (bf16, CUDA)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = ModelConfig.preset("base")
    model = Transformer(cfg).to(device).train()
    src, tgt_in, tgt_out, _, _ = train_batch(cfg.vocab_size, 2048, device)
    out = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([backend]), torch.autocast(device.type, dtype=torch.bfloat16):
                model(src, tgt_in).float().sum().backward()
            out[name] = "ok"
        except RuntimeError as e:
            out[name] = f"unavailable: {str(e).splitlines()[0][:100]}"
    return {"what": "attention_kernel", **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=25_000, help="target tokens per training batch (paper: 25k)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="also measure torch.compile")
    ap.add_argument("--out", help="append JSON lines here")
    args = ap.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    recs = [{"what": "device", "name": name, "torch": torch.__version__}]
    peak = peak_matmul(device)
    sheet = next((v for k, v in DATASHEET_BF16.items() if k in name), None)
    recs.append({"what": "peak_bf16_matmul", "tflops": peak / 1e12, "datasheet_tflops": sheet and sheet / 1e12})
    recs.append(attention_kernel(device))
    for preset, dtype, comp in [("base", "bf16", False), ("base", "fp32", False), ("big", "bf16", False)] + (
            [("base", "bf16", True)] if args.compile else []):
        r = train_speed(preset, dtype, args.tokens, args.steps, device, comp)
        r["mfu_measured_peak"] = r["tflops"] * 1e12 / peak
        if sheet:
            r["mfu_datasheet"] = r["tflops"] * 1e12 / sheet
        recs.append(r)
    for dtype in ("bf16", "fp32"):
        for beam in (4, 1):
            recs.append(decode_speed("base", dtype, beam, 64, 30, device))
    for r in recs:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
