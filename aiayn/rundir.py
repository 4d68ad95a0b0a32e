"""A run on disk, read: its layout and RunDir, the one reader every command uses (the trainer writes through
aiayn.training.run.Run, which reads through RunDir too). The only module that knows where a run keeps anything; the
checkpoint files' own format (weights, trainer state, headers, shapes, averaging) is aiayn.training.checkpoint's.

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
    RUN/train.lock                                    one writer per run: the trainer holds a lock on it

config.json is written last when a run starts: a folder with it is a run. The prepared-data folder a run trains on
has its own format (aiayn.data.folder); each recognises the other and says so when one is given for the other.

    run = RunDir(folder)          reads, never writes: run.config, run.checkpoints, run.latest(), run.best,
                                  run.averaged, run.for_inference (the checkpoint decoding uses), run.trained,
                                  run.vocab, run.log, run.languages
    RunDir.of(checkpoint)         the run a checkpoint file belongs to (the folder holding its vocabulary)
    inference_checkpoint(path)    a checkpoint file as given, or a run directory's for_inference
    load_for_inference(path)      (model, vocabulary, config) from either
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from aiayn import files
from aiayn.config import ModelConfig
from aiayn.data.folder import META_FILE, RUN_CONFIG, prepared_sha256, run_languages
from aiayn.data.vocab import MODEL_FILE, Vocab
from aiayn.errors import CheckpointError, DataError
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


class RunDir:
    """A run directory, read only: where each of its files lies, and what they hold (each read when asked)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    @classmethod
    def of(cls, checkpoint: str | Path) -> RunDir:
        """The run a checkpoint file (or run directory) belongs to: the folder with its vocabulary, beside it or one
        or two folders up."""
        start_at = Path(checkpoint).resolve()
        for folder in [start_at if start_at.is_dir() else start_at.parent, *start_at.parents][:3]:
            if (folder / VOCAB).is_file():
                return cls(folder)
        raise CheckpointError(f"no {VOCAB} found beside {checkpoint} or in its run directory")

    def __repr__(self) -> str:
        return f"RunDir({str(self.folder)!r})"

    # --- what the folder is ---------------------------------------------------------------------------------

    @property
    def is_run(self) -> bool:
        """Whether the folder holds a started run (its config.json)."""
        return (self.folder / CONFIG).is_file()

    @property
    def unstarted(self) -> bool:
        """Whether the folder is free for a new run: missing, empty, or holding only what a start interrupted before
        its config.json leaves (the vocabulary copy, the lock file, temp files, a distillation's folder)."""
        if not self.folder.exists():
            return True
        if not self.folder.is_dir():
            return False
        return all(p.name in (VOCAB, LOCK_FILE, DISTILL) or files.is_temp(p) for p in self.folder.iterdir())

    @property
    def config(self) -> dict[str, Any]:
        """config.json, with a clear error if it is missing or broken (or the folder is prepared data)."""
        path = self.folder / CONFIG
        if not path.is_file():
            if (self.folder / META_FILE).is_file():
                raise CheckpointError(f"{self.folder} is a prepared-data directory, not a run directory; train on it "
                                      f"with `aiayn train --data {self.folder} --out RUN`")
            if self.folder.is_dir() and (self.folder / VOCAB).is_file():
                raise CheckpointError(f"{self.folder} was interrupted before its config was written (no {CONFIG}): "
                                      f"start it again with `aiayn train --data DIR --out {self.folder} ...`, which "
                                      "reuses it")
            raise CheckpointError(f"{self.folder} is not a run directory (no {CONFIG}); start a run with "
                                  "`aiayn train --data DIR --out RUN`")
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{path} is not valid JSON ({e}); it was damaged outside aiayn") from None
        keys = {"model", "train", "data", "data_sha256", "vocab_sha256"}
        if not isinstance(saved, dict) or not keys <= set(saved):
            raise CheckpointError(f"{path} lacks one of {', '.join(sorted(keys))}; it was not written by aiayn train")
        return saved

    @property
    def data(self) -> Path:
        """The prepared-data folder the run trains on (as config.json names it)."""
        return Path(str(self.config["data"]))

    @property
    def languages(self) -> tuple[str, str] | None:
        """(source, target) codes recorded for the run (aiayn.data.folder.run_languages), None where none are."""
        return run_languages(self.folder)

    # --- where its files lie --------------------------------------------------------------------------------

    @property
    def vocab(self) -> Path:
        return self.folder / VOCAB

    @property
    def best(self) -> Path:
        """checkpoint_best (it may not exist)."""
        return self.folder / BEST

    @property
    def averaged(self) -> Path:
        """`aiayn average`'s output (it may not exist)."""
        return self.folder / AVERAGED

    @property
    def shortlist(self) -> Path:
        """Where the run keeps its shortlist (it may not exist yet)."""
        return self.folder / SHORTLIST

    @property
    def distill(self) -> Path:
        return self.folder / DISTILL

    @property
    def log_path(self) -> Path:
        return self.folder / LOG

    @property
    def lock(self) -> Path:
        return self.folder / LOCK_FILE

    def step(self, step: int) -> Path:
        """The step checkpoint of `step` (it may not exist)."""
        return self.folder / CHECKPOINT_DIR / f"step_{step:08d}.safetensors"

    # --- its checkpoints ------------------------------------------------------------------------------------

    @property
    def checkpoints(self) -> list[Path]:
        """The step checkpoints, oldest first."""
        folder = self.folder / CHECKPOINT_DIR
        found = [(int(m.group(1)), p) for p in folder.glob("step_*.safetensors") if (m := _STEP_RE.search(p.name))]
        return [p for _, p in sorted(found)]

    def latest(self, resumable: bool = False) -> Path | None:
        """Newest step checkpoint; with resumable=True, the newest that also has its trainer state."""
        paths = [p for p in self.checkpoints if not resumable or ckpt.state_path(p).is_file()]
        return paths[-1] if paths else None

    def _decodable(self) -> Path | None:
        """for_inference's choice, None where the run has no checkpoint."""
        for path in (self.averaged, self.best):
            if path.is_file():
                return path
        return self.latest()

    @property
    def trained(self) -> bool:
        """Whether the run has a checkpoint to decode with."""
        return self._decodable() is not None

    @property
    def for_inference(self) -> Path:
        """The checkpoint decoding uses: averaged, else best, else the newest step checkpoint (the rule, stated once
        here; translate, serve, export, --init-from and --teacher all take it from here)."""
        found = self._decodable()
        if found is None:
            if (self.folder / META_FILE).is_file():
                raise CheckpointError(f"{self.folder} is a prepared-data directory, not a run directory; train a "
                                      f"model on it first (aiayn train --data {self.folder} --out RUN)")
            raise CheckpointError(f"run directory {self.folder} has no checkpoint yet; train it first (aiayn train)")
        return found

    # --- what it was trained on, and what it logged ----------------------------------------------------------

    def same_data(self, saved: dict[str, Any]) -> Path:
        """The data folder of the run (saved: its config), refused if it holds other data or another vocabulary
        than the run started with (data prepared again in the same folder): the run would silently continue on
        another corpus, and translate would decode with the old vocabulary."""
        data_dir = Path(str(saved["data"]))
        run_vocab, data_vocab = self.vocab, data_dir / VOCAB
        if not run_vocab.is_file():
            raise CheckpointError(f"{run_vocab} is missing; the run directory was damaged")
        if not data_vocab.is_file():
            raise DataError(f"{self.folder} was trained on {data_dir}, which holds no prepared data any more (no "
                            f"{VOCAB}); restore the data the run started on")
        ours = files.sha256_file(run_vocab)
        fix = ("Restore the data the run started on, or start a new run on the new data "
               "(aiayn train --data DIR --out NEW_RUN)")
        if files.sha256_file(data_vocab) != ours or saved["vocab_sha256"] != ours:
            raise DataError(f"{data_dir} now has another vocabulary than the one {self.folder} was trained with "
                            f"({VOCAB} differs): the data were prepared again since the run started. Resuming would "
                            f"train on other token ids while translate decodes with the run's vocabulary. {fix}")
        if saved["data_sha256"] != prepared_sha256(data_dir):
            raise DataError(f"{data_dir} holds other data than {self.folder} was trained on (its files differ from "
                            "those the run started with: prepared again from other text or with other options). "
                            f"Resuming would continue on another corpus. {fix}")
        return data_dir

    def parent(self, saved: dict[str, Any]) -> Path | None:
        """The parent checkpoint of a fine-tuning run (saved: its config; None for a run from scratch), refused if
        it changed since the run started."""
        parent = saved.get("parent")
        if parent is None:
            return None
        path = Path(parent["checkpoint"])
        if not path.is_file() or files.sha256_file(path) != parent["sha256"]:
            now = "another file now" if path.is_file() else "gone"
            raise CheckpointError(f"{self.folder} was started from {path}, which is {now}; restore it, or start the "
                                  "fine-tuning again (aiayn train --init-from ...)")
        return path

    @property
    def log(self) -> list[dict[str, Any]]:
        """Every record of log.jsonl, oldest first."""
        path = self.log_path
        if not path.is_file():
            raise CheckpointError(f"{self.folder} has no {LOG}; is it a run directory of `aiayn train`?")
        try:
            return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{path}: a line is not JSON ({e}); the log was damaged outside aiayn") from None


