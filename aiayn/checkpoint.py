"""Checkpoints and run directories: the one place that reads and writes them.

A run directory (written by `aiayn train`) holds everything to resume, evaluate and translate:

    RUN_DIR/config.json                      model config + training config (JSON)
    RUN_DIR/vocab.model                      the shared SentencePiece vocabulary (copied from the data)
    RUN_DIR/checkpoints/step_00001000.safetensors   weights (model config in the safetensors metadata)
    RUN_DIR/checkpoints/step_00001000.state.pt      trainer state: optimizer, step, data position
    RUN_DIR/checkpoint_best.safetensors      lowest dev loss so far
    RUN_DIR/averaged.safetensors             `aiayn average` output (translate prefers it)
    RUN_DIR/log.jsonl, RUN_DIR/tb/           training/dev log lines; TensorBoard events

Every file is written atomically (temp file in the same folder, fsync, rename), so a kill at any instant leaves
the previous checkpoint intact. Nothing is unpickled: weights are safetensors, trainer state is loaded with
`torch.load(weights_only=True)`, configs are JSON.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

from aiayn.config import ModelConfig
from aiayn.errors import CheckpointError

CHECKPOINT_DIR = "checkpoints"
BEST = "checkpoint_best.safetensors"
AVERAGED = "averaged.safetensors"
_STEP_RE = re.compile(r"step_(\d+)\.safetensors$")


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temp file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path: Path, obj) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n"))


def read_run_config(run_dir: Path) -> dict:
    """RUN/config.json: {"model": ..., "train": ..., "data": ...}, with a clear error if it is missing or broken."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{run_dir} is not a run directory (no config.json); start a run with "
                              "`aiayn train --data DIR --out RUN`")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); it was damaged outside aiayn") from None
    if not isinstance(saved, dict) or not {"model", "train", "data"} <= set(saved):
        raise CheckpointError(f"{path} lacks the model, train or data section; it was not written by aiayn train")
    return saved


# ---------------------------------------------------------------------------------------------------------
# Weights.


def save_weights(path: Path, state_dict: dict[str, torch.Tensor], cfg: ModelConfig, step: int | None = None) -> None:
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
    meta = {"config": cfg.to_json(), "format": "aiayn-1"}
    if step is not None:
        meta["step"] = str(step)
    atomic_write(path, lambda p: save_file(tensors, str(p), metadata=meta))


def load_weights(path: Path) -> tuple[dict[str, torch.Tensor], ModelConfig, dict[str, str]]:
    """(state dict, model config, metadata) of one .safetensors checkpoint, with a clear error if corrupt."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint {path} is corrupt or not a safetensors file ({e}). Delete it to fall back to an earlier "
            "checkpoint of the run, or pass another checkpoint."
        ) from e
    if "config" not in meta:
        raise CheckpointError(f"{path} has no aiayn model config in its metadata; was it written by aiayn?")
    return state, ModelConfig.from_dict(json.loads(meta["config"])), meta


# ---------------------------------------------------------------------------------------------------------
# Run directories.


def checkpoint_paths(run_dir: Path) -> list[Path]:
    """The step checkpoints of a run, oldest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    found = [(int(m.group(1)), p) for p in folder.glob("step_*.safetensors") if (m := _STEP_RE.search(p.name))]
    return [p for _, p in sorted(found)]


def step_checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"step_{step:08d}.safetensors"


def state_path(weights_path: Path) -> Path:
    return Path(str(weights_path).removesuffix(".safetensors") + ".state.pt")


def save_checkpoint(run_dir: Path, model_state: dict[str, torch.Tensor], cfg: ModelConfig, step: int,
                    trainer_state: dict, keep_last: int) -> Path:
    """Write trainer state, then weights (each atomically): the weights file appearing marks a complete
    checkpoint. Then drop all but the newest `keep_last` checkpoints."""
    path = step_checkpoint_path(run_dir, step)
    atomic_write(state_path(path), lambda p: torch.save(trainer_state, p))
    save_weights(path, model_state, cfg, step)
    if keep_last > 0:
        for old in checkpoint_paths(run_dir)[:-keep_last]:
            old.unlink(missing_ok=True)
            state_path(old).unlink(missing_ok=True)
    return path


def load_trainer_state(weights_path: Path) -> dict:
    path = state_path(weights_path)
    if not path.is_file():
        raise CheckpointError(f"{weights_path} has no trainer state beside it ({path.name}); cannot resume from it")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated/garbage files
        raise CheckpointError(
            f"trainer state {path} is corrupt ({type(e).__name__}: {e}). Delete {weights_path.name} and this file "
            "to resume from the previous checkpoint."
        ) from e


def latest_checkpoint(run_dir: Path, resumable: bool = False) -> Path | None:
    """Newest step checkpoint; with resumable=True, the newest that also has its trainer state."""
    paths = [p for p in checkpoint_paths(run_dir) if not resumable or state_path(p).is_file()]
    return paths[-1] if paths else None


def inference_checkpoint(path: Path) -> Path:
    """A checkpoint file, or for a run directory: averaged, else best, else the newest step checkpoint."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise CheckpointError(f"{path} is neither a checkpoint file nor a run directory")
    for name in (AVERAGED, BEST):
        if (path / name).is_file():
            return path / name
    last = latest_checkpoint(path)
    if last is None:
        raise CheckpointError(f"run directory {path} has no checkpoint yet; train it first (aiayn train)")
    return last


def find_vocab(checkpoint: Path) -> Path:
    """vocab.model of the run a checkpoint belongs to (beside it, or one or two folders up)."""
    start = Path(checkpoint).resolve()
    for folder in [start if start.is_dir() else start.parent, *start.parents][:3]:
        if (folder / "vocab.model").is_file():
            return folder / "vocab.model"
    raise CheckpointError(f"no vocab.model found beside {checkpoint} or in its run directory")


def load_for_inference(path: Path, device: str | torch.device = "cpu"):
    """(model in eval mode, vocabulary, config) from a run directory or a checkpoint file."""
    from aiayn.data import Vocab
    from aiayn.model import Transformer

    ckpt = inference_checkpoint(Path(path))
    state, cfg, _ = load_weights(ckpt)
    model = Transformer(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{ckpt} does not match the model its config describes ({len(missing)} tensors missing, e.g. "
            f"{missing[:2]}; {len(unexpected)} unexpected, e.g. {unexpected[:2]}): was it written by another "
            "version of aiayn? Load it with that version."
        )
    vocab = Vocab.load(find_vocab(ckpt))
    if len(vocab) != cfg.vocab_size:
        raise CheckpointError(f"vocabulary has {len(vocab)} entries but the model expects {cfg.vocab_size}")
    return model.to(device).eval(), vocab, cfg


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
