"""aiayn beside its peers on one GPU, in one run: training (base and big, bf16, the same synthetic batches) and decoding
(greedy and beam 4, base). Not a test (CI has no GPU); on a GPU machine, from the repository root:

    python -m benchmarks.gpu.peers --out peers.jsonl [--compile] [--profile profile.txt]

Peers, each at its own documented defaults, built here from its public API (random weights; nothing is downloaded):
  hf_marian  transformers' MarianMTModel (post-norm, sinusoidal positions, tied embeddings; its default SDPA attention)
             trained as HF's Trainer does with bf16=True: autocast, eager (the Trainer compiles only when asked);
             decoding: `generate` with the weights in bf16.
  torch_nn   torch.nn.Transformer (batch_first, post-norm) with tied embeddings and sinusoidal positions, autocast.
Every implementation gets the same batches (benchmarks/workloads.py: sentences of 25-30 tokens, ~25,000 target
tokens), the same loss (label smoothing 0.1, summed over real tokens) and the same optimizer (torch's fused Adam).
aiayn runs as `aiayn train` does: padded batches, and packed ones (`--packed`: attention by varlen flash where the
GPU has it), eager, and compiled with --compile. FLOPs are the harness's model FLOPs of the real tokens, the same for
every implementation (benchmarks/workloads.py: forward_flops; training = 3x forward); MFU is against the datasheet's
dense bf16 peak (H100/H200: 989 TFLOP/s) and the peak of a large bf16 matmul measured in the same run. --dtype fp16
trains every implementation as HF's Trainer does with fp16=True: float16 autocast and torch's GradScaler (dynamic loss
scaling), MFU against the same datasheet figure (fp16's dense tensor-core rate equals bf16's on H100/H200) and a
measured fp16 matmul; it has no decoding cells (aiayn decodes in fp32, bf16 or int8). --dtype fp32 keeps fp32 matmuls
(TF32 off, torch's default) and reports MFU against the measured fp32 matmul peak; --dtype fp32 --tf32 runs every
implementation's fp32 matmuls in TF32, as `aiayn train` does in fp32 on a CUDA GPU (aiayn.runtime.configure_process),
with MFU against the datasheet's dense TF32 peak (H100/H200: 494.7 TFLOP/s). Decoding is
at a forced length (every hypothesis exactly --n-tokens steps, EOS banned before), so every implementation does the
same work. --vary-shapes gives every step a batch of a new shape, as real data does (the synthetic batch of one
shape hides what a kernel pays per new shape: cuDNN's attention builds a plan for each, which aiayn leaves out on
GPUs). Each cell is one record in --out as soon as it is measured; a cell that fails is reported and the rest
still run. `--cpu` runs every cell on tiny shapes, fp32, for two steps (tests/test_gpu_peers.py runs it).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from aiayn.config import PAD_ID, ModelConfig
from aiayn.data.batching import Batch, pack
from aiayn.model import count_parameters, sinusoidal_positions
from aiayn.runtime import attention_without_shape_plans, configure_process
from benchmarks.gpu.check import (
    DATASHEET_BF16,
    DATASHEET_TF32,
    decode_speed,
    decoder,
    peak_matmul,
    sync,
    training_setup,
)
from benchmarks.timing import measure
from benchmarks.workloads import forward_flops, train_batch


class TorchNN(nn.Module):
    """torch.nn.Transformer with what it leaves to its user: embeddings (scaled by sqrt(d), tied three ways),
    sinusoidal positions, embedding dropout, the output projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        self.register_buffer("pe", sinusoidal_positions(512, cfg.d_model), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.core = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_enc_layers, cfg.n_dec_layers, cfg.d_ff,
                                   cfg.dropout, batch_first=True)

    def _in(self, ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.embed(ids) * math.sqrt(self.d) + self.pe[: ids.shape[1]])

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device)
        src_pad, tgt_pad = src.eq(PAD_ID), tgt_in.eq(PAD_ID)
        h = self.core(self._in(src), self._in(tgt_in), tgt_mask=causal, src_key_padding_mask=src_pad,
                      tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True)
        return F.linear(h, self.embed.weight)


