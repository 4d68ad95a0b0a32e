"""Training with the paper's recipe (section 5): Adam(0.9, 0.98, 1e-9), the warm-up/inverse-sqrt schedule,
label smoothing 0.1, residual dropout, token-based batches; resumable exactly; one CPU to many GPUs.

    train(data, run, cfg, tc)  a new run         resume(run)  continue one where it stopped
    both check everything (flags, data, batch limit, model) before writing anything, hold the run's lock
    (one writer per run directory), then go through `_loop`: one update per iteration, read top to bottom.

A run remembers what it was trained on (config.json: the data's content digest and the vocabulary's SHA-256);
resuming on data prepared again in the same folder is refused. Ctrl-C/SIGTERM stop after the current update with a
checkpoint (no dev evaluation: stopping stays quick) and the summary says which signal ("interrupted_by").

Where the rest lives: the loss in aiayn.training.losses, device/dtype/processes in aiayn.runtime, the run on disk (lock,
config.json, log, step checkpoints: one Run) in aiayn.training.run, the checkpoint files' format in
aiayn.training.checkpoint, which checkpoint is best in aiayn.training.selection, batches in aiayn.data, dev perplexity
in aiayn.metrics.perplexity, plots in aiayn.viz.curves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from aiayn.config import DEVICE_HELP, ModelConfig, check_fields, check_types
from aiayn.data import PreparedSplit, TokenBatchSampler, Vocab, collate, open_prepared, pack
from aiayn.errors import CheckpointError, DataError, UsageError
from aiayn.fast import set_layer_norm_output
from aiayn.model import Transformer, count_parameters
from aiayn.progress import TrainingProgress
from aiayn.rundir import BEST, CONFIG, RunDir
from aiayn.runtime import DTYPES, Runtime, StopOnSignal, setup_runtime
from aiayn.training import checkpoint as ckpt
from aiayn.training.losses import TrainingObjective
from aiayn.training.run import Run, check_parent_vocab, parent_checkpoint, run_record
from aiayn.training.selection import BEST_METRICS, EarlyStopping, describe, judge


def noam_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)  (section 5.3; factor 1 = paper).

    Linear warm-up for `warmup` steps, then decay with the inverse square root of the step. `factor` rescales
    the whole curve for batches far from the paper's 25k tokens (see docs/training.md)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def anneal_factor(step: int, elapsed_s: float, tc: TrainConfig) -> float:
    """What multiplies the schedule with --anneal A (not in the paper; for short time-budgeted runs, where the
    inverse-square-root decay leaves the rate high at the end): 1 until the last fraction A of the run, then falling
    linearly to 0 at its end, the end being max_steps or, if that comes sooner, max_minutes of this invocation
    (after a resume: of its new budget). 1 when A is 0."""
    if tc.anneal <= 0:
        return 1.0
    done = step / tc.max_steps
    if tc.max_minutes > 0:
        done = max(done, elapsed_s / (tc.max_minutes * 60))
    return min(1.0, max(0.0, (1.0 - done) / tc.anneal))


def _opt(default: Any, help: str, low: float | None = None, above: float | None = None, below: float | None = None,
         choices: tuple[str, ...] | None = None, **kw: Any) -> Any:
    """A TrainConfig field: its default, its --help, and its allowed range (value >= low, > above, < below; each
    element of a tuple) or values (choices): the one place a training option's range is written; the CLI checks flags
    against it at parse time (aiayn.cli.common.add_dataclass_args)."""
    return field(default=default, metadata={"help": help, "low": low, "above": above, "below": below,
                                            "choices": choices}, **kw)




@dataclass(frozen=True)
class TrainConfig:
    """Everything about a run except the model's shape. Defaults are the paper's (base, one machine). Each field
    is also a flag of `aiayn train` (--max-steps, ...), with this help."""

    max_steps: int = _opt(100_000, "stop after this many updates (paper: 100k base, 300k big)", low=1)
    max_minutes: float = _opt(0.0, "stop after this wall time, with a checkpoint (0 = no limit)", low=0)
    max_tokens: int = _opt(25_000, "tokens per batch and side, padding included (paper: ~25,000)", low=1)
    update_freq: int = _opt(1, "batches accumulated per update, per process (fewer GPUs than the paper's 8)", low=1)
    lr_factor: float = _opt(1.0, "scales the whole learning-rate schedule (1 = the paper's)", above=0)
    warmup: int = _opt(4000, "warm-up steps of the schedule (paper: 4000)", low=1)
    anneal: float = _opt(0.0, "decay the learning rate linearly to 0 over this last fraction of the run (its "
                              "max_steps or, if sooner, its max_minutes); 0 = the paper's schedule only", low=0,
                         below=1)
    adam_betas: tuple[float, float] = _opt((0.9, 0.98), "Adam beta1 beta2 (paper: 0.9 0.98)", low=0, below=1)
    adam_eps: float = _opt(1e-9, "Adam epsilon (paper: 1e-9)", above=0)
    clip_norm: float = _opt(0.0, "clip the gradient norm to this (0 = no clipping, as the paper)", low=0)
    seed: int = _opt(1, "random seed (initialization, batch order, dropout)", low=0)
    save_every_steps: int = _opt(0, "also save a checkpoint every N steps (0 = by time only)", low=0)
    save_every_minutes: float = _opt(10.0, "save a checkpoint every N minutes (paper: 10)", low=0)
    keep_last: int = _opt(20, "step checkpoints kept (paper: averages the last 5 base / 20 big)", low=1)
    log_every: int = _opt(10, "log training loss every N steps", low=1)
    eval_bleu_lines: int = _opt(0, "at each checkpoint also translate the first N dev sentences and log their BLEU and "
                                   "chrF (sacreBLEU on detokenized text; N >= the dev set's size: all of it; 0 = dev "
                                   "loss only)", low=0)
    eval_beam: int = _opt(1, "beam size of that translation (1 = greedy; otherwise the paper's alpha 0.6)", low=1)
    best_metric: str = _opt("loss", "what checkpoint_best keeps and --patience watches: the lowest dev loss, or the "
                                    "highest dev bleu or chrf (those need --eval-bleu-lines)", choices=BEST_METRICS)
    patience: int = _opt(0, "stop after N dev evaluations in a row without a better --best-metric (0 = never stop "
                            "early)", low=0)
    dtype: str = _opt("fp32", "fp32; bf16 (autocast; fp32 master weights and optimizer state); fp16 (the same, with "
                              "dynamic loss scaling; an update whose gradients overflow is skipped and not counted); "
                              "auto: bf16 where the device multiplies bf16 natively, else fp16 on a CUDA GPU, else "
                              "fp32 (the resolved one is saved)")
    device: str = _opt("auto", DEVICE_HELP)
    compile: bool = _opt(False, "torch.compile the model and loss")
    packed: bool = _opt(False, "packed batches: each batch's sentences one after another without padding, attention "
                               "within each sentence (flash's variable-length kernel on GPUs; same loss as padded)")
    threads: int = _opt(0, "CPU threads for torch (0 = the cores not busy with other processes, measured at start)",
                        low=0)
    layer_norm: str = _opt("16-bit", "LayerNorm output under CPU autocast: 16-bit (the autocast dtype, faster) or fp32 "
                                     "(torch's nn.LayerNorm; the other arm of benchmarks/ab/layer_norm.py)")

    def __post_init__(self) -> None:
        check_types(self)
        if self.dtype not in DTYPES:
            raise UsageError(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if self.layer_norm not in ("16-bit", "fp32"):
            raise UsageError(f"layer_norm must be 16-bit or fp32, not {self.layer_norm!r}")
        if self.best_metric not in BEST_METRICS:
            raise UsageError(f"best_metric must be one of {', '.join(BEST_METRICS)}, not {self.best_metric!r}")
        if self.best_metric != "loss" and self.eval_bleu_lines == 0:
            raise UsageError(f"--best-metric {self.best_metric} needs --eval-bleu-lines N: the dev sentences "
                             "translated and scored at each checkpoint")
        betas = self.adam_betas
        if not (isinstance(betas, tuple) and len(betas) == 2 and all(
                isinstance(b, (int, float)) and not isinstance(b, bool) for b in betas)):
            raise UsageError(f"adam_betas must be two numbers, got {betas!r}")
        for f in dataclasses.fields(self):
            low, above, below = (f.metadata.get(k) for k in ("low", "above", "below"))
            value = getattr(self, f.name)
            for v in value if isinstance(value, tuple) else (value,):
                if v != v or (low is not None and v < low) or (above is not None and v <= above) or (
                        below is not None and v >= below):  # v != v: NaN
                    want = " and ".join(f"{op} {b}" for op, b in ((">=", low), (">", above), ("<", below))
                                        if b is not None)
                    raise UsageError(f"{f.name} must be {want}, got {value}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        if not isinstance(d, dict):
            raise UsageError(f"training options are a mapping of option: value, not {type(d).__name__}")
        check_fields(cls, d, "training options")
        d = dict(d)
        if isinstance(d.get("adam_betas"), list):
            d["adam_betas"] = tuple(d["adam_betas"])
        return cls(**d)


# What a fine-tuning run (--init-from) may change in its parent's model config: training settings, not weights.
FINE_TUNE_FIELDS = ("dropout", "label_smoothing")

# Options that may change when a run is resumed (the stopping criteria); any other would break exactness, so
# `aiayn train --resume RUN` refuses every other training flag rather than ignore it.
RESUMABLE_OPTIONS = ("max_steps", "max_minutes")


# ---------------------------------------------------------------------------------------------------------
# The state a checkpoint holds, and saving it.


@dataclass
class TrainState:
    model: Transformer
    optimizer: torch.optim.Optimizer
    sampler: TokenBatchSampler
    scaler: torch.amp.GradScaler  # fp16's loss scale (a pass-through otherwise)
    step: int = 0  # updates applied: an fp16 update skipped on overflow does not count
    overflow_skips: int = 0  # fp16 updates skipped because a gradient overflowed (inf or NaN)
    best_dev_loss: float = math.inf
    train_seconds: float = 0.0  # training time of the run and its resumptions, to the last checkpoint
    early: EarlyStopping = field(default_factory=EarlyStopping)

    def state_dict(self) -> dict[str, Any]:
        """The trainer state a step checkpoint holds beside the weights (checked when read back:
        checkpoint.load_trainer_state, which refuses one without any of these entries)."""
        return {"optimizer": self.optimizer.state_dict(), "sampler": self.sampler.state_dict(), "step": self.step,
                "best_dev_loss": self.best_dev_loss, "train_seconds": self.train_seconds,
                "scaler": self.scaler.state_dict(), "overflow_skips": self.overflow_skips,
                "early_stopping": self.early.state_dict()}

    def load_state_dict(self, trainer: dict[str, Any], path: Path) -> None:
        """The trainer state of the step checkpoint `path` (Run.restore has loaded its weights, checked that both
        belong to this run, and returned this): optimizer, batch order, loss scaler, counters."""
        try:
            self.optimizer.load_state_dict(trainer["optimizer"])
        except (ValueError, KeyError, TypeError, RuntimeError) as e:
            raise CheckpointError(f"{ckpt.state_path(path)}: its optimizer state does not fit the model ({e}); "
                                  f"delete both {path.name} files to resume from the previous checkpoint") from None
        self.sampler.load_state_dict(trainer["sampler"])
        if self.scaler.is_enabled():
            if not trainer.get("scaler"):
                raise CheckpointError(f"{ckpt.state_path(path)} has no loss-scaler state, which an fp16 run saves; "
                                      "it does not belong to this run")
            self.scaler.load_state_dict(trainer["scaler"])
        self.overflow_skips = trainer["overflow_skips"]
        self.step, self.best_dev_loss = trainer["step"], trainer["best_dev_loss"]
        self.train_seconds = trainer["train_seconds"]
        self.early.load_state_dict(trainer["early_stopping"])


# ---------------------------------------------------------------------------------------------------------
# Starting and resuming.


def train(data_dir: Path, run_dir: Path, cfg: ModelConfig, tc: TrainConfig, progress: bool = True,
          init_from: Path | None = None) -> dict[str, Any]:
    """Train a new run into run_dir: a new or empty folder, or one whose start was interrupted before its config.json
    was written. Everything that can fail (data, vocabulary, device, batch limit, model) is checked before run_dir
    is touched, so a failed start leaves nothing behind. With init_from (a run or checkpoint: parent_checkpoint) the
    model starts from its weights, with a fresh optimizer and schedule: fine-tuning; `cfg` must then be the parent's
    but for FINE_TUNE_FIELDS, and the data's vocabulary the parent's. Returns a summary."""
    data_dir, run_dir = Path(data_dir), Path(run_dir)
    splits = open_prepared(data_dir)
    vocab = Vocab.load(data_dir)
    parent = None
    if init_from is not None:
        parent, parent_cfg = parent_checkpoint(init_from)
        check_parent_vocab(parent, vocab.model_path)
    if len(vocab) != cfg.vocab_size:
        cfg = cfg.replace(vocab_size=len(vocab))  # the model always matches the prepared vocabulary
    if parent is not None:
        fixed = [k for k in cfg.to_dict() if k not in FINE_TUNE_FIELDS]
        changed = [k for k in fixed if getattr(cfg, k) != getattr(parent_cfg, k)]
        if changed:
            raise UsageError(f"--init-from keeps the model of {parent}, so {', '.join(changed)} cannot change (only "
                             f"{', '.join(FINE_TUNE_FIELDS)} may, with --set)")
    with setup_runtime(tc.device, tc.dtype, tc.threads) as rt:
        tc = dataclasses.replace(tc, dtype=rt.dtype)  # "auto" resolved: a resumed run keeps the dtype it started with
        run = Run.new(run_dir, rt.is_main)
        state, train_set, valid = _setup(splits, cfg, tc, rt, parent)
        record = run_record(cfg.to_dict(), dataclasses.asdict(tc), data_dir, vocab.model_path,
                            ckpt.parent_record(parent) if parent else None)
        with run.create(record, vocab.model_path):
            return _loop(state, train_set, valid, run, tc, rt, progress)


def resume(run_dir: Path, progress: bool = True, **stopping: Any) -> dict[str, Any]:
    """Continue the run in run_dir exactly where its newest checkpoint left it. Only the stopping criteria
    (RESUMABLE_OPTIONS: max_steps, max_minutes) may be given anew; a run with no checkpoint starts from step 0.
    Refused while another process trains the run, or when its data were prepared again since it started."""
    run_dir = Path(run_dir)
    refused = sorted(k for k, v in stopping.items() if v is not None and k not in RESUMABLE_OPTIONS)
    if refused:
        raise UsageError(f"cannot change {', '.join(refused)} when resuming (only {', '.join(RESUMABLE_OPTIONS)} "
                         "may change; the rest is fixed by the run's config.json)")
    saved, cfg, tc = _read_run(run_dir)
    tc = dataclasses.replace(tc, **{k: v for k, v in stopping.items() if v is not None})
    with setup_runtime(tc.device, tc.dtype, tc.threads) as rt, Run.resume(run_dir, saved, rt.is_main) as run:
        state, train_set, valid = _setup(open_prepared(run.data_dir), cfg, tc, rt, run.parent)
        restored = run.restore(state.model)
        if restored is not None:
            state.load_state_dict(*restored)
        return _loop(state, train_set, valid, run, tc, rt, progress)


def _read_run(run_dir: Path) -> tuple[dict[str, Any], ModelConfig, TrainConfig]:
    """A run's config.json, and the model and training configs it holds."""
    saved = RunDir(run_dir).config
    try:
        return saved, ModelConfig.from_dict(saved["model"]), TrainConfig.from_dict(saved["train"])
    except UsageError as e:
        raise CheckpointError(f"{run_dir / CONFIG}: {e}; it was damaged outside aiayn") from None


