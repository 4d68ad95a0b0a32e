"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from aiayn.config import ModelConfig
from aiayn.model import Transformer

__all__ = ["ModelConfig", "Transformer"]
__version__ = "0.1.0"