def marian(cfg: ModelConfig):
    """transformers' MarianMTModel in the preset's shape, as the time-to-BLEU peer builds it."""
    from benchmarks.peers.hf_seq2seq import marian as build

    return build({"d_model": cfg.d_model, "enc_layers": cfg.n_enc_layers, "dec_layers": cfg.n_dec_layers,
                  "heads": cfg.n_heads, "d_ff": cfg.d_ff, "dropout": cfg.dropout}, cfg.vocab_size)


def peer_logits(impl: str, model: nn.Module, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    if impl == "hf_marian":
        return model(input_ids=src, attention_mask=src.ne(PAD_ID), decoder_input_ids=tgt_in,
                     decoder_attention_mask=tgt_in.ne(PAD_ID)).logits
    return model(src, tgt_in)


def shared_batches(vocab: int, args) -> list[tuple]:
    """The batches every implementation trains on, warm-up first: one batch again and again (the harness's: sentences
    of 25-30 tokens), or with --vary-shapes a new shape at every step, as real data gives (lengths from 5 to ~70,
    the sentence count following), each (src, tgt_in, tgt_out, source lengths, target lengths) on the CPU."""
    n = args.warmup + args.steps
    if not args.vary_shapes:
        return [train_batch(vocab, args.tokens, "cpu")] * n
    spans = [(5 + (7 * i) % 40, 10 + (7 * i) % 40 + (3 * i) % 20) for i in range(n)]
    return [train_batch(vocab, args.tokens, "cpu", seed=i, lo=lo, hi=hi) for i, (lo, hi) in enumerate(spans)]


AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def train_step(loss_fn, tgt_tokens: list[int], opt, device: torch.device, dtype: str):
    """step(i): one update on batch i, as every implementation takes it: the summed loss (under bf16 or fp16
    autocast) over batch i's target tokens, backward, the optimizer's step; in fp16 through a GradScaler."""
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "fp16")

    def step(i: int) -> None:
        with torch.autocast(device.type, dtype=AUTOCAST.get(dtype, torch.bfloat16), enabled=dtype in AUTOCAST):
            loss = loss_fn(i)
        scaler.scale(loss / tgt_tokens[i]).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    return step


def train_cell(impl: str, preset: str, compile_: bool, args, device: torch.device) -> dict:
    """One implementation's training steps on the shared batches: seconds a step, target tokens/s, TFLOP/s, peak
    memory. aiayn runs as `aiayn train` does (cuDNN's attention left out on a GPU: aiayn.runtime); the peers with
    torch's default choice of attention kernels."""
    batches = shared_batches(ModelConfig.preset(preset).vocab_size, args)
    torch.backends.cuda.enable_cudnn_sdp(True)  # torch's default, for the peers
    if impl.startswith("aiayn"):
        attention_without_shape_plans(device)
        cfg, model, objective, opt = training_setup(preset, device, compile_)
        inputs = []
        for src, tgt_in, tgt_out, src_l, tgt_l in batches:
            padded = Batch(src, tgt_in, tgt_out, sum(src_l), sum(tgt_l))
            inputs.append((pack(padded) if impl == "aiayn packed" else padded).to(device).inputs())

        def loss_fn(i):
            return objective(*inputs[i])[0]
    else:
        torch.manual_seed(0)
        cfg = ModelConfig.preset(preset)
        model = (marian(cfg) if impl == "hf_marian" else TorchNN(cfg)).to(device).train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                               **({"fused": True} if device.type == "cuda" else {}))
        forward = torch.compile(model) if compile_ else model
        on_device = [(s.to(device), ti.to(device), to.to(device)) for s, ti, to, _, _ in batches]

        def loss_fn(i):
            s, ti, to = on_device[i]
            logits = peer_logits(impl, forward, s, ti)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), to.reshape(-1), ignore_index=PAD_ID,
                                   label_smoothing=0.1, reduction="sum")

    step = train_step(loss_fn, [sum(b[4]) for b in batches], opt, device, args.dtype)
    t0 = time.perf_counter()
    for i in range(args.warmup):
        step(i)
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t1 = time.perf_counter()
    for i in range(args.warmup, len(batches)):
        step(i)
    sync(device)
    dt = (time.perf_counter() - t1) / args.steps
    timed = batches[args.warmup:]
    n_tokens = sum(sum(b[4]) for b in timed) / args.steps
    flops = sum(3 * forward_flops(cfg, b[3], b[4]) for b in timed) / args.steps
    rec = {"what": "train", "impl": impl, "preset": preset, "dtype": args.dtype, "compile": compile_,
           "tf32": torch.backends.cuda.matmul.allow_tf32 and device.type == "cuda",
           "shapes": "varied" if args.vary_shapes else "fixed", "batch_tgt_tokens": n_tokens,
           "sentences": sum(len(b[4]) for b in timed) / args.steps, "params": count_parameters(model), "step_s": dt,
           "tgt_tok_s": n_tokens / dt, "tflops": flops / dt / 1e12, "wall_s": time.perf_counter() - t0}
    if device.type == "cuda":
        rec["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return rec


def hf_decoder(preset: str, beam: int, args, device: torch.device):
    """A call of HF generate on the same sources as aiayn's decoder, forced to the same length."""
    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset)
    model = marian(cfg).to(device).eval()
    if args.dtype == "bf16":
        model = model.to(torch.bfloat16)
    src = train_batch(cfg.vocab_size, args.sents * 27, device, seed=1, lo=23, hi=27)[0][: args.sents]
    n = args.n_tokens
    kw = dict(input_ids=src, attention_mask=src.ne(PAD_ID), num_beams=beam, do_sample=False, min_new_tokens=n,
              max_new_tokens=n, length_penalty=0.6, early_stopping=False, num_return_sequences=1)
    return lambda: model.generate(**kw)


