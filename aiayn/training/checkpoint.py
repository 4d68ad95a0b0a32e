"""Checkpoint files: their format, the one place that reads and writes model weights and trainer state.

    save_weights / load_weights     model weights as safetensors, the model config in the file's metadata
    read_header / check_shapes      what a checkpoint says about itself, validated before any tensor is allocated
    save_checkpoint / load_trainer_state   a step checkpoint: trainer state (optimizer, step, data position, fp16's
                                    loss scaler, the best dev evaluation) beside the weights (state_path)
    average_checkpoints             the paper's averaging of the last checkpoints
    load_parent / parent_record     a fine-tuning run's parent checkpoint: its weights, what the run remembers of it

Every file is written atomically (aiayn.files), so a kill at any instant leaves the previous checkpoint intact.
Nothing is unpickled: weights are safetensors, trainer state is loaded with `torch.load(weights_only=True)`.
A checkpoint that a pre-release aiayn wrote in an older format is refused with one error naming the commit that reads
it (PRE_RELEASE). Where the files lie in a run, and loading a run's model to decode: aiayn.rundir.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file
from torch.overrides import TorchFunctionMode

from aiayn.config import ModelConfig
from aiayn.errors import CheckpointError, UserError
from aiayn.files import atomic_write, sha256_file

# ---------------------------------------------------------------------------------------------------------
# Weights.


def save_weights(path: Path, state_dict: dict[str, torch.Tensor], cfg: ModelConfig, step: int | None = None) -> None:
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
    meta = {"config": cfg.to_json(), "format": "aiayn-1"}
    if step is not None:
        meta["step"] = str(step)
    atomic_write(path, lambda p: save_file(tensors, str(p), metadata=meta))


def read_header(path: Path) -> tuple[dict[str, str], ModelConfig, dict[str, list[int]]]:
    """(metadata, validated model config, tensor shapes) of a .safetensors checkpoint, from its header alone: nothing
    the file describes is allocated yet."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            shapes = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint {path} is corrupt or not a safetensors file ({e}). Delete it to fall back to an earlier "
            "checkpoint of the run, or pass another checkpoint."
        ) from e
    if "config" not in meta:
        raise CheckpointError(f"{path} has no aiayn model config in its metadata; was it written by aiayn?")
    try:
        cfg = ModelConfig.from_dict(json.loads(meta["config"]))
    except (json.JSONDecodeError, UserError) as e:
        raise CheckpointError(f"{path}: the model config in its metadata is invalid ({e}); the file is damaged or "
                              "was not written by aiayn") from None
    return meta, cfg, shapes


class WeightsToCome(TorchFunctionMode):
    """Modules built for their shapes alone, or for weights loaded next: the random initialization is skipped (on the
    meta device torch's normal_ and uniform_ load torch.compile's machinery, a second of every `aiayn translate`'s
    start; elsewhere it would be thrown away: ~50 ms of a small model's load)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # torch.nn.init's (tensor, ...): xavier_uniform_ and the like call uniform_ where no mode sees it; the methods
        if getattr(func, "__module__", None) == "torch.nn.init" or getattr(func, "__name__", None) in (
                "normal_", "uniform_"):
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def check_shapes(path: Path, cfg: ModelConfig, shapes: dict[str, list[int]]) -> None:
    """Refuse a checkpoint whose tensors are not exactly those of the model its config describes (compared on the
    meta device: no memory is allocated)."""
    from aiayn.model import Transformer

    with torch.device("meta"), WeightsToCome():
        expected = {k: list(v.shape) for k, v in Transformer(cfg).state_dict().items()}
    missing, unexpected = sorted(set(expected) - set(shapes)), sorted(set(shapes) - set(expected))
    wrong = [f"{k} is {shapes[k]}, the config needs {expected[k]}" for k in sorted(expected.keys() & shapes.keys())
             if shapes[k] != expected[k]]
    if missing or unexpected or wrong:
        what = "; ".join(filter(None, [
            f"{len(wrong)} tensors of another shape (e.g. {wrong[0]})" if wrong else "",
            f"{len(missing)} tensors missing (e.g. {missing[:2]})" if missing else "",
            f"{len(unexpected)} unexpected (e.g. {unexpected[:2]})" if unexpected else ""]))
        raise CheckpointError(f"{path} does not match the model its config describes: {what}. The file is damaged, "
                              "or was written by another version of aiayn (load it with that version).")


def load_weights(path: Path) -> tuple[dict[str, torch.Tensor], ModelConfig, dict[str, str]]:
    """(state dict, model config, metadata) of one .safetensors checkpoint, with a clear error if corrupt."""
    meta, cfg, _ = read_header(path)
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint {path} is corrupt or not a safetensors file ({e}). Delete it to fall back to an earlier "
            "checkpoint of the run, or pass another checkpoint."
        ) from e
    return state, cfg, meta


# ---------------------------------------------------------------------------------------------------------
# Step checkpoints: weights and trainer state side by side (where: aiayn.rundir).


def state_path(weights_path: Path) -> Path:
    """The trainer state beside a step checkpoint's weights."""
    return Path(str(weights_path).removesuffix(".safetensors") + ".state.pt")


