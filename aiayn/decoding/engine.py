"""One interface to both decoding engines, and the one place that turns a path into an engine.

    Engine         what every engine offers (aiayn's Translator, CTranslate2's CT2Translator)
    EngineOptions  how to decode and which features the caller will ask for (so that an engine that lacks one says
                   so before anything is loaded)
    open_engine    path + options -> the engine: `aiayn translate`, `aiayn score`, `aiayn serve`, the quickstart, the
                   report and the benchmarks all open their models here

Which engine a path gets: options.engine where given ("aiayn" or "ct2"), else CTranslate2's for a folder `aiayn export
--to ct2` wrote or an Argos Translate package, aiayn's for anything else (a run directory, a checkpoint file, an
imported run). This module imports neither torch nor CTranslate2: the chosen engine's module is imported when opened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from aiayn.config import PAPER_SEARCH, SearchConfig
from aiayn.decoding.batches import BATCH, Limits
from aiayn.decoding.lines import Translation
from aiayn.errors import UsageError

ENGINES = ("aiayn", "ct2")


@dataclass(frozen=True)
class EngineOptions:
    """How to decode (search, precision, device, batches) and what the caller will ask for (the features an engine
    may lack: alignments, glossary, prefixes, token scores, forced decoding (`aiayn score`), an ensemble, a shortlist
    FILE, a search implementation).

    engine: "aiayn", "ct2" or None (from the path: the module docstring). precision: aiayn.config.PRECISIONS (for
    CTranslate2, its compute type: fp32 keeps the exported one). device: --device's names ("auto": a GPU where the
    engine sees one). shortlist: True for the run's (aiayn) or the exported vocabulary map (CTranslate2), a path for
    that file (aiayn), None for none. threads, patience: CTranslate2's (default_threads; its beam stopping rule).
    ensemble is set by open_engine when given several paths."""

    engine: str | None = None
    search: SearchConfig = PAPER_SEARCH
    precision: str = "fp32"
    device: str = "auto"
    batch_size: int | None = None  # sentences a batch; None: batches.BATCH (aiayn: batches.default_batch_size)
    max_input_len: int | None = None
    shortlist: bool | str | Path | None = None
    search_impl: str = "auto"
    prepack: bool | None = None
    threads: int | None = None
    patience: float | None = None
    parallel_batches: int | None = None
    alignments: bool = False
    alignment_layer: int | None = None
    alignment: str = "auto"  # "auto" (the run's lexical aligner if it has one, else attention), "attention", "lexical"
    glossary: bool = False
    prefixes: bool = False
    token_scores: bool = False
    forced: bool = False
    ensemble: bool = False


class Engine(Protocol):
    """A model that translates: its vocabulary, how it searches, in which precision, on which device."""

    vocab: object
    search: SearchConfig
    precision: str

    def translate_nbest(self, lines: Sequence[str], progress: bool = False, prefixes: Sequence[str] | None = None,
                        first_line: int = 0, glossary=None, alignments: bool | Sequence[bool] = False
                        ) -> list[list[Translation]]:
        """Up to search.nbest translations per line, best first (a blank line: one empty translation); prefixes: the
        text each line's translations start with; first_line: lines[0]'s number in the whole input (sampling's
        seeds); glossary: terms the translations must hold; alignments: fill each Translation's `alignment` (per line:
        a flag each, see aiayn.decoding.lines.aligned_lines; the others' stay None)."""

    def translate(self, lines: Sequence[str], *, progress: bool = False) -> list[str]:
        """The best translation of each line (progress: a keyword in every engine)."""

    def align_ids(self, sources: Sequence[list[int] | None], targets: Sequence[list[int]]
                  ) -> list[list[tuple[int, int]]]:
        """The word links of each (source ids + EOS, or None; translation ids) pair, as translate_nbest's
        `alignment` (a server aligns the hypotheses of the requests that ask, after a batch's search)."""

    def limits(self) -> Limits:
        """The longest source it takes and the most words any translation may have."""

    @classmethod
    def unsupported(cls, options: EngineOptions) -> str | None:
        """The one error for a feature `options` asks that this engine lacks, or None."""

    def weight_bytes(self) -> int:
        """The bytes its weights take in memory, about."""


def engine_name(path: str | Path | Sequence[str | Path], engine: str | None = None) -> str:
    """Which engine decodes `path` (the module docstring), without loading it."""
    if engine is not None:
        if engine not in ENGINES:
            raise UsageError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        return engine
    from aiayn.decoding.ct2 import is_ct2_model  # no torch, no CTranslate2

    first = path if isinstance(path, (str, Path)) else path[0]
    return "ct2" if is_ct2_model(first) else "aiayn"


def engine_class(name: str):
    """The class of engine `name` (its module imported now)."""
    if name == "ct2":
        from aiayn.decoding.ct2 import CT2Translator

        return CT2Translator
    from aiayn.decoding.translator import Translator

    return Translator


def open_engine(path: str | Path | Sequence[str | Path], options: EngineOptions = EngineOptions()) -> Engine:
    """The engine that decodes `path` as `options` say: a run directory (the checkpoint aiayn.rundir picks for
    decoding), a checkpoint file, several of them (an ensemble, aiayn's engine), a folder `aiayn export --to ct2`
    wrote or an Argos Translate package (.argosmodel or its folder). A feature the engine lacks is a UsageError, the
    engine's own one line, before the model is loaded; so is a path the chosen engine cannot read."""
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    name = engine_name(paths, options.engine)
    options = replace(options, ensemble=len(paths) > 1)
    cls = engine_class(name)
    problem = cls.unsupported(options)
    if problem:
        raise UsageError(problem)
    if name == "ct2":
        from aiayn.decoding.ct2 import ct2_device
        from aiayn.extras import require

        require("decoding with CTranslate2 (--engine ct2)", "export", ("ctranslate2",))

        return cls(paths[0], device=ct2_device(options.device), compute_type=cls.COMPUTE_TYPES[options.precision],
                   threads=options.threads, use_vmap=bool(options.shortlist), search=options.search,
                   batch_size=options.batch_size or BATCH, patience=options.patience,
                   max_input_len=options.max_input_len, alignment=options.alignment,
                   parallel_batches=options.parallel_batches)
    from aiayn.runtime import resolve_device

    return cls.load(paths, options.search, options.precision, device=resolve_device(options.device),
                    prepack=options.prepack, shortlist=options.shortlist, batch_size=options.batch_size,
                    max_input_len=options.max_input_len, search_impl=options.search_impl,
                    alignment_layer=options.alignment_layer, alignment=options.alignment,
                    parallel_batches=options.parallel_batches)