def hf_decode_cell(preset: str, beam: int, args, device: torch.device) -> dict:
    call = hf_decoder(preset, beam, args, device)
    with torch.inference_mode():
        dt = measure(call, repeats=1, warmup=1, number=3, sync=lambda: sync(device)).mean
    return {"what": "decode", "impl": "hf_marian", "preset": preset, "dtype": args.dtype, "beam": beam,
            "sents": args.sents, "out_tokens": args.n_tokens, "batch_s": dt, "sent_s": args.sents / dt}


def profile_decode(preset: str, args, device: torch.device, path: str) -> None:
    """One greedy batch of aiayn and of HF generate under torch.profiler: kernels launched, GPU busy time against
    the wall time (a step that waits on the CPU's launches shows a gap), and each one's busiest operators."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    parts = []
    for who in ("aiayn", "hf_marian"):
        torch.backends.cuda.enable_cudnn_sdp(True)
        call = (decoder(preset, args.dtype, 1, args.sents, args.n_tokens, device) if who == "aiayn"
                else hf_decoder(preset, 1, args, device))
        with torch.inference_mode():
            call()
            sync(device)
            t0 = time.perf_counter()
            with profile(activities=acts) as prof:
                call()
                sync(device)
            wall = time.perf_counter() - t0
        kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
        busy = sum(e.device_time for e in kernels) / 1e3  # microseconds -> ms
        parts.append(f"# {who}: greedy, {args.sents} sentences x {args.n_tokens} tokens, {args.dtype}: "
                     f"{len(kernels)} kernels, {busy:.1f} ms of them, {1e3 * wall:.1f} ms wall (profiled)\n"
                     + prof.key_averages().table(sort_by=key, row_limit=20, max_name_column_width=60))
    with open(path, "w") as f:
        f.write("\n\n".join(parts))


def profile_step(preset: str, args, device: torch.device, path: str) -> None:
    """aiayn's packed eager step under torch.profiler, its time by kind of work (benchmarks/gpu/profile_step.py)."""
    from benchmarks.gpu.profile_step import profile_cell  # that module imports this one

    _, text = profile_cell(preset, args.dtype, "packed", False, args, device)
    with open(path, "w") as f:
        f.write(text + "\n")


def order(impl: str) -> int:
    """Compiled cells: aiayn packed first (the fastest layout where varlen flash runs), then padded, then peers."""
    return {"aiayn packed": 0, "aiayn": 1}.get(impl, 2)


def fmt(r: dict) -> str:
    return json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()})


