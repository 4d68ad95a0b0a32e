"""torch imported for a translation on a CPU without what such a translation never runs. torch's own import ends with
two modules imported for what they register alone: kernels for the meta device written in Python
(torch._meta_registrations: what torch.compile, export and fake tensors compute shapes with) and CUDA kernels that
replace some of ATen's (torch._native): a large part of the import's CPU time (docs/speed-design.md). While
`registrations_deferred` is open, importing either makes a lazy module (importlib's LazyLoader): the first use of any
of its attributes runs it, and `finish` runs both, which `runtime.resolve_device` does for every device but the CPU.
No torch here, so that `cli.main` can open it before torch is imported; where torch is imported already it changes
nothing."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
import types

REGISTRATIONS = ("torch._meta_registrations", "torch._native")


class _Deferring(importlib.abc.MetaPathFinder):
    """Finds the REGISTRATIONS where the other finders do, and hands them back with a loader that waits for a use."""

    def find_spec(self, name, path, target=None):
        if name not in REGISTRATIONS:
            return None
        spec = next((s for f in sys.meta_path if f is not self and hasattr(f, "find_spec")
                     for s in [f.find_spec(name, path, target)] if s is not None), None)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


@contextlib.contextmanager
def registrations_deferred(enabled: bool = True):
    """Import torch inside this block to leave REGISTRATIONS unrun until they are used (or `finish`)."""
    if not enabled or "torch" in sys.modules:
        yield
        return
    finder = _Deferring()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def deferred() -> list[str]:
    """Those of REGISTRATIONS imported and not run yet (a lazy module is of its own type until it runs)."""
    return [name for name in REGISTRATIONS if name in sys.modules and type(sys.modules[name]) is not types.ModuleType]


def finish() -> None:
    """Run what was deferred: any attribute of a lazy module runs it."""
    for name in deferred():
        _ = sys.modules[name].__name__