def train_or_resume(data_dir: Path, run_dir: Path, cfg: ModelConfig, tc: TrainConfig, progress: bool = True,
                    init_from: Path | None = None) -> dict[str, Any]:
    """`--resume-if-exists`: resume run_dir where it is a run already, else start it; the one command a job runs
    again when it is relaunched (torchrun --max-restarts, a preempted job). Refused when the run was started with
    other options than these: only RESUMABLE_OPTIONS may differ (a fine-tuning run resumes from its own checkpoints,
    not init_from again). Under torchrun every process decides on its own,
    before the process group forms; rank 0 writes config.json only after it has formed, so all decide the same."""
    run_dir = Path(run_dir)
    if not RunDir(run_dir).is_run:
        return train(data_dir, run_dir, cfg, tc, progress, init_from=init_from)
    saved, run_cfg, run_tc = _read_run(run_dir)
    # As train() would: the vocabulary's size, and "auto" resolved as when the run started.
    ours = _as_flags(cfg.replace(vocab_size=run_cfg.vocab_size),
                     dataclasses.replace(tc, **({"dtype": run_tc.dtype} if tc.dtype == "auto" else {})), data_dir)
    theirs = _as_flags(run_cfg, run_tc, saved["data"])
    differ = [f"{k} {v} (the run has {theirs[k]})" for k, v in ours.items()
              if v != theirs[k] and k.removeprefix("--").replace("-", "_") not in RESUMABLE_OPTIONS]
    if differ:
        may = ", ".join("--" + k.replace("_", "-") for k in RESUMABLE_OPTIONS)
        raise UsageError(f"{run_dir} is a run started with other options; --resume-if-exists continues it only with "
                         f"the same ones (all but {may}): {'; '.join(differ)}. Give the options in its config.json, "
                         "or a new --out")
    return resume(run_dir, progress, **{k: getattr(tc, k) for k in RESUMABLE_OPTIONS})


