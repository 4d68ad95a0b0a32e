"""The CUDA path, measured on one GPU: base-model training tokens/s and bf16 MFU, decoding speed, and which attention
kernel runs. Not a test (CI has no GPU); run it on a GPU machine:

    python benchmarks/gpu_check.py --out results.jsonl

MFU = model FLOPs per second / peak. Model FLOPs are counted as the shared peer harness does
(../shared/bench/peers/common.py): 2 FLOPs per matmul weight per token (the tied output projection once, on the
target side), plus 4*d*n*m per attention (scores and context, causal not halved); training = 3 x forward. The peak
is measured in the same run (a large bf16 matmul) and also given as the datasheet number (H100 SXM dense bf16:
989 TFLOP/s) when the device is an H100.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig  # noqa: E402
from aiayn.fast import inference_copy  # noqa: E402
from aiayn.losses import TrainingObjective  # noqa: E402
from aiayn.model import Transformer, count_parameters  # noqa: E402
from aiayn.search import SearchConfig, beam_search, greedy_search  # noqa: E402
from aiayn.train import make_optimizer  # noqa: E402

DATASHEET_BF16 = {"H100": 989e12, "H200": 989e12}


def forward_flops(cfg: ModelConfig, src_lens: list[int], tgt_lens: list[int]) -> float:
    d, f = cfg.d_model, cfg.d_ff
    per_src = cfg.n_enc_layers * (4 * d * d + 2 * d * f) + cfg.n_dec_layers * 2 * d * d
    per_tgt = cfg.n_dec_layers * (6 * d * d + 2 * d * f) + d * cfg.vocab_size
    total = 0.0
    for s, t in zip(src_lens, tgt_lens):
        total += 2 * per_src * s + 2 * per_tgt * t
        total += 4 * d * (cfg.n_enc_layers * s * s + cfg.n_dec_layers * (t * t + t * s))
    return total


def batch(vocab: int, tokens: int, device, seed: int = 0, lo: int = 25, hi: int = 30):
    """Random sentences (lengths uniform in [lo, hi], EOS included) until `tokens` target tokens."""
    g = torch.Generator().manual_seed(seed)
    src_l, tgt_l = [], []
    while sum(tgt_l) < tokens:
        src_l.append(int(torch.randint(lo, hi + 1, (1,), generator=g)))
        tgt_l.append(int(torch.randint(lo, hi + 1, (1,), generator=g)))
    B, S, T = len(src_l), max(src_l), max(tgt_l)
    src = torch.full((B, S), PAD_ID)
    tgt_in = torch.full((B, T), PAD_ID)
    tgt_out = torch.full((B, T), PAD_ID)
    for i, (s, t) in enumerate(zip(src_l, tgt_l)):
        src[i, : s - 1] = torch.randint(4, vocab, (s - 1,), generator=g)
        src[i, s - 1] = EOS_ID
        words = torch.randint(4, vocab, (t - 1,), generator=g)
        tgt_in[i, 0], tgt_in[i, 1:t] = BOS_ID, words
        tgt_out[i, : t - 1], tgt_out[i, t - 1] = words, EOS_ID
    return src.to(device), tgt_in.to(device), tgt_out.to(device), src_l, tgt_l


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def peak_matmul(device, dtype=torch.bfloat16, n: int = 8192, reps: int = 20) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t)


def train_speed(preset: str, dtype: str, tokens: int, steps: int, device, compile_: bool) -> dict:
    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset)
    model = Transformer(cfg).to(device).train()
    objective = torch.compile(TrainingObjective(model)) if compile_ else TrainingObjective(model)
    opt = make_optimizer(model, (0.9, 0.98), 1e-9)  # what aiayn train uses: fused Adam on CUDA
    for group in opt.param_groups:
        group["lr"] = 1e-4
    src, tgt_in, tgt_out, src_l, tgt_l = batch(cfg.vocab_size, tokens, device)
    n_tokens = sum(tgt_l)
    flops = 3 * forward_flops(cfg, src_l, tgt_l)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss, _ = objective(src, tgt_in, tgt_out)
        (loss / n_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    dt = (time.perf_counter() - t) / steps
    rec = {"what": "train", "preset": preset, "dtype": dtype, "compile": compile_, "batch_tgt_tokens": n_tokens,
           "params": count_parameters(model), "step_s": dt, "tgt_tok_s": n_tokens / dt, "tflops": flops / dt / 1e12}
    if device.type == "cuda":
        rec["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return rec


def decode_speed(preset: str, dtype: str, beam: int, sents: int, n_tokens: int, device) -> dict:
    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset)
    model = inference_copy(Transformer(cfg).to(device), dtype)
    src = batch(cfg.vocab_size, sents * 27, device, seed=1, lo=23, hi=27)[0][:sents]
    search = SearchConfig(beam=beam, max_len_a=0.0, max_len_b=n_tokens, min_len=n_tokens)
    run = greedy_search if beam == 1 else beam_search
    with torch.inference_mode():
        run(model, src, search)
        sync(device)
        t = time.perf_counter()
        reps = 3
        for _ in range(reps):
            run(model, src, search)
        sync(device)
    dt = (time.perf_counter() - t) / reps
    return {"what": "decode", "preset": preset, "dtype": dtype, "beam": beam, "sents": sents, "out_tokens": n_tokens,
            "batch_s": dt, "sent_s": sents / dt}


def attention_kernel(device) -> dict:
    """Whether the model's training forward runs under the flash kernel alone (bf16, CUDA)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = ModelConfig.preset("base")
    model = Transformer(cfg).to(device).train()
    src, tgt_in, tgt_out, _, _ = batch(cfg.vocab_size, 2048, device)
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
