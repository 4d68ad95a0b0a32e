"""Training with the paper's recipe (section 5): Adam(0.9, 0.98, 1e-9), the warm-up/inverse-sqrt schedule,
label smoothing 0.1, residual dropout, token-based batches; resumable exactly; one CPU to many GPUs.

One plain loop (`train`), read top to bottom. Device and dtype are chosen in `Runtime`; checkpoint I/O lives in
aiayn.checkpoint; batches come from aiayn.data.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from aiayn import checkpoint as ckpt
from aiayn.config import PRESETS, ModelConfig, check_fields
from aiayn.model import Transformer, count_parameters
from aiayn.perf import keep_freed_memory

# ---------------------------------------------------------------------------------------------------------
# The maths: pure functions.


def noam_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)  (section 5.3; factor 1 = paper).

    Linear warm-up for `warmup` steps, then decay with the inverse square root of the step. `factor` rescales
    the whole curve for batches far from the paper's 25k tokens (see docs/training.md)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def label_smoothed_nll_loss(lprobs: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Cross-entropy against (1 - eps) * one-hot + eps * uniform (section 5.4), summed over the rows given.

    lprobs (N, V) log-probabilities of real (non-pad) target positions, target (N,). Returns
    (smoothed loss sum, true NLL sum); the NLL gives perplexity, the smoothed loss is what is minimised."""
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (N,)
    smooth = -lprobs.mean(dim=-1)  # (N,) cross-entropy against the uniform distribution
    loss = (1.0 - eps) * nll + eps * smooth
    return loss.sum(), nll.sum()


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """`label_smoothed_nll_loss(log_softmax(logits))` in one fused pass over the logits, and its gradient in one more.

    With z = logsumexp(x) per row: nll = z - x[target], smooth = z - mean(x), and
    d loss / dx = softmax(x) - (1 - eps) * onehot(target) - eps / V. Rows are processed in chunks that stay in
    cache, in fp32 whatever the logits' dtype; the (N, V) log-probabilities are never materialised, and the
    gradient is written straight in the logits' dtype. On the base model's 32k vocabulary this replaces ~30 % of
    a bf16 CPU step (log_softmax, gather and mean backward over N x V fp32 tensors; benchmarks/profile_step.py).
    Equal to the unfused formula to fp32 rounding (tests/test_train.py)."""

    CHUNK_ELEMENTS = 1 << 19  # rows per chunk = this / V: 2 MiB of fp32, stays in a CPU core's cache
    GPU_CHUNK_ELEMENTS = 1 << 27  # on GPUs: few, large chunks (kernel launches cost, caches do not), 512 MiB fp32

    @staticmethod
    def _rows_per_chunk(logits: Tensor) -> int:
        n = LabelSmoothedCrossEntropy.CHUNK_ELEMENTS if logits.device.type == "cpu" else \
            LabelSmoothedCrossEntropy.GPU_CHUNK_ELEMENTS
        return max(1, n // logits.size(1))

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        n, v = logits.shape
        rows = LabelSmoothedCrossEntropy._rows_per_chunk(logits)
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        nll = torch.empty(n, dtype=torch.float32, device=logits.device)
        smooth = torch.empty(n, dtype=torch.float32, device=logits.device)
        for i in range(0, n, rows):
            x = logits[i:i + rows].float()
            z = torch.logsumexp(x, dim=-1)
            lse[i:i + rows] = z
            nll[i:i + rows] = z - x.gather(-1, target[i:i + rows, None]).squeeze(-1)
            smooth[i:i + rows] = z - x.mean(dim=-1)
        ctx.save_for_backward(logits, target, lse)
        ctx.eps = eps
        ctx.mark_non_differentiable(nll)
        return ((1.0 - eps) * nll + eps * smooth).sum(), nll.sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None]:
        logits, target, lse = ctx.saved_tensors
        n, v = logits.shape
        rows = LabelSmoothedCrossEntropy._rows_per_chunk(logits)
        grad = torch.empty_like(logits)
        g = grad_loss.float()
        for i in range(0, n, rows):
            p = torch.sub(logits[i:i + rows].float(), lse[i:i + rows, None]).exp_()  # softmax (a new tensor)
            p.sub_(ctx.eps / v)
            p.scatter_add_(-1, target[i:i + rows, None], p.new_full((p.size(0), 1), ctx.eps - 1.0))
            grad[i:i + rows] = p.mul_(g)
        return grad, None, None


