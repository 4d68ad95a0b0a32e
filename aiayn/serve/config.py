"""`ServeConfig`: everything a server is, built once from `aiayn serve`'s flags (aiayn/cli/serve.py) as `train`'s
TrainConfig is, and handed to every worker process (plain data: it crosses to spawned processes). A server of one
model is a catalogue of one: `catalog` holds one (LanguagePair, source) per model, however many there are."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiayn.serve.access import AccessConfig
from aiayn.serve.batcher import BatchConfig
from aiayn.serve.engines import Loaded, ModelSource
from aiayn.serve.files import FileConfig
from aiayn.serve.libre import LanguagePair
from aiayn.serve.models import Models
from aiayn.serve.observe import ObserveConfig
from aiayn.serve.state import Limits


@dataclass(frozen=True)
class ServeConfig:
    """The models, how requests are batched and bounded, who may call, and where the server listens."""

    catalog: tuple[tuple[LanguagePair, ModelSource | Loaded], ...] = ()  # one entry per model (aiayn.serve.catalog)
    batching: BatchConfig = BatchConfig()
    limits: Limits = Limits()
    max_models: int = 0  # models loaded at once per worker (0: no limit)
    max_bytes: int = 0  # their weights' bytes at most per worker (0: no limit)
    access: AccessConfig = AccessConfig()  # API keys, budgets, CORS (aiayn.serve.access)
    observe: ObserveConfig = ObserveConfig()  # the access log (aiayn.serve.observe)
    files: FileConfig = FileConfig()  # POST /translate_file and its folder (aiayn.serve.files)
    host: str = "127.0.0.1"
    port: int = 8000
    threads: int = 0  # torch threads per worker; 0: torch's default (OMP_NUM_THREADS, else every core)
    keep_freed_memory: bool = False  # each worker's glibc keeps freed memory (`aiayn serve`, unless --low-memory)
    log_level: str = "info"
    read_timeout_s: float = 10.0  # aiayn.serve.guard
    max_connections: int = 1000  # per worker; more get 503
    admin_key: str | None = field(default=None, repr=False)  # never printed

    def models(self) -> Models:
        """The catalogue's models, none loaded yet (each worker makes its own)."""
        return Models.from_sources(self.catalog, self.batching, self.max_models, self.max_bytes)