def _as_flags(cfg: ModelConfig, tc: TrainConfig, data_dir: Path | str) -> dict[str, Any]:
    """A run's options as the flags that give them: {"--set dropout": 0.1, "--max-tokens": 25000, "--data": DIR}."""
    return {**{f"--set {k}": v for k, v in cfg.to_dict().items()},
            **{"--" + k.replace("_", "-"): v for k, v in dataclasses.asdict(tc).items()},
            "--data": str(Path(data_dir).resolve())}


def _setup(splits: dict[str, PreparedSplit], cfg: ModelConfig, tc: TrainConfig, rt: Runtime,
           parent: Path | None = None) -> tuple[TrainState, PreparedSplit, PreparedSplit | None]:
    """The model (a fresh one, or the parent's weights), optimizer and batch order of a run at step 0, and its train
    and dev splits. The sampler refuses a training pair longer than max_tokens here, before anything is written."""
    if "train" not in splits:
        raise DataError("the prepared data have no train split")
    train_set = splits["train"]
    if "valid" not in splits:
        need = [flag for flag, given in (("--eval-bleu-lines", tc.eval_bleu_lines), ("--patience", tc.patience),
                                         (f"--best-metric {tc.best_metric}", tc.best_metric != "loss")) if given]
        if need:
            raise UsageError(f"{' and '.join(need)} need(s) a dev set, and {train_set.data_dir} has none: prepare "
                             "the data with --valid-src and --valid-tgt")
    sampler = TokenBatchSampler(train_set.src_lengths, train_set.tgt_lengths, max_tokens=tc.max_tokens,
                                shuffle=True, seed=tc.seed, rank=rt.rank, world_size=rt.world_size)
    torch.manual_seed(tc.seed)
    model = Transformer(cfg)
    if parent is not None:
        ckpt.load_parent(model, parent)
    model = set_layer_norm_output(model.to(rt.device), autocast=tc.layer_norm == "16-bit")
    optimizer = make_optimizer(model, tc.adam_betas, tc.adam_eps)
    early = EarlyStopping(tc.best_metric, tc.patience)
    return TrainState(model, optimizer, sampler, rt.grad_scaler(), early=early), train_set, splits.get("valid")


