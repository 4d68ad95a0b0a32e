"""Checkpoints and run directories: the one place that reads and writes them.

A run directory (written by `aiayn train`) holds everything to resume, evaluate and translate:

    RUN_DIR/config.json                      model config + training config (JSON)
    RUN_DIR/vocab.model                      the shared SentencePiece vocabulary (copied from the data)
    RUN_DIR/checkpoints/step_00001000.safetensors   weights (model config in the safetensors metadata)
    RUN_DIR/checkpoints/step_00001000.state.pt      trainer state: optimizer, step, data position
    RUN_DIR/checkpoint_best.safetensors      lowest dev loss so far
    RUN_DIR/averaged.safetensors             `aiayn average` output (translate prefers it)
    RUN_DIR/log.jsonl, RUN_DIR/tb/           training/dev log lines; TensorBoard events
    RUN_DIR/train.lock                       one writer per run: the trainer holds a lock on it (RunLock)

Every file is written atomically (temp file in the same folder, fsync, rename), so a kill at any instant leaves
the previous checkpoint intact; temp files such a kill leaves behind are removed when training starts again.
Nothing is unpickled: weights are safetensors, trainer state is loaded with `torch.load(weights_only=True)`,
configs are JSON. What a checkpoint says about itself is untrusted: its model config is validated and compared with
the tensor shapes in the file's header before any tensor is allocated.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

from aiayn.config import ModelConfig
from aiayn.errors import CheckpointError, UserError

CHECKPOINT_DIR = "checkpoints"
BEST = "checkpoint_best.safetensors"
AVERAGED = "averaged.safetensors"
_STEP_RE = re.compile(r"step_(\d+)\.safetensors$")


_TEMP_RE = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # what _temp_beside makes: .NAME.XXXXXXXX.tmp


def _temp_beside(path: Path) -> Path:
    """An empty temp file in path's folder (so the rename is atomic), with the permissions a new file would get."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a checkpoint or output should read like any other file
    os.close(fd)
    return Path(tmp)


def _commit(tmp: Path, path: Path) -> None:
    """fsync tmp, rename it over path, fsync the folder: path is now the complete new file, even after a crash."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temp file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    try:
        write(tmp)
        _commit(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_text_output(path: str | Path | None) -> Iterator[TextIO]:
    """A UTF-8 text stream for a command's output: stdout for None or "-"; for a file, a temp file beside it that
    replaces it only when the block completes, so an interrupt or error leaves the previous file (or none), never a
    truncated one. Devices and pipes (/dev/stdout, a FIFO) are written directly: they cannot be replaced.

        with atomic_text_output(args.output) as out:
            out.write(...)
    """
    if path is None or str(path) == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    path = check_output_path(path)
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        with open(path, "w", encoding="utf-8") as f:
            yield f
        return
    tmp = _temp_beside(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            yield f
        _commit(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def check_output_path(path: str | Path) -> Path:
    """Refuse an output path whose folder does not exist, or that is a folder (call it before long work, too)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"cannot write {path}: it is a folder; give a file name")
    if not path.parent.is_dir():
        raise UserError(f"cannot write {path}: there is no folder {path.parent}")
    return path


def remove_stale_temps(run_dir: Path) -> list[Path]:
    """Delete the temp files that writes interrupted by a kill left in a run directory (each can be as large as a
    checkpoint). Only the holder of the run's lock may call this: another writer's temp files are live."""
    removed = []
    for folder in (Path(run_dir), Path(run_dir) / CHECKPOINT_DIR):
        if folder.is_dir():
            for p in folder.iterdir():
                if _TEMP_RE.match(p.name) and p.is_file():
                    p.unlink(missing_ok=True)
                    removed.append(p)
    return removed


LOCK_FILE = "train.lock"


def unstarted(run_dir: Path) -> bool:
    """Whether run_dir is free for a new run: missing, empty, or holding only what a start interrupted before its
    config.json leaves (the vocabulary copy, the lock file, temp files)."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return True
    if not run_dir.is_dir():
        return False
    return all(p.name in ("vocab.model", LOCK_FILE) or _TEMP_RE.match(p.name) for p in run_dir.iterdir())


class RunLock:
    """One writer per run directory: an exclusive lock (flock) on RUN/train.lock, held while a trainer uses the run.
    The OS drops it when the process ends however it ends (kill -9 included), so a lock never outlives its holder;
    the file itself only names the holder's PID for the error a second writer gets."""

    def __init__(self, run_dir: Path):
        self.path, self.fd = Path(run_dir) / LOCK_FILE, None

    def __enter__(self) -> RunLock:
        try:
            import fcntl
        except ImportError:  # not a POSIX system: no lock (aiayn trains on Linux)
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process holds it
            pid = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise CheckpointError(
                f"{self.path.parent} is in use by another training process (PID {pid}); wait for it to finish or "
                f"stop it (kill {pid}: it saves a checkpoint), then resume it with `aiayn train --resume "
                f"{self.path.parent}`") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the last descriptor releases the flock
            self.fd = None


def write_json(path: Path, obj) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n"))


def read_run_config(run_dir: Path) -> dict:
    """RUN/config.json: {"model": ..., "train": ..., "data": ...}, with a clear error if it is missing or broken."""
    run_dir = Path(run_dir)
    path = run_dir / "config.json"
    if not path.is_file():
        if run_dir.is_dir() and (run_dir / "vocab.model").is_file():
            raise CheckpointError(f"{run_dir} was interrupted before its config was written (no config.json): start "
                                  f"it again with `aiayn train --data DIR --out {run_dir} ...`, which reuses it")
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


def check_shapes(path: Path, cfg: ModelConfig, shapes: dict[str, list[int]]) -> None:
    """Refuse a checkpoint whose tensors are not exactly those of the model its config describes (compared on the
    meta device: no memory is allocated)."""
    from aiayn.model import Transformer

    with torch.device("meta"):
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
    ok = (isinstance(trainer, dict) and isinstance(trainer.get("optimizer"), dict)
          and isinstance(trainer.get("sampler"), dict)
          and all(isinstance(trainer["sampler"].get(k), int) for k in ("epoch", "position"))
          and isinstance(trainer.get("step"), int) and trainer["step"] >= 0
          and isinstance(trainer.get("best_dev_loss"), float))
    if not ok:
        raise CheckpointError(f"trainer state {path} lacks the optimizer, sampler, step or best_dev_loss entry (or "
                              f"one has the wrong type); delete {weights_path.name} and this file to resume from the "
                              "previous checkpoint")
    return trainer


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
    _, cfg, shapes = read_header(ckpt)
    check_shapes(ckpt, cfg, shapes)  # before the model or its weights take any memory
    vocab = Vocab.load(find_vocab(ckpt))
    if len(vocab) != cfg.vocab_size:
        raise CheckpointError(f"vocabulary {vocab.model_path} has {len(vocab)} entries but the model of {ckpt} "
                              f"expects {cfg.vocab_size}; it belongs to another run")
    state, _, _ = load_weights(ckpt)
    model = Transformer(cfg)
    model.load_state_dict(state)
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
