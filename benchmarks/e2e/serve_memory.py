"""The server's decoding without HTTP: a Batcher of the quickstart's model fed by 16 in-process clients (one sentence,
or 2-8 one time in five), printing the process's RSS every 20 s with the batches decoded so far.

    LRU_CACHE_CAPACITY=8 ONEDNN_PRIMITIVE_CACHE_CAPACITY=8 python -m benchmarks.e2e.serve_memory \
        --checkpoint runs/serve-bench/averaged.safetensors --src runs/serve-bench/test.src.txt \
        --seconds 600 [--unpacked]
"""

import argparse
import asyncio
import random
import time

import torch

from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.serve.batcher import BatchConfig, Batcher


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(checkpoint: str, src: str, seconds: float, packed: bool) -> None:
    torch.set_num_threads(1)
    translator = Translator.load(checkpoint, SearchConfig(), prepack=packed)
    lines = [line for line in open(src).read().splitlines() if line.strip()][:300]
    batcher, rng, start = Batcher(translator, BatchConfig(max_wait_ms=2)), random.Random(0), time.monotonic()

    async def client() -> None:
        while time.monotonic() - start < seconds:
            await batcher.submit(rng.sample(lines, 1 if rng.random() < 0.8 else rng.randint(2, 8)))

    async def sampler() -> None:
        while time.monotonic() - start < seconds:
            await asyncio.sleep(20)
            print(f"{time.monotonic() - start:.0f}s rss {rss_mb():.1f} batches {batcher.stats['batches']}", flush=True)

    await asyncio.gather(sampler(), *(client() for _ in range(16)))
    await batcher.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--src", required=True, help="source sentences, one a line (the first 300 are used)")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--unpacked", action="store_true", help="Translator(..., prepack=False)")
    args = ap.parse_args()
    asyncio.run(run(args.checkpoint, args.src, args.seconds, not args.unpacked))


if __name__ == "__main__":
    main()