def make_optimizer(model: torch.nn.Module, betas: tuple[float, float], eps: float) -> torch.optim.Adam:
    """Adam (section 5.3) over the model's parameters, learning rate set per step by the schedule. On CUDA torch's
    fused kernel (one launch for all parameters); elsewhere the multi-tensor (foreach) one. Same arithmetic, same
    state dict: a run resumes across devices."""
    fused = next(model.parameters()).device.type == "cuda"
    return torch.optim.Adam(model.parameters(), lr=0.0, betas=betas, eps=eps,
                            **({"fused": True} if fused else {"foreach": True}))


def _endless(sampler: TokenBatchSampler):
    """Batches (lists of indices), epoch after epoch; the sampler's state always counts the batches handed out."""
    while True:
        yield from sampler


# ---------------------------------------------------------------------------------------------------------
# The loop.


def _update(state: TrainState, objective: torch.nn.Module, micro: list, rt: Runtime, tc: TrainConfig,
            t_start: float) -> tuple[float, float, float, bool]:
    """One update: forward and backward of every micro-batch, then an Adam step at the schedule's rate. In fp16 the
    loss is scaled before backward and the gradients unscaled before clipping and Adam; where they overflowed the
    scaler skips Adam's step and halves the scale, and the step counter stays (as fairseq: the schedule counts
    applied updates only; the batches are consumed). Returns (summed loss, summed NLL, learning rate, applied)."""
    local_tokens = sum(b.n_tgt_tokens for b in micro)
    # The elapsed time goes through the same all-reduce so that every process anneals by the same clock.
    total_tokens, elapsed = rt.all_reduce([float(local_tokens), time.time() - t_start])
    # Per-token loss over the whole update (all micro-batches, all processes): DDP averages gradients over processes,
    # so each process scales its summed loss by world_size / total tokens.
    scale = rt.world_size / total_tokens
    loss_sum = nll_sum = 0.0
    for k, b in enumerate(micro):
        last = k == len(micro) - 1 or rt.world_size == 1
        with contextlib.nullcontext() if last else getattr(objective, "_orig_mod", objective).no_sync():
            with rt.autocast():
                loss, nll = objective(*b.inputs())
            state.scaler.scale(loss * scale).backward()
        loss_sum, nll_sum = loss_sum + loss.item(), nll_sum + nll.item()
    if tc.clip_norm > 0:
        state.scaler.unscale_(state.optimizer)
        torch.nn.utils.clip_grad_norm_(state.model.parameters(), tc.clip_norm)
    lr = noam_lr(state.step + 1, state.model.cfg.d_model, tc.warmup, tc.lr_factor) * anneal_factor(
        state.step + 1, elapsed / rt.world_size, tc)
    for group in state.optimizer.param_groups:
        group["lr"] = lr
    loss_scale = state.scaler.get_scale()
    state.scaler.step(state.optimizer)
    state.scaler.update()  # lowers the scale only where a gradient overflowed (found inf or NaN): the step was skipped
    state.optimizer.zero_grad(set_to_none=True)
    applied = state.scaler.get_scale() >= loss_scale
    if applied:
        state.step += 1
    else:
        state.overflow_skips += 1
    return loss_sum, nll_sum, lr, applied


