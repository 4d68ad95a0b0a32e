"""The run directory: its layout, written and read here only.

A run directory (written by `aiayn train`) holds everything to resume, evaluate and translate:

    RUN/config.json                                   model config, training config, the data it trains on (path,
                                                      content digest), the vocabulary's SHA-256 and, when
                                                      fine-tuned (--init-from), its parent checkpoint (path, step,
                                                      SHA-256)
    RUN/vocab.model                                   the shared SentencePiece vocabulary (copied from the data)
    RUN/checkpoints/step_00001000.safetensors         weights (model config in the safetensors metadata)
    RUN/checkpoints/step_00001000.state.pt            trainer state: optimizer, step, data position
    RUN/checkpoint_best.safetensors                   best dev evaluation so far (--best-metric: loss, bleu, chrf)
    RUN/averaged.safetensors                          `aiayn average` output (translate prefers it)
    RUN/shortlist.safetensors                         `aiayn shortlist` output: the lexical shortlist that
                                                      `translate --shortlist` and `serve --shortlist` decode with
    RUN/log.jsonl, RUN/tb/                            training/dev log lines; TensorBoard events
    RUN/train.lock                                    one writer per run: the trainer holds a lock on it (RunLock)

config.json is written last when a run starts: a folder with it is a run. A run refuses to resume on data prepared
again since it started (digests differ). The prepared-data folder it trains on has its own format
(aiayn.data.folder); each format recognises the other and says so when one is given for the other. The trainer holds
its run through one object, aiayn.run.Run, which writes with the functions here; everything else only reads.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from aiayn import files
from aiayn.data.folder import META_FILE, RUN_CONFIG, prepared_sha256, read_meta
from aiayn.data.vocab import MODEL_FILE
from aiayn.errors import CheckpointError, DataError, UsageError

CONFIG = RUN_CONFIG
VOCAB = MODEL_FILE
CHECKPOINT_DIR = "checkpoints"
BEST = "checkpoint_best.safetensors"
AVERAGED = "averaged.safetensors"
SHORTLIST = "shortlist.safetensors"
LOG = "log.jsonl"
LOCK_FILE = "train.lock"
_STEP_RE = re.compile(r"step_(\d+)\.safetensors$")


# ---------------------------------------------------------------------------------------------------------
# config.json: what a run is.


def run_record(model: dict[str, Any], train: dict[str, Any], data_dir: Path, vocab_path: Path,
               parent: dict[str, Any] | None = None) -> dict[str, Any]:
    """What RUN/config.json holds: the model and training configs, what the run trains on, and for a fine-tuning run
    the checkpoint it started from (aiayn.checkpoint.parent_record)."""
    record = {"model": model, "train": train, "data": str(Path(data_dir).resolve()),
              "data_sha256": prepared_sha256(data_dir), "vocab_sha256": files.sha256_file(vocab_path),
              "languages": read_meta(data_dir).get("languages")}  # serve and export read them (data.run_languages)
    return record | ({"parent": parent} if parent else {})


def check_parent(run_dir: Path, saved: dict[str, Any]) -> Path | None:
    """The parent checkpoint of a fine-tuning run (None for a run from scratch), refused if it changed since the run
    started."""
    parent = saved.get("parent")
    if parent is None:
        return None
    path = Path(parent["checkpoint"])
    if not path.is_file() or files.sha256_file(path) != parent["sha256"]:
        now = "another file now" if path.is_file() else "gone"
        raise CheckpointError(f"{run_dir} was started from {path}, which is {now}; restore it, or start the "
                              "fine-tuning again (aiayn train --init-from ...)")
    return path


def start(run_dir: Path, record: dict[str, Any], vocab_path: Path) -> None:
    """Write a new run's vocabulary and config.json (last: a run with a config.json has started). Call under the
    run's lock."""
    files.atomic_write(run_dir / VOCAB, lambda p: shutil.copyfile(vocab_path, p))
    files.write_json(run_dir / CONFIG, record)


def read_config(run_dir: Path) -> dict[str, Any]:
    """RUN/config.json, with a clear error if it is missing or broken (or the folder is prepared data)."""
    run_dir = Path(run_dir)
    path = run_dir / CONFIG
    if not path.is_file():
        if (run_dir / META_FILE).is_file():
            raise CheckpointError(f"{run_dir} is a prepared-data directory, not a run directory; train on it with "
                                  f"`aiayn train --data {run_dir} --out RUN`")
        if run_dir.is_dir() and (run_dir / VOCAB).is_file():
            raise CheckpointError(f"{run_dir} was interrupted before its config was written (no {CONFIG}): start "
                                  f"it again with `aiayn train --data DIR --out {run_dir} ...`, which reuses it")
        raise CheckpointError(f"{run_dir} is not a run directory (no {CONFIG}); start a run with "
                              "`aiayn train --data DIR --out RUN`")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); it was damaged outside aiayn") from None
    keys = {"model", "train", "data", "data_sha256", "vocab_sha256"}
    if not isinstance(saved, dict) or not keys <= set(saved):
        raise CheckpointError(f"{path} lacks one of {', '.join(sorted(keys))}; it was not written by aiayn train")
    return saved