def table(recs: list[dict], sheet: float | None, peak: float) -> str:
    """Markdown tables of the cells; MFU against the datasheet where there is one (bf16, fp16; fp32 with TF32), else
    against the measured matmul peak (fp32)."""
    lines = ["| preset | implementation | compiled | shapes | s/step | target tokens/s | TFLOP/s | "
             f"MFU (of {f'{sheet / 1e12:.1f} TFLOP/s, datasheet' if sheet else 'the measured matmul peak'}) | "
             "peak GPU memory | vs fastest peer |", "|---|---|---|---|---|---|---|---|---|---|"]
    train = [r for r in recs if r.get("what") == "train"]
    for preset in dict.fromkeys(r["preset"] for r in train):
        rows = [r for r in train if r["preset"] == preset]
        peers = [r["tgt_tok_s"] for r in rows if "error" not in r and not r["impl"].startswith("aiayn")]
        best = max(peers, default=None)
        for r in rows:
            if "error" in r:
                lines.append(f"| {preset} | {r['impl']} | {r['compile']} | | {r['error'][:90]} | | | | | |")
                continue
            mfu = f"{100 * r['tflops'] * 1e12 / (sheet or peak):.1f} %"
            mem = f"{r['peak_mem_gb']:.1f} GB" if "peak_mem_gb" in r else ""
            ratio = f"{r['tgt_tok_s'] / best:.2f}x" if best else ""
            lines.append(f"| {preset} | {r['impl']} | {r['compile']} | {r.get('shapes', 'fixed')} | "
                         f"{r['step_s']:.4f} | {r['tgt_tok_s']:,.0f} | {r['tflops']:.1f} | {mfu} | {mem} | {ratio} |")
    dec = [r for r in recs if r.get("what") == "decode"]
    if dec:
        lines += ["", "| preset | implementation | beam | sentences | tokens each | sentences/s | vs HF generate |",
                  "|---|---|---|---|---|---|---|"]
        for r in dec:
            if "error" in r:
                lines.append(f"| {r['preset']} | {r['impl']} | {r['beam']} | {r['error'][:90]} | | | |")
                continue
            hf = next((h["sent_s"] for h in dec if h["impl"] == "hf_marian" and h["beam"] == r["beam"]
                       and "error" not in h), None)
            ratio = f"{r['sent_s'] / hf:.2f}x" if hf else ""
            lines.append(f"| {r['preset']} | {r['impl']} | {r['beam']} | {r['sents']} | {r['out_tokens']} | "
                         f"{r['sent_s']:,.1f} | {ratio} |")
    return "\n".join(lines)


def train_record(impl: str, preset: str, compile_: bool, args, device: torch.device, sheet: float | None,
                 peak: float) -> dict:
    """train_cell's record with its MFU, or the error that stopped it (one failing cell does not stop the others)."""
    try:
        rec = train_cell(impl, preset, compile_, args, device)
        if sheet:
            rec["mfu_datasheet"] = rec["tflops"] * 1e12 / sheet
        rec["mfu_measured_peak"] = rec["tflops"] * 1e12 / peak
    except Exception as e:  # noqa: BLE001
        rec = {"what": "train", "impl": impl, "preset": preset, "compile": compile_,
               "error": f"{type(e).__name__}: {str(e)[:300]}"}
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec


def decode_record(who: str, preset: str, beam: int, args, device: torch.device) -> dict:
    """One decoding cell (aiayn or HF generate), or the error that stopped it."""
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)  # torch's default (aiayn's decode_speed takes it out)
        if who == "aiayn":
            return {**decode_speed(preset, args.dtype, beam, args.sents, args.n_tokens, device), "impl": "aiayn"}
        return hf_decode_cell(preset, beam, args, device)
    except Exception as e:  # noqa: BLE001
        return {"what": "decode", "impl": who, "preset": preset, "beam": beam,
                "error": f"{type(e).__name__}: {str(e)[:300]}"}


