"""What the routes (app.py) share: the server's state around its catalogue of models (aiayn.serve.models; a server
of one model is a catalogue of one), and the request limits it holds."""

from __future__ import annotations

from dataclasses import dataclass

from aiayn.decoding.search import SearchConfig
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
