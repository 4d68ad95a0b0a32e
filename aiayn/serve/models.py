"""Many language pairs behind one server: which model translates what, loaded when first asked for and unloaded
least recently used first under a budget (docs/serving.md "Many pairs, one server").

    Models                the server's catalogue: one `Entry` per direct pair (source, target), each a model that
    ├── route(src, tgt)   is loaded on its first request (in a thread, while the others go on decoding) with a
    │                     Batcher and model thread of its own; the direct pair, else a pivot src -> X -> tgt through
    │                     a language X that both legs share (English first, as Argos pivots), else a 400
    ├── batcher(pair)     the pair's batcher, loading its model (and unloading the least recently used idle ones
    │                     while more than max_models are loaded, or their weights exceed max_bytes)
    └── reload()          every loaded model reads its checkpoint again, each on its own (one that fails keeps the
                          model it has and says why); the others load their checkpoint as it is when next asked for

A server of one model is a catalogue of one. At start (`preload`, before a worker listens) the models the budget
holds are loaded in the catalogue's order (every one without a budget), the others when first asked for. A model
that cannot be loaded answers 500 for its pair alone (the error is kept RETRY_S seconds, then loading is tried
again); the other pairs are served meanwhile; a server none of whose models loads at start does not start. A model
answering requests is never unloaded: while every loaded model is busy, the budget may be exceeded until one is
idle at the next load.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiayn.decoding.ct2 import CT2Translator, is_argos_package, is_ct2_model
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.errors import CheckpointError
from aiayn.model import expected_parameters
from aiayn.serve.batcher import BatchConfig, Batcher, QueueFull
from aiayn.serve.bodies import ApiError
from aiayn.serve.engines import Loaded, ModelSource
from aiayn.serve.libre import LanguagePair, language_name

RETRY_S = 10.0  # a model that failed to load is tried again after this long (each request meanwhile: the error)
PIVOT_FIRST = "en"  # the pivot language tried first, where both legs exist
SAMPLING_FIELDS = ("top_k", "top_p", "temperature", "seed")  # request fields that only sampling reads


@dataclass(eq=False)
class Entry:
    """One direct pair and its model: where it loads from, and while loaded its translator and batcher."""

    pair: LanguagePair
    source: ModelSource | Loaded
    translator: Translator | None = None
    batcher: Batcher | None = None
    path: str | None = None  # the checkpoint file loaded
    bytes: int = 0  # its weights' bytes (what max_bytes counts)
    used: float = 0.0  # time.monotonic() of its last request
    error: str | None = None  # the last load failure
    failed_at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def decoded_by_ct2(self) -> str | None:
        """What it is, where CTranslate2 decodes it ("an Argos package", "a CTranslate2 export"), else None; known
        before it is loaded."""
        engine = self.translator or getattr(self.source, "engine", None)
        if engine is not None:
            if not isinstance(engine, CT2Translator):
                return None
            return "an Argos package" if engine.package is not None else "a CTranslate2 export"
        if not is_ct2_model(self.source.checkpoint):
            return None
        return "an Argos package" if is_argos_package(self.source.checkpoint) else "a CTranslate2 export"

    def describe(self) -> dict:
        """What /info says of it: its pair, where it loads from, and while loaded the model itself."""
        loaded = self.translator is not None
        languages = {side: {"code": code, "name": language_name(code)}
                     for side, code in (("source", self.pair.source), ("target", self.pair.target))}
        weights_mb = round(self.bytes / 2**20, 1) if loaded else None
        return {"source": self.pair.source, "target": self.pair.target, "languages": languages,
                "checkpoint": self.path or self.source.checkpoint, "loaded": loaded, "weights_mb": weights_mb,
                "error": self.error, **(model_info(self.translator) if loaded else {})}


def model_info(translator: Translator) -> dict:
    """What /info says about a loaded model (a reload replaces it)."""
    cfg = translator.cfg  # None: an Argos package (a CTranslate2 model of anyone's; aiayn.decoding.ct2)
    return {"model": cfg and cfg.to_dict(), "parameters": cfg and expected_parameters(cfg),
            "vocab_size": len(translator.vocab), "device": str(translator.device), "precision": translator.precision,
            "shortlist": translator.shortlist.describe() if translator.shortlist is not None else None}


class Models:
    """The pairs a server translates and their models (see the module docstring)."""

    def __init__(self, entries: Sequence[Entry], batching: BatchConfig | None = None, max_models: int = 0,
                 max_bytes: int = 0):
        self.batching, self.max_models, self.max_bytes = batching or BatchConfig(), max_models, max_bytes
        self.entries: dict[tuple[str, str], Entry] = {}
        for entry in entries:
            key = (entry.pair.source, entry.pair.target)
            if key in self.entries:
                raise ValueError(f"two models translate {entry.pair}: {self.entries[key].source.checkpoint} and "
                                 f"{entry.source.checkpoint}; give one (or name another pair: SRC:TGT=PATH)")
            self.entries[key] = entry
        if not self.entries:
            raise ValueError("no model to serve")
        self._on_batch: Callable[[int, int, int], None] | None = None
        self._retired = {"batches": 0, "sentences": 0, "requests": 0, "rejected": 0, "timed_out": 0,
                         "model_busy_s": 0.0}  # counters of unloaded models' batchers
        self._closing = False
        self._unloading: set[asyncio.Task] = set()
        self.loads = 0  # models loaded since start (reloads not counted)
        self.unloads = 0

    @classmethod
    def from_sources(cls, sources: Sequence[tuple[LanguagePair, ModelSource | Loaded]],
                     batching: BatchConfig | None = None, max_models: int = 0, max_bytes: int = 0) -> Models:
        return cls([Entry(pair, source) for pair, source in sources], batching, max_models, max_bytes)

    @property
    def search(self) -> SearchConfig:
        """The search settings the models decode with (the server's; requests change aiayn's decoding fields)."""
        return next(iter(self.entries.values())).source.search

    # ---- what is served

    @property
    def pairs(self) -> list[LanguagePair]:
        return [entry.pair for entry in self.entries.values()]

    def sources(self) -> list[str]:
        """The source languages of the direct pairs."""
        return sorted({pair.source for pair in self.pairs})

    def codes(self) -> list[str]:
        """Every language served, as a source or a target (what detection chooses among)."""
        return sorted({code for pair in self.entries for code in pair})

    def targets(self, source: str) -> list[str]:
        """Every language `source` is translated into: directly, or through one pivot."""
        direct = {t for s, t in self.entries if s == source}
        pivoted = {t for x in direct for s, t in self.entries if s == x and t != source}
        return sorted(direct | pivoted)

    def languages(self) -> list[dict]:
        """GET /languages: every language, each with the codes it is translated into (LibreTranslate's list)."""
        return [{"code": code, "name": language_name(code), "targets": self.targets(code)} for code in self.codes()]

    def describe(self) -> str:
        if len(self.entries) == 1:
            return f"{self.pairs[0]} only"
        return f"{len(self.entries)} pairs: {', '.join(f'{s}->{t}' for s, t in self.entries)}"

    def reaches(self, source: str, target: str | None) -> bool:
        """Whether `source` is translated into `target` (None: into anything) here, directly or through a pivot."""
        return target in self.targets(source) if target is not None else any(s == source for s, _ in self.entries)

    def route(self, source: str, target: str | None) -> list[LanguagePair]:
        """The pairs that translate `source` into `target`: the direct one, else two through a pivot; a 400 naming
        what is served otherwise, a 422 for a served language into itself (no model does that: the caller returns
        such a text as it is). target None: the source's one target (a 400 where it has several)."""
        if source == target and source in self.codes():  # /translate returns such a text as it is, never asks
            raise ApiError(422, f"source and target are both {source!r}: nothing to translate (/translate returns "
                                "such a text unchanged)")
        sources = self.sources()
        if source not in sources:
            named = " or ".join(f'"{s}"' for s in [*sources, "auto"])
            raise ApiError(400, f"source {source!r} is not served: this server translates {self.describe()}; send "
                                f"source {named}")
        direct = [t for s, t in self.entries if s == source]
        if target is None:
            if len(direct) > 1:
                raise ApiError(400, f"target is missing: {source} is translated into {', '.join(direct)} here; "
                                    "send one of them as target")
            target = direct[0]
        if (source, target) in self.entries:
            return [self.entries[source, target].pair]
        pivots = sorted((x for x in direct if (x, target) in self.entries), key=lambda x: (x != PIVOT_FIRST, x))
        if pivots:
            return [self.entries[source, pivots[0]].pair, self.entries[pivots[0], target].pair]
        reachable = ", ".join(f'"{t}"' for t in self.targets(source))
        raise ApiError(400, f"target {target!r} is not served from {source!r}: this server translates "
                            f"{self.describe()}; send target {reachable} (directly or through one pivot)")

    def entry(self, pair: LanguagePair) -> Entry:
        return self.entries[pair.source, pair.target]

    def check_options(self, routes: Sequence[Sequence[LanguagePair] | None], options: dict) -> None:
        """A 422, before anything is decoded, where a request's decoding options (TranslateRequest.search_options)
        set a sampling field without sampling, or ask a model on one of its routes for what its engine does not do:
        sampling, of a model CTranslate2 decodes (an Argos package or a CTranslate2 export: its draws come from one
        generator per process, not one per text)."""
        default = SearchConfig()
        unused = [name for name in SAMPLING_FIELDS if name in options and options[name] != getattr(default, name)]
        if unused and not options.get("sampling", self.search.sampling):
            raise ApiError(422, f"{', '.join(unused)}: only sampling reads {'them' if unused[1:] else 'it'}; send "
                                '"sampling": true as well, or leave ' + ("them" if unused[1:] else "it") + " out")
        if not options.get("sampling"):
            return
        for pair in {pair for route in routes for pair in route or ()}:
            kind = self.entry(pair).decoded_by_ct2()
            if kind:
                raise ApiError(422, f"sampling: the {pair.source}->{pair.target} model is {kind}, which this server "
                                    "decodes with CTranslate2, and CTranslate2 does not sample here; leave sampling "
                                    "out (or false) for its beam search, or ask for a pair an aiayn run serves")

    # ---- loading and unloading

    def preload(self) -> int:
        """At start, before any request (no event loop needed): load the models the budget holds, in the
        catalogue's order; a model that fails keeps its error (its pair answers 500). The number loaded; an
        exception where none loaded and one failed (a server that can serve nothing does not start)."""
        failures = []
        for entry in self.entries.values():
            if self.max_models and len(self.loaded()) >= self.max_models:
                break
            try:
                translator, path = entry.source.load()
            except Exception as e:
                self._failed(entry, e, quiet=True)
                failures.append(f"the {entry.pair.source}->{entry.pair.target} model ({entry.source.checkpoint}) "
                                f"could not be loaded: {entry.error}")
                continue
            self._attach(entry, translator, path)
            if self.max_bytes and sum(e.bytes for e in self.loaded()) > self.max_bytes:
                self._detach(entry)
                break
        if failures and not self.loaded():
            raise CheckpointError("; ".join(failures))
        for failure in failures:  # the server starts without them
            print(f"error: {failure}; its pair answers 500 until it loads", file=sys.stderr, flush=True)
        return len(self.loaded())

    async def batcher(self, pair: LanguagePair) -> Batcher:
        """The pair's batcher, its model loaded first if need be; a 500 for a model that cannot be loaded."""
        entry = self.entry(pair)
        if entry.batcher is None and self._closing:
            raise QueueFull("the server is shutting down", retry_after_s=1)
        if entry.batcher is None:
            async with entry.lock:
                if entry.batcher is None:
                    await self._load(entry)
        entry.used = time.monotonic()
        return entry.batcher

    async def _load(self, entry: Entry) -> None:
        if entry.error is not None and time.monotonic() - entry.failed_at < RETRY_S:
            raise ApiError(500, self._failure(entry))
        self._make_room(keep=entry, count=1)
        try:
            translator, path = await asyncio.to_thread(entry.source.load)
        except Exception as e:  # a broken checkpoint, a missing vocabulary, out of memory: this pair alone fails
            self._failed(entry, e)
            raise ApiError(500, self._failure(entry)) from None
        entry.error = None
        self._attach(entry, translator, path)
        self.loads += 1
        self._make_room(keep=entry, count=0)

    def _failed(self, entry: Entry, e: Exception, quiet: bool = False) -> None:
        entry.error, entry.failed_at = f"{type(e).__name__}: {e}" if not str(e) else str(e), time.monotonic()
        if not quiet:
                print(f"error: the {entry.pair} model ({entry.source.checkpoint}) could not be loaded: {entry.error}",
                  file=sys.stderr, flush=True)

    def _failure(self, entry: Entry) -> str:
        return (f"the {entry.pair.source}->{entry.pair.target} model ({entry.source.checkpoint}) could not be loaded: "
                f"{entry.error}; the server's other pairs are served")

    def _attach(self, entry: Entry, translator: Translator, path: Path) -> None:
        entry.translator, entry.path, entry.bytes = translator, str(path), translator.weight_bytes()
        if entry.batcher is None:
            entry.batcher = Batcher(translator, self.batching)
            entry.batcher.on_batch = self._on_batch
        else:  # a reload: queued requests keep the model that encoded them (aiayn.serve.batcher)
            entry.batcher.swap(translator)

    def _make_room(self, keep: Entry, count: int) -> None:
        """Unload idle models, least recently used first, while the loaded ones and `count` more exceed the budget
        of models or weights."""
        def over() -> bool:
            loaded = [e for e in self.entries.values() if e.batcher is not None]
            return (self.max_models and len(loaded) + count > self.max_models) or \
                (self.max_bytes and sum(e.bytes for e in loaded) > self.max_bytes)

        idle = sorted((e for e in self.entries.values() if e is not keep and e.batcher is not None
                       and e.batcher.queued == 0), key=lambda e: e.used)
        while idle and over():
            self._unload(idle.pop(0))

    def _detach(self, entry: Entry) -> Batcher:
        batcher, entry.batcher, entry.translator, entry.bytes = entry.batcher, None, None, 0
        return batcher

    def _unload(self, entry: Entry) -> None:
        batcher = self._detach(entry)
        for name, value in batcher.stats.items():
            self._retired[name] += value
        task = asyncio.get_running_loop().create_task(batcher.close())  # its model thread ends; the model is freed
        self._unloading.add(task)
        task.add_done_callback(self._unloading.discard)
        self.unloads += 1

    async def reload(self) -> list[str]:
        """Every loaded model reads its checkpoint again (a reload); the checkpoints read, or the failures (each
        model on its own: one that fails keeps the model it has). Unloaded models read theirs when next loaded."""
        done, failed = [], []
        for entry in self.loaded():
            async with entry.lock:
                try:
                    translator, path = await asyncio.to_thread(entry.source.load)
                except Exception as e:
                    failed.append(f"{entry.pair.source}->{entry.pair.target} ({entry.source.checkpoint}): {e}")
                    continue
                if entry.batcher is not None:  # not unloaded meanwhile
                    self._attach(entry, translator, path)
                done.append(str(path))
        for entry in self.entries.values():  # a failed model is tried again at its next request
            entry.error = None if entry.batcher is None else entry.error
        if failed:
            raise RuntimeError("; ".join(failed))
        return done

    # ---- what the routes, metrics and shutdown see of every model together

    @property
    def on_batch(self) -> Callable[[int, int, int], None] | None:
        return self._on_batch

    @on_batch.setter
    def on_batch(self, hook: Callable[[int, int, int], None] | None) -> None:
        self._on_batch = hook
        for entry in self.entries.values():
            if entry.batcher is not None:
                entry.batcher.on_batch = hook

    def loaded(self) -> list[Entry]:
        return [entry for entry in self.entries.values() if entry.batcher is not None]

    @property
    def queued(self) -> int:
        return sum(entry.batcher.queued for entry in self.loaded())

    @property
    def stats(self) -> dict:
        """The batchers' counters summed, those of unloaded models included."""
        total = dict(self._retired)
        for entry in self.loaded():
            for name, value in entry.batcher.stats.items():
                total[name] += value
        return total

    @property
    def closing(self) -> bool:
        return self._closing

    async def close(self) -> None:
        """Stop every batcher (each answers what it has queued first)."""
        self._closing = True
        await asyncio.gather(*(entry.batcher.close() for entry in self.loaded()), *self._unloading)
