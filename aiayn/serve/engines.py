"""Where a served model comes from: a path on disk (or an engine made in this process) turned into the engine that
decodes it, at a worker's start and at every reload (docs/serving-operations.md "A new checkpoint without downtime").

    ModelSource.load()   a run directory (its averaged, else best, else newest checkpoint, so a run that trained
                         further is picked up at a reload), a checkpoint file, a folder `aiayn export --to ct2` wrote
                         or an Argos Translate package -> (engine, the file or folder read): the path is resolved
                         here, once per load, and nowhere else
    Loaded.load()        an engine made in this process (a test's, a notebook's): itself
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiayn.decoding.ct2 import CT2Translator, is_ct2_model
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator


@dataclass(frozen=True)
class ModelSource:
    """A model on disk and how it decodes: what a worker loads at start and on every reload."""

    checkpoint: str  # a run directory, a checkpoint file, a CTranslate2 folder or an Argos package (--checkpoint)
    search: SearchConfig
    precision: str = "fp32"  # --precision: the number format decoding runs in
    device: str = "cpu"
    shortlist: bool | str | None = None  # --shortlist: True, the run's (read again at each reload); a path, that file

    def check(self) -> None:
        """Say now (one clear error) what a worker's load would fail on first: a run without a checkpoint, a
        shortlist asked for that the run lacks. Nothing is loaded."""
        from aiayn.decoding.shortlist import run_file
        from aiayn.rundir import inference_checkpoint

        if not is_ct2_model(self.checkpoint):
            inference_checkpoint(Path(self.checkpoint))
            if self.shortlist:
                run_file(Path(self.checkpoint), None if self.shortlist is True else self.shortlist)

    def load(self) -> tuple[Translator | CT2Translator, Path]:
        """The engine, and the checkpoint file (or CTranslate2 folder) it was read from; a folder `aiayn export --to
        ct2` wrote, or an Argos Translate package, is decoded by CTranslate2 (the same id-level API), in the compute
        type of `precision`, with its vocabulary map where `shortlist` is asked for."""
        from aiayn.rundir import inference_checkpoint

        if is_ct2_model(self.checkpoint):
            import torch

            return CT2Translator(self.checkpoint, torch.device(self.device).type,
                                 CT2Translator.COMPUTE_TYPES[self.precision], use_vmap=bool(self.shortlist),
                                 search=self.search), Path(self.checkpoint)
        path = inference_checkpoint(Path(self.checkpoint))
        return Translator.load(path, self.search, self.precision, device=self.device, shortlist=self.shortlist), path


@dataclass(frozen=True, eq=False)
class Loaded:
    """An engine already in memory, served as it is (a reload serves it again)."""

    engine: Translator | CT2Translator
    checkpoint: str = "(in memory)"

    @property
    def search(self) -> SearchConfig:
        return self.engine.search

    def load(self) -> tuple[Translator | CT2Translator, Path]:
        return self.engine, Path(self.checkpoint)
