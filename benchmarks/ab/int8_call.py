"""How int8 decoding calls torch's quantized linear operator: aiayn's call (the operator's C++ function, torch function
dispatch off) against the same call with torch function dispatch on, interleaved in one process on real text.

    python -m benchmarks.ab.int8_call --run RUN --src test.src.txt [--rounds 6] [--beam 4] [--threads 1]

With dispatch on, torch looks for `__torch_function__` on each argument of the operator; on the packed weights (a
TorchScript object) that lookup raises and catches a C++ exception at every call. One int8 engine is loaded
(`--precision int8`, its projections aiayn.decoding.inference._int8_linear_class's); each round translates the whole
file with the projections' forward switched to one call, then the other (CPU seconds of translate_nbest,
`time.process_time`), so the machine's drift hits both alike. Prints each side's minimum and median, dispatch on over
off (> 1: off is faster), and how many output lines are the same. Search: |Y|^0.6 (power), patience 1, batch 64, as
benchmarks/e2e/realtext.py. Not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.inference import _int8_linear_class
from aiayn.decoding.search import PAPER_SEARCH
from benchmarks.ab import print_interleaved


def forwards() -> dict[str, object]:
    """name -> the Int8Linear forward to install: aiayn's, and the same operator call with dispatch on."""
    op = torch.ops.quantized.linear_dynamic.default._op

    def dispatch_on(self, x):
        return op(x, self._packed_params._packed_params, True)

    return {"dispatch off (aiayn)": _int8_linear_class().forward, "dispatch on": dispatch_on}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1)
    engine = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision="int8", device="cpu",
                                                 batch_size=64))
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    cls, sides = _int8_linear_class(), forwards()
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    outputs: dict[str, list[str]] = {}
    engine.translate_nbest(lines[:64])  # warm-up
    for _ in range(args.rounds):
        for name, forward in sides.items():
            cls.forward = forward
            cpu = time.process_time()
            outputs[name] = [hyps[0].text for hyps in engine.translate_nbest(lines)]
            seconds[name].append(time.process_time() - cpu)
    cls.forward = sides["dispatch off (aiayn)"]
    print(f"{args.run}: {len(lines)} lines, int8, beam {args.beam}, {args.threads} thread(s), {args.rounds} rounds; "
          f"CPU seconds of translate_nbest")
    print_interleaved(seconds, outputs)


if __name__ == "__main__":
    main()
