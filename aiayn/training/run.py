"""A run on disk, written: the trainer's one handle on its run (Run), held from start to end (in a torchrun job every
process holds one; only the main one takes the lock and writes, the others read what it wrote), and what a fine-tuning
run starts from. Where things lie and reading them: aiayn.rundir.RunDir; the checkpoint files' format:
aiayn.training.checkpoint.

    run = Run.new(folder, main)                   refuses a folder that is a run already or holds anything else;
                                                  writes nothing yet (a start that fails later leaves nothing)
    with run.create(record, vocab): ...           the folder, the lock, the check again under it, interrupted writes'
                                                  temp files removed, vocabulary and config.json (run_record)
    with Run.resume(folder, saved, main) as run:  the lock; the data checked to be those the run started on
                                                  (run.data_dir); a fine-tuning run with no checkpoint yet: its
                                                  parent (run.parent), checked unchanged
    run.restore(model) -> (trainer state, path)   the newest resumable checkpoint (run.latest) into the model
    run.save(step, model, trainer_state, keep)    a step checkpoint, all but the newest `keep` dropped
    run.save_best(step, model)                    checkpoint_best (run.best)
    run.open_log(), run.log(kind, step, ...)      log.jsonl and TensorBoard
    average(paths, out)                           the mean of checkpoints (`aiayn average`, the quickstart, the report)

A run refuses to resume on data prepared again since it started (digests differ); one writer per run (RunLock).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiayn import files
from aiayn.config import ModelConfig
from aiayn.data.folder import prepared_sha256, read_meta
from aiayn.errors import CheckpointError, DataError, UsageError
from aiayn.model import Transformer
from aiayn.rundir import CHECKPOINT_DIR, CONFIG, VOCAB, RunDir, inference_checkpoint
from aiayn.training import checkpoint as ckpt

# ---------------------------------------------------------------------------------------------------------
# config.json: what a run is, written once when it starts.


def run_record(model: dict[str, Any], train: dict[str, Any], data_dir: Path, vocab_path: Path,
               parent: dict[str, Any] | None = None) -> dict[str, Any]:
    """What RUN/config.json holds: the model and training configs, what the run trains on, and for a fine-tuning run
    the checkpoint it started from (aiayn.training.checkpoint.parent_record)."""
    record = {"model": model, "train": train, "data": str(Path(data_dir).resolve()),
              "data_sha256": prepared_sha256(data_dir), "vocab_sha256": files.sha256_file(vocab_path),
              "languages": read_meta(data_dir).get("languages")}  # serve and export read them (data.run_languages)
    return record | ({"parent": parent} if parent else {})


def check_new(run_dir: Path) -> None:
    """Refuse to start a run in a folder that is a run already, or holds anything else."""
    run = RunDir(run_dir)
    if run.is_run:
        raise UsageError(f"{run_dir} is not empty: it is a run already; continue it with --resume {run_dir}, or "
                         "give a new --out")
    if not run.unstarted:
        raise UsageError(f"{run_dir} is not empty and is not a run directory; give a new or empty --out")


def _start(run_dir: Path, record: dict[str, Any], vocab_path: Path) -> None:
    """Write a new run's vocabulary and config.json (last: a run with a config.json has started). Call under the
    run's lock."""
    files.atomic_write(run_dir / VOCAB, lambda p: shutil.copyfile(vocab_path, p))
    files.write_json(run_dir / CONFIG, record)


def remove_stale_temps(run_dir: Path) -> list[Path]:
    """Delete the temp files interrupted writes left in the run (only the holder of its lock may call this)."""
    return files.remove_stale_temps(Path(run_dir), Path(run_dir) / CHECKPOINT_DIR)


class RunLock:
    """One writer per run directory: an exclusive lock (flock) on RUN/train.lock, held while a trainer uses the run.
    The OS drops it when the process ends however it ends (kill -9 included), so a lock never outlives its holder;
    the file itself only names the holder's PID for the error a second writer gets."""

    def __init__(self, run_dir: Path):
        self.path, self.fd = RunDir(run_dir).lock, None

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


# ---------------------------------------------------------------------------------------------------------
# log.jsonl (and TensorBoard).