def is_run(folder: Path) -> bool:
    return (Path(folder) / CONFIG).is_file()


def unstarted(run_dir: Path) -> bool:
    """Whether run_dir is free for a new run: missing, empty, or holding only what a start interrupted before its
    config.json leaves (the vocabulary copy, the lock file, temp files)."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return True
    if not run_dir.is_dir():
        return False
    return all(p.name in (VOCAB, LOCK_FILE) or files.is_temp(p) for p in run_dir.iterdir())


def check_new(run_dir: Path) -> None:
    """Refuse to start a run in a folder that is a run already, or holds anything else."""
    if is_run(run_dir):
        raise UsageError(f"{run_dir} is not empty: it is a run already; continue it with --resume {run_dir}, or "
                         "give a new --out")
    if not unstarted(run_dir):
        raise UsageError(f"{run_dir} is not empty and is not a run directory; give a new or empty --out")


def check_same_data(run_dir: Path, saved: dict[str, Any]) -> Path:
    """The data folder of the run, refused if it holds other data or another vocabulary than the run started with
    (data prepared again in the same folder): the run would silently continue on another corpus, and translate would
    decode with the old vocabulary."""
    data_dir = Path(str(saved["data"]))
    run_vocab, data_vocab = run_dir / VOCAB, data_dir / VOCAB
    if not run_vocab.is_file():
        raise CheckpointError(f"{run_vocab} is missing; the run directory was damaged")
    if not data_vocab.is_file():
        raise DataError(f"{run_dir} was trained on {data_dir}, which holds no prepared data any more (no "
                        f"{VOCAB}); restore the data the run started on")
    ours = files.sha256_file(run_vocab)
    fix = ("Restore the data the run started on, or start a new run on the new data "
           "(aiayn train --data DIR --out NEW_RUN)")
    if files.sha256_file(data_vocab) != ours or saved["vocab_sha256"] != ours:
        raise DataError(f"{data_dir} now has another vocabulary than the one {run_dir} was trained with ({VOCAB} "
                        "differs): the data were prepared again since the run started. Resuming would train on other "
                        f"token ids while translate decodes with the run's vocabulary. {fix}")
    if saved["data_sha256"] != prepared_sha256(data_dir):
        raise DataError(f"{data_dir} holds other data than {run_dir} was trained on (its files differ from those "
                        "the run started with: prepared again from other text or with other options). Resuming would "
                        f"continue on another corpus. {fix}")
    return data_dir


def remove_stale_temps(run_dir: Path) -> list[Path]:
    """Delete the temp files interrupted writes left in the run (only the holder of its lock may call this)."""
    return files.remove_stale_temps(Path(run_dir), Path(run_dir) / CHECKPOINT_DIR)


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


# ---------------------------------------------------------------------------------------------------------
# Checkpoints: where they are.


def checkpoint_paths(run_dir: Path) -> list[Path]:
    """The step checkpoints of a run, oldest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    found = [(int(m.group(1)), p) for p in folder.glob("step_*.safetensors") if (m := _STEP_RE.search(p.name))]
    return [p for _, p in sorted(found)]


def step_checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"step_{step:08d}.safetensors"


def state_path(weights_path: Path) -> Path:
    """The trainer state beside a step checkpoint's weights."""
    return Path(str(weights_path).removesuffix(".safetensors") + ".state.pt")


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
        if (path / META_FILE).is_file():
            raise CheckpointError(f"{path} is a prepared-data directory, not a run directory; train a model on it "
                                  f"first (aiayn train --data {path} --out RUN)")
        raise CheckpointError(f"run directory {path} has no checkpoint yet; train it first (aiayn train)")
    return last


def find_vocab(checkpoint: Path) -> Path:
    """vocab.model of the run a checkpoint belongs to (beside it, or one or two folders up)."""
    start_at = Path(checkpoint).resolve()
    for folder in [start_at if start_at.is_dir() else start_at.parent, *start_at.parents][:3]:
        if (folder / VOCAB).is_file():
            return folder / VOCAB
    raise CheckpointError(f"no {VOCAB} found beside {checkpoint} or in its run directory")


def shortlist_path(checkpoint: Path) -> Path:
    """Where the run a checkpoint (or run directory) belongs to keeps its shortlist (it may not exist yet)."""
    return find_vocab(checkpoint).parent / SHORTLIST


# ---------------------------------------------------------------------------------------------------------
# log.jsonl (and TensorBoard).


class Logger:
    """RUN/log.jsonl lines (always) and TensorBoard scalars in RUN/tb (when tensorboard is installed); main process
    only."""

    def __init__(self, run_dir: Path, enabled: bool):
        self.enabled = enabled
        self.path = Path(run_dir) / LOG
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


def read_log(run_dir: Path) -> list[dict[str, Any]]:
    """Every record of RUN/log.jsonl, oldest first."""
    path = Path(run_dir) / LOG
    if not path.is_file():
        raise CheckpointError(f"{run_dir} has no {LOG}; is it a run directory of `aiayn train`?")
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: a line is not JSON ({e}); the log was damaged outside aiayn") from None


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
