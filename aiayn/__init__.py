"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from __future__ import annotations

import importlib

__all__ = ["ModelConfig", "Transformer"]
__version__ = "0.1.0"
_HOMES = {"ModelConfig": "aiayn.config", "Transformer": "aiayn.model"}  # imported when first asked for (torch: model)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'aiayn' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