class Logger:
    """RUN/log.jsonl lines (always) and TensorBoard scalars in RUN/tb (when tensorboard is installed); main process
    only."""

    def __init__(self, run_dir: Path, enabled: bool):
        self.enabled = enabled
        self.path = RunDir(run_dir).log_path
        self.tb = None
        if enabled:
            _drop_torn_line(self.path)
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except ImportError:
                pass

    def log(self, kind: str, step: int, **values: float) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": kind, "step": step, "time": time.time(), **values}) + "\n")
        if self.tb is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(f"{kind}/{k}", v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def _drop_torn_line(path: Path) -> None:
    """Cut a last line that a kill left half-written (no newline), so that lines appended after a resume stay JSON."""
    if not path.is_file():
        return
    with open(path, "rb+") as f:
        end = f.seek(0, 2)
        pos = end
        while pos > 0:  # read backwards from the end to the last newline
            begin = max(0, pos - 4096)
            f.seek(begin)
            chunk = f.read(pos - begin)
            if pos == end and chunk.endswith(b"\n"):
                return
            if (i := chunk.rfind(b"\n")) >= 0:
                f.truncate(begin + i + 1)
                return
            pos = begin
        f.truncate(0)


# ---------------------------------------------------------------------------------------------------------
# Run: the trainer's one handle on its run (see the module's docstring).


class Run:
    """One run directory held by its trainer, from Run.new + create or Run.resume to the end of its `with` block
    (which lets the lock go and closes the log)."""

    def __init__(self, folder: Path, main: bool = True):
        self.folder, self.main = Path(folder), main
        self.dir = RunDir(self.folder)  # what it reads
        self.data_dir: Path | None = None  # a resumed run's data, checked to be those it started on
        self.parent: Path | None = None  # the checkpoint a resumed fine-tuning run with no checkpoint starts from
        self._held = contextlib.ExitStack()  # the lock, from opening to the end of the `with` block
        self._log: Logger | None = None

    @classmethod
    def new(cls, folder: Path, main: bool = True) -> Run:
        """A run to start in `folder`: missing, empty, or left by a start interrupted before its config.json."""
        run = cls(folder, main)
        if main:
            check_new(run.folder)
        return run

    def create(self, record: dict[str, Any], vocab_path: Path) -> Run:
        """Create the run on disk (record: what config.json holds, run_record; vocab_path: the data's vocabulary)."""
        if self.main:
            self.folder.mkdir(parents=True, exist_ok=True)
        with self._locking():
            if self.main:
                check_new(self.folder)  # again under the lock: another process may have started it meanwhile
                self._remove_stale_temps()
                _start(self.folder, record, vocab_path)
        return self

    @classmethod
    def resume(cls, folder: Path, saved: dict[str, Any], main: bool = True) -> Run:
        """The run in `folder` (saved: its config.json, read_config), to continue where it stopped."""
        run = cls(folder, main)
        with run._locking():
            run.data_dir = run.dir.same_data(saved)
            # A fine-tuning run stopped before its first checkpoint starts again from its parent, as it first did.
            run.parent = run.dir.parent(saved) if run.latest is None else None
        return run

    @contextlib.contextmanager
    def _locking(self) -> Iterator[None]:
        """Take the run's lock (main process) for the block, and hold it after it until the run is closed; let it go
        at once if the block fails."""
        with contextlib.ExitStack() as stack:
            if self.main:
                stack.enter_context(RunLock(self.folder))
            yield
            self._held = stack.pop_all()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        self._held.close()

    def _remove_stale_temps(self) -> None:
        removed = remove_stale_temps(self.folder)
        if removed:
            print(f"removed {len(removed)} temp file(s) that interrupted writes had left in {self.folder} (e.g. "
                  f"{removed[0].name})", flush=True)

    @property
    def latest(self) -> Path | None:
        """The newest step checkpoint that has its trainer state beside it: where a resume continues."""
        return self.dir.latest(resumable=True)

    @property
    def best(self) -> Path:
        return self.dir.best

    def save(self, step: int, model: Transformer, trainer_state: dict[str, Any], keep_last: int) -> Path:
        """The step checkpoint of `model` and `trainer_state` at `step`, then all but the newest `keep_last` step
        checkpoints dropped. Main process only."""
        path = self.dir.step(step)
        ckpt.save_checkpoint(path, model.state_dict(), model.cfg, step, trainer_state)
        for old in self.dir.checkpoints[:-keep_last]:
            old.unlink(missing_ok=True)
            ckpt.state_path(old).unlink(missing_ok=True)
        return path

    def save_best(self, step: int, model: Transformer) -> None:
        """checkpoint_best: the weights of `model` at `step`. Main process only."""
        ckpt.save_weights(self.best, model.state_dict(), model.cfg, step)

    def restore(self, model: Transformer) -> tuple[dict[str, Any], Path] | None:
        """Where the run stopped: the temp files interrupted writes left are removed (main process), then the newest
        resumable checkpoint, if there is one, is loaded into `model`, each part checked to belong to this run first.
        Returns its trainer state (checkpoint.load_trainer_state) and path, or None at step 0."""
        if self.main:
            self._remove_stale_temps()
        path = self.latest
        if path is None:
            return None
        meta, cfg, shapes = ckpt.read_header(path)
        if cfg != model.cfg:
            differ = [k for k, v in cfg.to_dict().items() if getattr(model.cfg, k) != v]
            raise CheckpointError(f"{path} holds another model (differs in {', '.join(differ)}) than the run's "
                                  "config.json describes; it does not belong to this run: move it away")
        ckpt.check_shapes(path, cfg, shapes)
        model.load_state_dict(ckpt.load_weights(path)[0])
        trainer = ckpt.load_trainer_state(path)
        if meta.get("step") != str(trainer["step"]):
            raise CheckpointError(f"{path} is step {meta.get('step')} but its trainer state is step {trainer['step']}; "
                                  f"delete both {path.name} files to resume from the previous checkpoint")
        return trainer, path

    def open_log(self) -> None:
        """Start appending to log.jsonl (a line a kill left torn is cut first). Main process only writes."""
        self._log = Logger(self.folder, self.main)

    def log(self, kind: str, step: int, **values: Any) -> None:
        self._log.log(kind, step, **values)


# ---------------------------------------------------------------------------------------------------------
# Averaging checkpoints (paper: the last 5 for base, 20 for big).


def average(paths: list[Path], out: Path) -> Path:
    """The element-wise mean of checkpoints `paths` (checkpoint.average_checkpoints) written to `out`."""
    ckpt.save_weights(out, *ckpt.average_checkpoints(paths))
    return out


# ---------------------------------------------------------------------------------------------------------
# A fine-tuning run's parent (--init-from).


def parent_checkpoint(init_from: Path) -> tuple[Path, ModelConfig]:
    """--init-from RUN|CHECKPOINT -> (the checkpoint file: for a run the one translate picks, inference_checkpoint;
    its model config)."""
    init_from = Path(init_from)
    if not init_from.exists():
        raise CheckpointError(f"--init-from {init_from}: no such run directory or checkpoint file")
    path = inference_checkpoint(init_from)
    return path, ckpt.read_header(path)[1]


def check_parent_vocab(checkpoint: Path, data_vocab: Path) -> None:
    """Refuse to fine-tune a checkpoint on data prepared with another vocabulary: its token ids mean other pieces."""
    parent_vocab = RunDir.of(checkpoint).vocab
    ours, theirs = files.sha256_file(parent_vocab)[:12], files.sha256_file(data_vocab)[:12]
    if ours != theirs:
        raise DataError(f"the data's vocabulary {data_vocab} (sha256 {theirs}) is not the one {checkpoint} was "
                        f"trained with, {parent_vocab} (sha256 {ours}); a fine-tuned model keeps its parent's token "
                        f"ids: prepare the new data with `aiayn prepare --vocab {parent_vocab} ...`")


def trained_so_far(run: str | Path) -> tuple[int, float]:
    """(steps, training seconds) of a run up to its newest resumable checkpoint; (0, 0.0) with none yet."""
    last = RunDir(run).latest(resumable=True)
    if last is None:
        return 0, 0.0
    state = ckpt.load_trainer_state(last)
    return state["step"], state["train_seconds"]
