"""What the routes (app.py) and a reload (reload.py) share: the server's state around its models (one Translator,
or many pairs: aiayn.serve.models), and the request limits it holds."""

from __future__ import annotations

from dataclasses import dataclass

from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.model import expected_parameters
from aiayn.serve.batcher import Batcher
from aiayn.serve.detect import Detector
from aiayn.serve.models import Models


@dataclass(frozen=True)
class Limits:
    """How much one request may ask for (larger -> 413 naming the limit)."""

    max_chars: int = 1000  # characters per text
    max_texts: int = 64  # texts per request

    def __post_init__(self) -> None:
        if self.max_chars < 1 or self.max_texts < 1:
            raise ValueError(f"limits must be >= 1: {self}")

    @property
    def max_body_bytes(self) -> int:
        """Room for max_texts texts of max_chars characters in their widest encoding: 12 bytes a character (a 4-byte
        UTF-8 character percent-encoded in a form, %XX x 4, or a surrogate pair escaped in JSON, \\uXXXX x 2)."""
        return 12 * self.max_chars * self.max_texts + 4096


@dataclass
class Server:
    """What the routes share (app.state.server): the models and their batchers, the language detector, the search
    settings, the limits, the static answers."""

    models: Models
    detector: Detector
    search: SearchConfig
    limits: Limits
    info: dict
    page: str

    @property
    def max_alternatives(self) -> int:
        return self.search.beam - 1

    @property
    def batcher(self) -> Batcher:
        """The batcher of a server of one model (loaded)."""
        (entry,) = self.models.entries.values()
        return entry.batcher

    @property
    def translator(self) -> Translator:
        """The translator of a server of one model (loaded)."""
        (entry,) = self.models.entries.values()
        return entry.translator

    def swap(self, translator: Translator, checkpoint: str) -> None:
        """Serve `translator` (loaded from `checkpoint`) from the next batch on (the reload of a server of one
        model)."""
        (entry,) = self.models.entries.values()
        entry.batcher.swap(translator)
        entry.translator, entry.path = translator, checkpoint
        self.info.update(model_info(translator, checkpoint))


def model_info(translator: Translator, checkpoint: str | None) -> dict:
    """What /info says about the model served (a reload replaces it)."""
    cfg = translator.cfg  # None: an Argos package (a CTranslate2 model of anyone's; aiayn.decoding.ct2)
    return {"checkpoint": checkpoint, "model": cfg and cfg.to_dict(),
            "parameters": cfg and expected_parameters(cfg), "vocab_size": len(translator.vocab),
            "device": str(translator.device), "precision": translator.precision,
            "shortlist": translator.shortlist.describe() if translator.shortlist is not None else None}