def profiles(preset: str, args, device: torch.device, decodes: list[int]) -> None:
    """The profiles asked for (--profile, --profile-decode); a failing one is reported and the run goes on."""
    wanted = [(args.profile, profile_step, "profile"),
              (args.profile_decode if decodes else None, profile_decode, "decoding profile")]
    for path, write, what in wanted:
        if path:
            try:
                write(preset, args, device, path)
            except Exception as e:  # noqa: BLE001
                print(f"{what} failed: {type(e).__name__}: {e}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="smoke mode: CPU, tiny preset, fp32, 2 steps, no compile")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--presets", default="base,big")
    ap.add_argument("--impls", default="aiayn,aiayn packed,hf_marian,torch_nn")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"),
                    help="fp16: float16 autocast with a GradScaler (HF Trainer's fp16=True); no decoding cells")
    ap.add_argument("--tf32", action="store_true", help="with --dtype fp32: every implementation's fp32 matmuls in "
                    "TF32 on CUDA (what `aiayn train` does in fp32 there); without it TF32 stays off")
    ap.add_argument("--tokens", type=int, default=25_000, help="target tokens per training batch (paper: 25k)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per cell")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--vary-shapes", action="store_true", help="a new batch shape at every step (real data's case)")
    ap.add_argument("--compile", action="store_true", help="then aiayn compiled (padded and packed)")
    ap.add_argument("--compile-peers", action="store_true", help="then the peers compiled too")
    ap.add_argument("--beams", default="1,4", help="decoding cells (empty: none)")
    ap.add_argument("--sents", type=int, default=64, help="sentences per decoding batch")
    ap.add_argument("--n-tokens", type=int, default=30, help="forced output length")
    ap.add_argument("--profile", help="write the profile of aiayn's packed eager step (first preset) here")
    ap.add_argument("--profile-decode", help="write the profiles of aiayn's and HF's greedy decoding here")
    ap.add_argument("--out", help="append JSON lines here")
    args = ap.parse_args()
    if args.tf32 and args.dtype != "fp32":
        ap.error(f"--tf32 is for --dtype fp32 (--dtype {args.dtype} multiplies in {args.dtype} already)")
    if args.cpu:
        args.device, args.presets, args.tokens, args.steps, args.warmup = "cpu", "tiny", 256, 2, 1
        args.dtype = "fp16" if args.dtype == "fp16" else "fp32"  # CPU autocast has fp16; bf16 is emulated on many CPUs
        args.compile = args.compile_peers = False
        args.sents, args.n_tokens = 4, 5
    device = torch.device(args.device)
    configure_process(device=device, tf32=args.tf32)  # on CUDA: TF32 matmuls on or off for every cell (and the peak)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = peak_matmul(device, AUTOCAST.get(args.dtype, torch.float32), n=8192 if device.type == "cuda" else 512)
    # fp16's dense tensor-core rate is bf16's on the GPUs of the datasheet table; fp32 has a datasheet MFU in TF32 only
    sheets = DATASHEET_BF16 if args.dtype in AUTOCAST else DATASHEET_TF32 if args.tf32 else {}
    sheet = next((v for k, v in sheets.items() if k in name), None)
    recs: list[dict] = []

    def emit(rec: dict) -> None:
        recs.append(rec)
        print(fmt(rec), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")

    import transformers

    emit({"what": "device", "name": name, "torch": torch.__version__, "transformers": transformers.__version__})
    emit({"what": f"peak_{args.dtype}_matmul", "tf32": torch.backends.cuda.matmul.allow_tf32 and device.type == "cuda",
          "tflops": peak / 1e12, "datasheet_tflops": sheet and sheet / 1e12})
    impls = args.impls.split(",")
    cells = [(impl, preset, False) for preset in args.presets.split(",") for impl in impls]
    decodes = [int(b) for b in args.beams.split(",") if b] if args.dtype != "fp16" else []
    later = [(impl, preset, True) for preset in args.presets.split(",") for impl in sorted(impls, key=order)
             if (args.compile and impl.startswith("aiayn")) or (args.compile_peers and not impl.startswith("aiayn"))]
    for impl, preset, compile_ in cells:
        emit(train_record(impl, preset, compile_, args, device, sheet, peak))
    for beam in decodes:
        for who in ("aiayn", "hf_marian"):
            emit(decode_record(who, args.presets.split(",")[0], beam, args, device))
    profiles(args.presets.split(",")[0], args, device, decodes)  # eager, before compiling (which may outlast a limit)
    for impl, preset, compile_ in later:
        emit(train_record(impl, preset, compile_, args, device, sheet, peak))
    print()
    print(table(recs, sheet, peak), flush=True)


if __name__ == "__main__":
    main()
