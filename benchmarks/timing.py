"""The one timing helper of the benchmarks: warm-up, repeats, best / median of N, variants interleaved, a table.

    from benchmarks.timing import compare, measure, once, table

    t = measure(fn, repeats=5)                        # Timing: t.best, t.median (seconds a call), t.result
    ts = compare({"A": fa, "B": fb}, repeats=5)       # A, B, A, B, ...: a machine's drift hits every variant alike
    result, seconds = once(fn)                        # one call, no warm-up (a whole run, a subprocess)
    print(table(["variant", "ms"], [[k, f"{v.median * 1e3:.1f}"] for k, v in ts.items()]))

`warmup` untimed calls per variant come first. `number` calls make one sample (for calls too short to time alone:
the sample is their mean). `order="abba"` reverses the order every other round, so that no variant always runs first.
`sync` (e.g. torch.cuda.synchronize) is called before each clock read, so that queued GPU work is counted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timing:
    """Seconds per call, one entry per sample, and what the last call returned."""

    times: list[float] = field(default_factory=list)
    result: Any = None

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def mean(self) -> float:
        return statistics.mean(self.times)


def _sample(fn: Callable[[], Any], number: int, sync: Callable[[], Any] | None) -> tuple[float, Any]:
    if sync:
        sync()
    start = time.perf_counter()
    for _ in range(number):
        result = fn()
    if sync:
        sync()
    return (time.perf_counter() - start) / number, result


def compare(variants: Mapping[Any, Callable[[], Any]], repeats: int = 5, warmup: int = 1, number: int = 1,
            order: str = "abab", sync: Callable[[], Any] | None = None,
            each: Callable[[Any, int, float], Any] | None = None) -> dict[Any, Timing]:
    """Time every variant `repeats` times, interleaved round by round (order "abab", or "abba": every other round
    reversed); `each(name, round, seconds)` is called after every sample (progress lines)."""
    if order not in ("abab", "abba"):
        raise ValueError(f"order must be 'abab' or 'abba', not {order!r}")
    names = list(variants)
    out = {name: Timing() for name in names}
    for name in names:
        for _ in range(warmup):
            out[name].result = variants[name]()
    for r in range(repeats):
        for name in names[::-1] if order == "abba" and r % 2 else names:
            seconds, out[name].result = _sample(variants[name], number, sync)
            out[name].times.append(seconds)
            if each:
                each(name, r, seconds)
    return out


def measure(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1, number: int = 1,
            sync: Callable[[], Any] | None = None) -> Timing:
    """One variant: `compare` of `fn` alone."""
    return compare({"": fn}, repeats, warmup, number, sync=sync)[""]


def once(fn: Callable[[], Any], sync: Callable[[], Any] | None = None) -> tuple[Any, float]:
    """(what fn returned, its seconds): one call, no warm-up."""
    seconds, result = _sample(fn, 1, sync)
    return result, seconds


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table; cells are printed with str()."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)
