"""A/B micro-benchmarks: one lever each, its variants interleaved."""

import statistics


def print_interleaved(seconds: dict[str, list[float]], outputs: dict[str, list]) -> None:
    """An interleaved A/B's summary: each side's minimum and median CPU seconds, the first side's over the second's
    (< 1: the first is faster), and how many output lines the two sides share."""
    (first, one), (second, other) = seconds.items()
    a, b = outputs.values()
    width = max(map(len, seconds))
    for name, s in seconds.items():
        print(f"  {name:{width}s} min {min(s):.3f}  median {statistics.median(s):.3f}")
    print(f"  {first} / {second}: {min(one) / min(other):.3f}x by the minimum, "
          f"{statistics.median(one) / statistics.median(other):.3f}x by the median; "
          f"{sum(x == y for x, y in zip(a, b))} of {len(a)} lines the same")
