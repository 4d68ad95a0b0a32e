"""The optional extras of pyproject.toml: which modules each feature needs, the pip line that installs them, and the
one error a command raises when they are missing (`require`, called before the command does any work)."""

from __future__ import annotations

import importlib.util

from aiayn.errors import UserError

# feature -> (the pyproject extra that installs it, the modules it needs, what needs them). The `extra` extra brings
# them all.
OPTIONAL = {
    "viz": ("viz", ("matplotlib",), "aiayn attention, aiayn plot, aiayn table1 --plot, the plot of aiayn variations"),
    "serve": ("serve", ("fastapi", "uvicorn", "python_multipart", "fastapi_offline", "prometheus_client"),
              "aiayn serve"),
    "export": ("export", ("transformers", "ctranslate2", "spacy"), "aiayn export, aiayn translate --engine ct2"),
    "tensorboard": ("tensorboard", ("tensorboard",), "the TensorBoard logs of aiayn train"),
    "datasets": ("datasets", ("datasets",), "aiayn.data.load_wmt14"),
}


class MissingExtra(UserError):
    """A feature whose optional dependencies are not installed; the message names the extra and its pip line."""


def pip_line(extra: str) -> str:
    return f'pip install -e ".[{extra}]"'


def installed(module: str) -> bool:
    """Whether `module` can be imported, found without importing it (False where sys.modules holds None for it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module with no spec
        return False


def require(what: str, feature: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise MissingExtra unless the modules `feature` needs (or only `modules` of them) are installed. what: who
    needs them, e.g. "aiayn attention"."""
    extra, needs, _ = OPTIONAL[feature]
    missing = [m for m in modules or needs if not installed(m)]
    if missing:
        raise MissingExtra(f"{what} needs the {extra} extra ({', '.join(missing)} not installed): {pip_line(extra)}")