def save_checkpoint(path: Path, model_state: dict[str, torch.Tensor], cfg: ModelConfig, step: int,
                    trainer_state: dict) -> None:
    """A step checkpoint at `path`: its trainer state beside it (state_path), then the weights (each atomically): the
    weights file appearing marks a complete checkpoint."""
    atomic_write(state_path(path), lambda p: torch.save(trainer_state, p))
    save_weights(path, model_state, cfg, step)


# The trainer state's entries that pre-release versions of aiayn did not write yet (fp16's loss scaler and its skip
# count; the early-stopping state); this version reads none of those older checkpoints. The commit of aiayn 0.1.0
# named here is the last that reads them: a run resumed with it saves its next checkpoint in this format.
PRE_RELEASE_ENTRIES = ("scaler", "overflow_skips", "early_stopping")
PRE_RELEASE = "aiayn 0.1.0 at commit 6fa8d35"


def load_trainer_state(weights_path: Path) -> dict:
    """The trainer state beside a step checkpoint, checked to hold what resuming reads."""
    path = state_path(weights_path)
    if not path.is_file():
        raise CheckpointError(f"{weights_path} has no trainer state beside it ({path.name}); cannot resume from it")
    try:
        trainer = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated/garbage files
        raise CheckpointError(
            f"trainer state {path} is corrupt ({type(e).__name__}: {e}). Delete {weights_path.name} and this file "
            "to resume from the previous checkpoint."
        ) from e
    missing = [k for k in PRE_RELEASE_ENTRIES if k not in trainer] if isinstance(trainer, dict) else []
    if missing and all(k in trainer for k in ("optimizer", "sampler", "step")):
        raise CheckpointError(f"trainer state {path} was written by a pre-release aiayn (it has no "
                              f"{', '.join(missing)} entry), which this version does not resume: resume the run with "
                              f"{PRE_RELEASE} until its next checkpoint (saved in this format), or start it again")
    ok = (isinstance(trainer, dict) and isinstance(trainer.get("optimizer"), dict)
          and isinstance(trainer.get("sampler"), dict)
          and all(isinstance(trainer["sampler"].get(k), int) for k in ("epoch", "position"))
          and isinstance(trainer.get("step"), int) and trainer["step"] >= 0
          and isinstance(trainer.get("best_dev_loss"), float) and isinstance(trainer.get("train_seconds"), float)
          and isinstance(trainer.get("scaler"), dict) and isinstance(trainer.get("overflow_skips"), int)
          and isinstance(trainer.get("early_stopping"), dict)
          and set(trainer["early_stopping"]) == {"best", "best_step", "evals_since_best"})
    if not ok:
        raise CheckpointError(f"trainer state {path} lacks one of the optimizer, sampler, step, best_dev_loss, "
                              "train_seconds, scaler, overflow_skips or early_stopping entries (or one has the wrong "
                              f"type); delete {weights_path.name} and this file to resume from the previous checkpoint")
    return trainer


# ---------------------------------------------------------------------------------------------------------
# Averaging (paper: last 5 checkpoints for base, last 20 for big).


def average_checkpoints(paths: list[Path]) -> tuple[dict[str, torch.Tensor], ModelConfig]:
    """Element-wise mean of the weights of several checkpoints of one model (accumulated in fp64)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    cfg0 = None
    for p in paths:
        state, cfg, _ = load_weights(p)
        if cfg0 is None:
            cfg0 = cfg
        elif cfg != cfg0:
            raise CheckpointError(f"{p} has a different model config from {paths[0]}; cannot average them")
        for k, v in state.items():
            total[k] = total[k] + v.double() if k in total else v.double()
    return {k: (v / len(paths)).to(torch.float32) for k, v in total.items()}, cfg0


# ---------------------------------------------------------------------------------------------------------
# A fine-tuning run's parent (--init-from).


def load_parent(model: torch.nn.Module, path: Path) -> None:
    """The weights of a fine-tuning run's parent checkpoint into `model` (checked against its shapes first)."""
    _, _, shapes = read_header(path)
    check_shapes(path, model.cfg, shapes)
    model.load_state_dict(load_weights(path)[0])


def parent_record(checkpoint: Path) -> dict[str, Any]:
    """What a fine-tuning run remembers of the checkpoint it started from: path, step (None for an average) and
    SHA-256."""
    step = read_header(checkpoint)[0].get("step")
    return {"checkpoint": str(Path(checkpoint).resolve()), "step": None if step is None else int(step),
            "sha256": sha256_file(checkpoint)}