class _Window:
    """Loss, NLL and tokens since the last log line (summed over processes when logged)."""

    def __init__(self):
        self.loss = self.nll = self.tokens = 0.0
        self.start = time.time()

    def add(self, loss: float, nll: float, tokens: int) -> None:
        self.loss, self.nll, self.tokens = self.loss + loss, self.nll + nll, self.tokens + tokens

    def record(self, rt: Runtime, lr: float, t_start: float) -> dict[str, float]:
        loss, nll, tokens = rt.all_reduce([self.loss, self.nll, self.tokens])
        return {"loss": loss / tokens, "nll": nll / tokens, "ppl": math.exp(min(nll / tokens, 50)), "lr": lr,
                "tokens_per_s": tokens / (time.time() - self.start), "elapsed_s": time.time() - t_start}


def _loop(state: TrainState, train_set: PreparedSplit, valid: PreparedSplit | None, run: Run, tc: TrainConfig,
          rt: Runtime, progress: bool) -> dict[str, Any]:
    model, cfg = state.model, state.model.cfg
    objective = rt.wrap(TrainingObjective(model), tc.compile)
    run.open_log()
    bar = TrainingProgress(tc, state.step, enabled=progress, silent=not rt.is_main)
    bar.write(f"model: {count_parameters(model) / 1e6:.2f}M parameters, {cfg.n_enc_layers}+{cfg.n_dec_layers} "
              f"layers, d_model {cfg.d_model}; device {rt.device}, {tc.dtype}"
              f"{f' ({rt.why_dtype})' if rt.why_dtype else ''}, {rt.world_size} process(es); "
              f"{len(train_set):,} training pairs, {len(state.sampler):,} batches/epoch/process")
    batches = _endless(state.sampler)
    t_start = t_save = time.time()
    seconds_before, last_saved, window = state.train_seconds, state.step, _Window()
    model.train()
    with StopOnSignal(enabled=rt.world_size == 1) as stop:
        if state.early.stop:
            bar.write(f"this run stopped early at step {state.step}: {_early_stop_reason(state, tc)}")
        while state.step < tc.max_steps and stop.signal is None and not state.early.stop:
            # Dropout masks are a function of (seed, step, rank): an interrupted run resumes exactly.
            torch.manual_seed(tc.seed * 1_000_003 + state.step * 1009 + rt.rank)
            micro = [collate([train_set[i] for i in next(batches)]) for _ in range(tc.update_freq)]
            micro = [(pack(b) if tc.packed else b).to(rt.device) for b in micro]
            loss_sum, nll_sum, lr, applied = _update(state, objective, micro, rt, tc, t_start)
            postfix = {}
            if applied:  # a skipped fp16 update's loss (maybe inf) is left out of the figures
                window.add(loss_sum, nll_sum, sum(b.n_tgt_tokens for b in micro))
            if applied and (state.step % tc.log_every == 0 or state.step == tc.max_steps):
                rec = window.record(rt, lr, t_start)
                postfix = {"step": state.step, "loss": f"{rec['loss']:.3f}", "lr": f"{lr:.2e}",
                           "tok_s": f"{rec['tokens_per_s']:.0f}"}
                if state.scaler.is_enabled():
                    rec |= {"loss_scale": state.scaler.get_scale(), "overflow_skips": state.overflow_skips}
                    postfix |= {"scale": f"{rec['loss_scale']:g}", "skips": state.overflow_skips}
                run.log("train", state.step, **rec)
                window = _Window()
            bar.update(time.time() - t_start, **postfix)

            out_of_time = rt.any(tc.max_minutes > 0 and (time.time() - t_start) / 60 >= tc.max_minutes)
            due = rt.any(bool(applied and tc.save_every_steps and state.step % tc.save_every_steps == 0) or
                         (tc.save_every_minutes > 0 and (time.time() - t_save) / 60 >= tc.save_every_minutes))
            if due or out_of_time:
                state.train_seconds = seconds_before + time.time() - t_start
                bar.write(_save(state, run, tc, rt, valid))
                last_saved, t_save = state.step, time.time()
            if state.early.stop:
                bar.write(f"early stop at step {state.step}: {_early_stop_reason(state, tc)}")
                break
            if out_of_time:
                bar.write(f"time limit of {tc.max_minutes:g} minutes reached at step {state.step}")
                break

        if state.step != last_saved:
            state.train_seconds = seconds_before + time.time() - t_start
            # Stopping on a signal saves at once: the dev evaluation waits for the next scheduled save.
            bar.write(_save(state, run, tc, rt, None if stop.signal else valid))
        if stop.signal is not None:
            bar.write(f"interrupted at step {state.step}; checkpoint saved. Continue with: "
                      f"aiayn train --resume {run.folder}")
    bar.close()
    return {"step": state.step, "run_dir": str(run.folder), "best_dev_loss": state.best_dev_loss,
            "best": {"metric": tc.best_metric, "value": state.early.best, "step": state.early.best_step},
            "stopped_early": state.early.stop, "elapsed_s": time.time() - t_start,
            "train_seconds": state.train_seconds, "interrupted_by": stop.signal}


def _save(state: TrainState, run: Run, tc: TrainConfig, rt: Runtime, valid: PreparedSplit | None) -> str:
    """The dev evaluation (if `valid`: selection.judge), then a step checkpoint, and checkpoint_best where the
    evaluation beat every earlier one. Returns a line to print."""
    scores, improved = judge(state, tc, rt, valid)
    msg = f"step {state.step}"
    if rt.is_main:
        if improved:  # before the step checkpoint: resuming from the previous one writes it again, the same
            run.save_best(state.step, state.model)
        path = run.save(state.step, state.model, state.state_dict(), tc.keep_last)
        msg += f": saved {path.name}"
        if scores:
            run.log("valid", state.step, **scores, improved=improved, evals_since_best=state.early.evals_since_best)
            msg += describe(scores, improved, state.early, tc, run.best.name)
    rt.barrier()  # nobody runs ahead (or exits) while the main process writes: the checkpoint exists for all after
    return msg


def _early_stop_reason(state: TrainState, tc: TrainConfig) -> str:
    return (f"dev {tc.best_metric} has not improved for {tc.patience} evaluations (best {state.early.best:.3f} at "
            f"step {state.early.best_step}, in {BEST})")