# ---------------------------------------------------------------------------------------------------------
# A run or a checkpoint file, for decoding.


def inference_checkpoint(path: str | Path) -> Path:
    """A checkpoint file as given, or for a run directory the one it decodes with (RunDir.for_inference)."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise CheckpointError(f"{path} is neither a checkpoint file nor a run directory")
    return RunDir(path).for_inference


def load_for_inference(path: str | Path, device: str | torch.device = "cpu") -> tuple[Transformer, Vocab, ModelConfig]:
    """(model in eval mode, vocabulary, config) from a run directory (inference_checkpoint) or a checkpoint file: the
    header and shapes checked first, then the vocabulary, then the weights (what aiayn.decoding.inference.load
    converts)."""
    path = inference_checkpoint(Path(path))
    _, cfg, shapes = ckpt.read_header(path)
    ckpt.check_shapes(path, cfg, shapes)  # before the model or its weights take any memory
    vocab = Vocab.load(RunDir.of(path).vocab)
    if len(vocab) != cfg.vocab_size:
        raise CheckpointError(f"vocabulary {vocab.model_path} has {len(vocab)} entries but the model of {path} "
                              f"expects {cfg.vocab_size}; it belongs to another run")
    with ckpt.WeightsToCome():  # every tensor is the checkpoint's (check_shapes: the same names and shapes)
        model = Transformer(cfg)
    model.load_state_dict(ckpt.load_weights(path)[0])
    return model.to(device).eval(), vocab, cfg
