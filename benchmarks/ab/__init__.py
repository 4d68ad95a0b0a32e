"""A/B micro-benchmarks: one lever each, its variants interleaved."""

import argparse
import statistics
import time
from collections.abc import Callable


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


def interleave(engine, lines: list[str], sides: dict[str, Callable[[], None]], rounds: int) -> tuple[dict, dict]:
    """Each round, for each side in turn: sides[name]() sets that side up, then the engine translates `lines`, timed
    in CPU seconds (`time.process_time`) so that the machine's drift hits every side alike. -> (seconds, outputs):
    each side's times and its last round's words per line, print_interleaved's arguments. A 64-line warm-up first;
    the first side is set up again at the end."""
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    outputs: dict[str, list] = {}
    engine.translate_nbest(lines[:64])
    for _ in range(rounds):
        for name, setup in sides.items():
            setup()
            cpu = time.process_time()
            nbests = engine.translate_nbest(lines)
            seconds[name].append(time.process_time() - cpu)
            outputs[name] = [hyps[0].tokens for hyps in nbests]
    next(iter(sides.values()))()
    return seconds, outputs


def real_text_options(doc: str, rounds: int, threads: int, more=None) -> argparse.Namespace:
    """The options of an interleaved A/B of decoding on real text, parsed: --run, --src, --precision, --beam,
    --rounds, --threads (the defaults given), and those more(parser) adds; the process then set as `aiayn`'s main
    sets it for every command."""
    from aiayn.runtime import configure_process

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"])
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--threads", type=int, default=threads)
    if more is not None:
        more(ap)
    args = ap.parse_args()
    configure_process(kernel_cache=True, keep_freed_memory=True)
    return args