def batch_loss(model: Transformer, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, eps: float,
               pad_id: int) -> tuple[Tensor, Tensor, int]:
    """(smoothed loss sum, NLL sum, target tokens) of one batch. The vocabulary projection and softmax run on
    real target positions only: padding costs nothing there."""
    memory = model.encode(src)
    hidden = model.decode_hidden(tgt_in, memory, src.eq(pad_id))  # (B, T, D)
    real = tgt_out.ne(pad_id)
    logits = model.output_logits(hidden[real])  # (N, V), N = real target tokens
    loss, nll = LabelSmoothedCrossEntropy.apply(logits, tgt_out[real], eps)
    return loss, nll, int(real.sum())


class TrainingObjective(torch.nn.Module):
    """The model plus its loss in one forward, so DDP (which hooks `forward`) and torch.compile wrap both."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> tuple[Tensor, Tensor]:
        cfg = self.model.cfg
        loss, nll, _ = batch_loss(self.model, src, tgt_in, tgt_out, cfg.label_smoothing, cfg.pad_id)
        return loss, nll


# ---------------------------------------------------------------------------------------------------------
# Configuration.


@dataclass(frozen=True)
class TrainConfig:
    """Everything about a run except the model's shape. Defaults are the paper's (base, one machine)."""

    max_steps: int = 100_000
    max_minutes: float = 0.0  # stop after this wall time (0 = no limit); a checkpoint is written at the end
    max_tokens: int = 25_000  # per batch and side, padding included (paper: ~25,000 source + 25,000 target)
    update_freq: int = 1  # batches accumulated per update (per process)
    lr_factor: float = 1.0
    warmup: int = 4000
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    clip_norm: float = 0.0  # 0 = no gradient clipping (the paper clips nothing)
    seed: int = 1
    save_every_steps: int = 0  # 0 = only by time
    save_every_minutes: float = 10.0  # the paper: a checkpoint every 10 minutes
    keep_last: int = 20
    log_every: int = 10
    dtype: str = "fp32"  # "fp32" or "bf16" (autocast; fp32 master weights and optimizer state)
    device: str = "auto"
    compile: bool = False
    threads: int = 0  # torch intra-op threads on CPU (0 = torch's default)

    def __post_init__(self) -> None:
        if self.dtype not in ("fp32", "bf16"):
            raise ValueError(f"dtype must be fp32 or bf16, not {self.dtype!r}")
        if self.update_freq < 1 or self.max_tokens < 1:
            raise ValueError("update_freq and max_tokens must be positive")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        check_fields(cls, d, "training options")
        d = dict(d)
        if "adam_betas" in d:
            d["adam_betas"] = tuple(d["adam_betas"])
        return cls(**d)


# ---------------------------------------------------------------------------------------------------------
# Device, dtype and processes: decided here only.


@dataclass
class Runtime:
    device: torch.device
    rank: int = 0
    world_size: int = 1
    dtype: str = "fp32"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.dtype == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def all_reduce(self, values: list[float]) -> list[float]:
        if self.world_size == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()


def setup_runtime(tc: TrainConfig) -> Runtime:
    """Single process, or one process of a torchrun job (gloo on CPU, NCCL on GPU)."""
    if tc.threads:
        torch.set_num_threads(tc.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    want = tc.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = tc.dtype == "fp32"
    else:
        device = torch.device(want)
    if device.type == "cpu":
        keep_freed_memory()  # no page faults on every step's big tensors (aiayn/perf.py)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Runtime(device, rank, world, tc.dtype)


# ---------------------------------------------------------------------------------------------------------
# Logging.


class Logger:
    """log.jsonl lines (always) and TensorBoard scalars (when tensorboard is installed); main process only."""

    def __init__(self, run_dir: Path, enabled: bool):
        self.enabled = enabled
        self.path = run_dir / "log.jsonl"
        self.tb = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(run_dir / "tb"))
            except ImportError:
                pass

    def log(self, kind: str, step: int, **values: float) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps({"kind": kind, "step": step, "time": time.time(), **values}) + "\n")
        if self.tb is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(f"{kind}/{k}", v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


# ---------------------------------------------------------------------------------------------------------
# Evaluation on the dev set.


@torch.no_grad()
def evaluate_loss(model: Transformer, data_dir: Path, split: str, max_tokens: int, rt: Runtime,
                  eps: float) -> dict[str, float]:
    """Dev smoothed loss, NLL and per-token perplexity (Table 3's PPL) over a whole split."""
    from aiayn.data import TokenBatchSampler, collate, load_split

    ds = load_split(data_dir, split)
    sampler = TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, max_tokens=max_tokens, shuffle=False, seed=0,
                                rank=rt.rank, world_size=rt.world_size)
    was_training = model.training
    model.eval()
    loss_sum = nll_sum = tokens = 0.0
    for indices in sampler:
        b = collate([ds[i] for i in indices]).to(rt.device)
        with rt.autocast():
            loss, nll, n = batch_loss(model, b.src, b.tgt_in, b.tgt_out, eps, model.cfg.pad_id)
        loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + n
    loss_sum, nll_sum, tokens = rt.all_reduce([loss_sum, nll_sum, tokens])
    model.train(was_training)
    return {"loss": loss_sum / tokens, "nll": nll_sum / tokens, "ppl": math.exp(nll_sum / tokens), "tokens": tokens}


