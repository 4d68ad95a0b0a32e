"""The server's decoding without HTTP: a Batcher of the quickstart's model fed by 16 in-process clients (one sentence,
or 2-8 one time in five), printing the process's RSS every 20 s with the batches decoded so far.

    LRU_CACHE_CAPACITY=8 ONEDNN_PRIMITIVE_CACHE_CAPACITY=8 python benchmarks/results/2026-11-25-serving/memvar.py \
        SECONDS packed|unpacked

Checkpoint and sentences: runs/serve-bench (the quickstart run's averaged checkpoint and its test.src.txt).
"""

import asyncio
import random
import sys
import time

import torch

from aiayn.search import SearchConfig
from aiayn.serve.batcher import BatchConfig, Batcher
from aiayn.translate import Translator


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def main(seconds: float, packed: bool) -> None:
    torch.set_num_threads(1)
    translator = Translator.load("runs/serve-bench/averaged.safetensors", SearchConfig(), packed=packed)
    lines = [line for line in open("runs/serve-bench/test.src.txt").read().splitlines() if line.strip()][:300]
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


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]), sys.argv[2] == "packed"))
