"""A run on disk: its layout, its one writer (Run) and what its readers find in it. The only module that knows where
a run keeps anything; the checkpoint files' own format (weights, trainer state, headers, shapes, averaging) is
aiayn.training.checkpoint's.

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
    RUN/distill/                                      `aiayn distill`'s teacher translations, distilled data, recipe
    RUN/train.lock                                    one writer per run: the trainer holds a lock on it (RunLock)

config.json is written last when a run starts: a folder with it is a run. A run refuses to resume on data prepared
again since it started (digests differ). The prepared-data folder it trains on has its own format
(aiayn.data.folder); each recognises the other and says so when one is given for the other.

The trainer writes through one Run, held from start to end (in a torchrun job every process holds one; only the
main one takes the lock and writes, the others read what it wrote):

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

Everything else only reads: read_config, is_run, checkpoint_paths, latest_checkpoint, read_log, and for decoding
inference_checkpoint / find_vocab / load_for_inference (a run or checkpoint -> model, vocabulary, config).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from aiayn import files
from aiayn.config import ModelConfig
from aiayn.data.folder import META_FILE, RUN_CONFIG, prepared_sha256, read_meta
from aiayn.data.vocab import MODEL_FILE, Vocab
from aiayn.errors import CheckpointError, DataError, UsageError
from aiayn.model import Transformer
from aiayn.training import checkpoint as ckpt

CONFIG = RUN_CONFIG
VOCAB = MODEL_FILE
CHECKPOINT_DIR = "checkpoints"
BEST = "checkpoint_best.safetensors"
AVERAGED = "averaged.safetensors"
SHORTLIST = "shortlist.safetensors"
DISTILL = "distill"  # a distilled student's run: the teacher's translations and the data (aiayn distill)
LOG = "log.jsonl"
LOCK_FILE = "train.lock"
_STEP_RE = re.compile(r"step_(\d+)\.safetensors$")


# ---------------------------------------------------------------------------------------------------------
# config.json: what a run is.


def run_record(model: dict[str, Any], train: dict[str, Any], data_dir: Path, vocab_path: Path,
               parent: dict[str, Any] | None = None) -> dict[str, Any]:
    """What RUN/config.json holds: the model and training configs, what the run trains on, and for a fine-tuning run
    the checkpoint it started from (aiayn.training.checkpoint.parent_record)."""
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
    return all(p.name in (VOCAB, LOCK_FILE, DISTILL) or files.is_temp(p) for p in run_dir.iterdir())


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
# Checkpoints: where they are, and the model a reader decodes with.


def checkpoint_paths(run_dir: Path) -> list[Path]:
    """The step checkpoints of a run, oldest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    found = [(int(m.group(1)), p) for p in folder.glob("step_*.safetensors") if (m := _STEP_RE.search(p.name))]
    return [p for _, p in sorted(found)]


def step_checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"step_{step:08d}.safetensors"


def latest_checkpoint(run_dir: Path, resumable: bool = False) -> Path | None:
    """Newest step checkpoint; with resumable=True, the newest that also has its trainer state."""
    paths = [p for p in checkpoint_paths(run_dir) if not resumable or ckpt.state_path(p).is_file()]
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


def load_for_inference(path: Path, device: str | torch.device = "cpu") -> tuple[Transformer, Vocab, ModelConfig]:
    """(model in eval mode, vocabulary, config) from a run directory (inference_checkpoint) or a checkpoint file: the
    header and shapes checked first, then the vocabulary, then the weights (what aiayn.decoding.inference.load
    converts)."""
    path = inference_checkpoint(Path(path))
    _, cfg, shapes = ckpt.read_header(path)
    ckpt.check_shapes(path, cfg, shapes)  # before the model or its weights take any memory
    vocab = Vocab.load(find_vocab(path))
    if len(vocab) != cfg.vocab_size:
        raise CheckpointError(f"vocabulary {vocab.model_path} has {len(vocab)} entries but the model of {path} "
                              f"expects {cfg.vocab_size}; it belongs to another run")
    model = Transformer(cfg)
    model.load_state_dict(ckpt.load_weights(path)[0])
    return model.to(device).eval(), vocab, cfg


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
    parent_vocab = find_vocab(checkpoint)
    ours, theirs = files.sha256_file(parent_vocab)[:12], files.sha256_file(data_vocab)[:12]
    if ours != theirs:
        raise DataError(f"the data's vocabulary {data_vocab} (sha256 {theirs}) is not the one {checkpoint} was "
                        f"trained with, {parent_vocab} (sha256 {ours}); a fine-tuned model keeps its parent's token "
                        f"ids: prepare the new data with `aiayn prepare --vocab {parent_vocab} ...`")


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


# ---------------------------------------------------------------------------------------------------------
# Run: the trainer's one handle on its run (see the module's docstring).


class Run:
    """One run directory held by its trainer, from Run.new + create or Run.resume to the end of its `with` block
    (which lets the lock go and closes the log)."""

    def __init__(self, folder: Path, main: bool = True):
        self.folder, self.main = Path(folder), main
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
                start(self.folder, record, vocab_path)
        return self

    @classmethod
    def resume(cls, folder: Path, saved: dict[str, Any], main: bool = True) -> Run:
        """The run in `folder` (saved: its config.json, read_config), to continue where it stopped."""
        run = cls(folder, main)
        with run._locking():
            run.data_dir = check_same_data(run.folder, saved)
            # A fine-tuning run stopped before its first checkpoint starts again from its parent, as it first did.
            run.parent = check_parent(run.folder, saved) if run.latest is None else None
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
        return latest_checkpoint(self.folder, resumable=True)

    @property
    def best(self) -> Path:
        return self.folder / BEST

    def save(self, step: int, model: Transformer, trainer_state: dict[str, Any], keep_last: int) -> Path:
        """The step checkpoint of `model` and `trainer_state` at `step`, then all but the newest `keep_last` step
        checkpoints dropped. Main process only."""
        path = step_checkpoint_path(self.folder, step)
        ckpt.save_checkpoint(path, model.state_dict(), model.cfg, step, trainer_state)
        for old in checkpoint_paths(self.folder)[:-keep_last]:
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