# ---------------------------------------------------------------------------------------------------------
# The loop.


def _unwrap_compile(module: torch.nn.Module) -> torch.nn.Module:
    return getattr(module, "_orig_mod", module)


def _batches(sampler):
    """Endless stream of batches (lists of indices), epoch after epoch; the sampler's state always counts the
    batches handed out."""
    while True:
        yield from sampler


def train(data_dir: Path, run_dir: Path, cfg: ModelConfig | None, tc: TrainConfig | None,
          resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train into run_dir (new), or continue the run in run_dir (resume=True). Returns a summary."""
    from aiayn.data import TokenBatchSampler, Vocab, collate, load_split

    run_dir = Path(run_dir)
    if resume:
        saved = json.loads((run_dir / "config.json").read_text())
        cfg, data_dir = ModelConfig.from_dict(saved["model"]), Path(saved["data"])
        base_tc = TrainConfig.from_dict(saved["train"])
        # Only the stopping criteria may change on resume; anything else would break exactness.
        tc = base_tc if tc is None else dataclasses.replace(
            base_tc, max_steps=tc.max_steps, max_minutes=tc.max_minutes)
    rt = setup_runtime(tc)
    data_dir = Path(data_dir)
    vocab = Vocab.load(data_dir)
    if len(vocab) != cfg.vocab_size:
        cfg = cfg.replace(vocab_size=len(vocab))  # the model always matches the prepared vocabulary
    if rt.is_main and not resume:
        if run_dir.exists() and any(run_dir.iterdir()):
            raise FileExistsError(f"{run_dir} is not empty; use --resume {run_dir} to continue it, or a new --out")
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(vocab.model_path, run_dir / "vocab.model")
        ckpt.write_json(run_dir / "config.json", {"model": cfg.to_dict(), "train": dataclasses.asdict(tc),
                                                  "data": str(data_dir.resolve())})

    torch.manual_seed(tc.seed)
    model = Transformer(cfg).to(rt.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=tc.adam_betas, eps=tc.adam_eps,
                                 foreach=True)
    train_set = load_split(data_dir, "train")
    sampler = TokenBatchSampler(train_set.src_lengths, train_set.tgt_lengths, max_tokens=tc.max_tokens,
                                shuffle=True, seed=tc.seed, rank=rt.rank, world_size=rt.world_size)
    step, best = 0, float("inf")
    if resume:
        last = ckpt.latest_checkpoint(run_dir, resumable=True)
        if last is not None:
            state, _, _ = ckpt.load_weights(last)
            model.load_state_dict(state)
            trainer = ckpt.load_trainer_state(last)
            optimizer.load_state_dict(trainer["optimizer"])
            sampler.load_state_dict(trainer["sampler"])
            step, best = trainer["step"], trainer["best_dev_loss"]
    has_valid = _has_split(data_dir, "valid")

    objective: torch.nn.Module = TrainingObjective(model)
    if rt.world_size > 1:
        objective = torch.nn.parallel.DistributedDataParallel(
            objective, device_ids=[rt.device.index] if rt.device.type == "cuda" else None)
    if tc.compile:
        objective = torch.compile(objective)
    logger = Logger(run_dir, rt.is_main)
    if rt.is_main:
        print(f"model: {count_parameters(model) / 1e6:.2f}M parameters, {cfg.n_enc_layers}+{cfg.n_dec_layers} "
              f"layers, d_model {cfg.d_model}; device {rt.device}, {tc.dtype}, {rt.world_size} process(es); "
              f"{len(train_set):,} training pairs, {len(sampler):,} batches/epoch/process", flush=True)

    stop = {"signal": None}

    def _on_signal(signum, _frame):
        stop["signal"] = signum

    old_handlers = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)} \
        if rt.world_size == 1 else {}

    def save(step: int) -> None:
        nonlocal best
        dev = None
        if has_valid:
            dev = evaluate_loss(model, data_dir, "valid", tc.max_tokens, rt, cfg.label_smoothing)
        if rt.is_main:
            trainer_state = {"optimizer": optimizer.state_dict(), "sampler": sampler.state_dict(), "step": step,
                             "best_dev_loss": min(best, dev["loss"]) if dev else best}
            path = ckpt.save_checkpoint(run_dir, model.state_dict(), cfg, step, trainer_state, tc.keep_last)
            msg = f"step {step}: saved {path.name}"
            if dev:
                logger.log("valid", step, **{k: v for k, v in dev.items() if k != "tokens"})
                msg += f"; dev loss {dev['loss']:.3f} nll {dev['nll']:.3f} ppl {dev['ppl']:.2f}"
                if dev["loss"] < best:
                    ckpt.save_weights(run_dir / ckpt.BEST, model.state_dict(), cfg, step)
            _write(msg)
        if dev:
            best = min(best, dev["loss"])

    bar = None
    by_time = tc.max_minutes > 0  # a time budget: the bar counts minutes, the step goes in its postfix
    if progress and rt.is_main:
        from tqdm.auto import tqdm

        if by_time:
            bar = tqdm(total=round(tc.max_minutes * 60), desc="train", unit="s", dynamic_ncols=True,
                       mininterval=1.0, bar_format="{l_bar}{bar}| {n:.0f}/{total} s [{elapsed}<{remaining}{postfix}]")
        else:
            bar = tqdm(total=tc.max_steps, initial=step, desc="train", unit="step", dynamic_ncols=True,
                       mininterval=1.0)
    _write = bar.write if bar is not None else (lambda s: print(s, flush=True))

    batches = _batches(sampler)
    t_start = t_save = time.time()
    window = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "time": time.time()}
    model.train()
    last_saved = step
    while step < tc.max_steps and stop["signal"] is None:
        # Dropout masks are a function of (seed, step, rank): an interrupted run resumes exactly.
        torch.manual_seed(tc.seed * 1_000_003 + step * 1009 + rt.rank)
        micro = [collate([train_set[i] for i in next(batches)]).to(rt.device) for _ in range(tc.update_freq)]
        local_tokens = sum(b.n_tgt_tokens for b in micro)
        (total_tokens,) = rt.all_reduce([float(local_tokens)])
        # Per-token loss over the whole update (all micro-batches, all processes): DDP averages gradients over
        # processes, so each process scales its summed loss by world_size / total tokens.
        scale = rt.world_size / total_tokens
        loss_sum = nll_sum = 0.0
        for k, b in enumerate(micro):
            sync = k == len(micro) - 1 or rt.world_size == 1
            with contextlib.nullcontext() if sync else _unwrap_compile(objective).no_sync():
                with rt.autocast():
                    loss, nll = objective(b.src, b.tgt_in, b.tgt_out)
                (loss * scale).backward()
            loss_sum, nll_sum = loss_sum + loss.item(), nll_sum + nll.item()
        if tc.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_norm)
        lr = noam_lr(step + 1, cfg.d_model, tc.warmup, tc.lr_factor)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1

        window["loss"] += loss_sum
        window["nll"] += nll_sum
        window["tokens"] += local_tokens
        if step % tc.log_every == 0 or step == tc.max_steps:
            loss_w, nll_w, tok_w = rt.all_reduce([window["loss"], window["nll"], window["tokens"]])
            dt = time.time() - window["time"]
            rec = {"loss": loss_w / tok_w, "nll": nll_w / tok_w, "ppl": math.exp(min(nll_w / tok_w, 50)),
                   "lr": lr, "tokens_per_s": tok_w / dt, "elapsed_s": time.time() - t_start}
            logger.log("train", step, **rec)
            if bar is not None:
                bar.set_postfix(step=step, loss=f"{rec['loss']:.3f}", lr=f"{lr:.2e}",
                                tok_s=f"{rec['tokens_per_s']:.0f}", refresh=False)
            window = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "time": time.time()}
        if bar is not None:
            bar.update(min(time.time() - t_start, bar.total) - bar.n if by_time else 1)

        out_of_time = tc.max_minutes > 0 and (time.time() - t_start) / 60 >= tc.max_minutes
        due = (tc.save_every_steps and step % tc.save_every_steps == 0) or \
            (tc.save_every_minutes > 0 and (time.time() - t_save) / 60 >= tc.save_every_minutes)
        out_of_time = bool(rt.all_reduce([float(out_of_time)])[0]) if rt.world_size > 1 else out_of_time
        due = bool(rt.all_reduce([float(bool(due))])[0]) if rt.world_size > 1 else due
        if due or out_of_time:
            save(step)
            last_saved, t_save = step, time.time()
        if out_of_time:
            _write(f"time limit of {tc.max_minutes:g} minutes reached at step {step}")
            break

    if step != last_saved:
        save(step)
    if stop["signal"] is not None and rt.is_main:
        _write(f"interrupted at step {step}; checkpoint saved. Continue with: aiayn train --resume {run_dir}")
    if bar is not None:
        bar.close()
    logger.close()
    for s, h in old_handlers.items():
        signal.signal(s, h)
    return {"step": step, "run_dir": str(run_dir), "best_dev_loss": best,
            "elapsed_s": time.time() - t_start}


def _has_split(data_dir: Path, split: str) -> bool:
    """Whether the prepared data lists `split` (a listed but corrupt split still raises when loaded)."""
    from aiayn.data import META_FILE

    return split in json.loads((data_dir / META_FILE).read_text())["splits"]


# ---------------------------------------------------------------------------------------------------------
# Command line.


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def load_config_file(path: Path) -> dict[str, Any]:
    """A YAML or JSON file: {preset: NAME, model: {field: value}, train: {field: value}, data: DIR}."""
    text = Path(path).read_text()
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        return yaml.safe_load(text) or {}
    return json.loads(text)


_TRAIN_FLAGS = {
    "max_steps": int, "max_minutes": float, "max_tokens": int, "update_freq": int, "lr_factor": float,
    "warmup": int, "clip_norm": float, "seed": int, "save_every_steps": int, "save_every_minutes": float,
    "keep_last": int, "log_every": int, "dtype": str, "device": str, "threads": int,
}


def _train_command(args: argparse.Namespace) -> int:
    from aiayn.data import DataError

    try:
        file_cfg = load_config_file(args.config) if args.config else {}
        flags = {k: getattr(args, k) for k in _TRAIN_FLAGS if getattr(args, k) is not None}
        if args.compile:
            flags["compile"] = True
        if args.resume:
            base = TrainConfig.from_dict(json.loads((Path(args.resume) / "config.json").read_text())["train"])
            tc = dataclasses.replace(base, **{k: v for k, v in flags.items() if k in ("max_steps", "max_minutes")})
            summary = train(Path("."), Path(args.resume), None, tc, resume=True, progress=not args.no_progress)
        else:
            data = args.data or file_cfg.get("data")
            if not data or not args.out:
                print("error: --data DIR and --out RUN_DIR are required (or --resume RUN_DIR)", file=sys.stderr)
                return 2
            preset = args.preset or file_cfg.get("preset", "base")
            model_over = dict(file_cfg.get("model", {}))
            for kv in args.set or []:
                key, _, value = kv.partition("=")
                model_over[key] = _parse_value(value)
            cfg = ModelConfig.preset(preset, **model_over)
            tc = TrainConfig.from_dict({**file_cfg.get("train", {}), **flags})
            summary = train(Path(data), Path(args.out), cfg, tc, progress=not args.no_progress)
    except (DataError, ckpt.CheckpointError, FileExistsError, FileNotFoundError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if int(os.environ.get("RANK", "0")) == 0:
        minutes = summary["elapsed_s"] / 60
        print(f"done: step {summary['step']} in {minutes:.1f} min; run directory {summary['run_dir']}")
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("train", help="train a preset on a prepared-data directory (or resume a run)",
                       description="Train the Transformer with the paper's recipe. Example: aiayn train --data "
                       "data-bin/wmt14 --preset base --out runs/base; multi-GPU: torchrun --nproc_per_node 8 "
                       "-m aiayn train ...")
    p.add_argument("--data", help="prepared-data directory (aiayn prepare)")
    p.add_argument("--out", help="new run directory")
    p.add_argument("--resume", help="continue this run directory exactly where it stopped")
    p.add_argument("--preset", choices=list(PRESETS), help="model preset (default base)")
    p.add_argument("--config", help="YAML/JSON file with preset, model and train sections")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="override a model field, e.g. dropout=0.3")
    for name, typ in _TRAIN_FLAGS.items():
        p.add_argument("--" + name.replace("_", "-"), type=typ, default=None)
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")
    p.set_defaults(func=_train_command)

    pl = sub.add_parser("plot", help="plot the training curves of a run directory to a PNG")
    pl.add_argument("run", type=Path)
    pl.add_argument("--out", type=Path, help="image file (default RUN/curves.png)")
    pl.set_defaults(func=_plot_command)


def _plot_command(args: argparse.Namespace) -> int:
    out = plot_run(args.run, args.out)
    print(f"wrote {out}")
    return 0


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Training and dev loss against step (and learning rate) from RUN/log.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in (Path(run_dir) / "log.jsonl").read_text().splitlines() if line]
    tr = [r for r in records if r["kind"] == "train"]
    va = [r for r in records if r["kind"] == "valid"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([r["step"] for r in tr], [r["loss"] for r in tr], label="train loss (smoothed)")
    ax1.plot([r["step"] for r in tr], [r["nll"] for r in tr], label="train NLL", alpha=0.7)
    if va:
        ax1.plot([r["step"] for r in va], [r["nll"] for r in va], "o-", label="dev NLL")
    ax1.set_xlabel("step")
    ax1.set_ylabel("nats / token")
    ax1.legend()
    ax1.grid(alpha=0.3)
    ax2.plot([r["step"] for r in tr], [r["lr"] for r in tr])
    ax2.set_xlabel("step")
    ax2.set_ylabel("learning rate")
    ax2.grid(alpha=0.3)
    fig.suptitle(str(run_dir))
    fig.tight_layout()
    out = Path(out) if out else Path(run_dir) / "curves.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
