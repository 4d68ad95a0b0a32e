"""Train the quickstart's model for a number of steps, sampling resident memory; prints one JSON line.

    python -m benchmarks.e2e.memory_run DATA OUT --dtype bf16 --steps 400 --keep-freed --threads 2 --every 5

DATA: the built-in Bible prepared with 8,000 pieces (the quickstart's bf16 recipe). Set ONEDNN_PRIMITIVE_CACHE_CAPACITY
and LRU_CACHE_CAPACITY in the environment to compare kernel-cache bounds (a value you set wins over aiayn's).
"""

import argparse
import json
import resource
import threading
import time
from pathlib import Path

from aiayn.config import ModelConfig
from aiayn.fast import keep_freed_memory
from aiayn.training.train import TrainConfig, train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--keep-freed", action="store_true", help="fast.keep_freed_memory(), as aiayn train does")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between memory samples")
    args = ap.parse_args()
    if args.keep_freed:
        keep_freed_memory()
    samples = []

    def sample() -> None:
        while True:
            with open("/proc/self/status") as f:
                samples.append(next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) // 1024)
            time.sleep(args.every)

    threading.Thread(target=sample, daemon=True).start()
    cfg = ModelConfig.preset("small", dropout=0.0, init="fairseq")
    tc = TrainConfig(max_steps=args.steps, max_minutes=0, max_tokens=2048, warmup=400, lr_factor=0.45, anneal=0.3,
                     save_every_steps=args.steps // 2, save_every_minutes=0, keep_last=1, dtype=args.dtype,
                     log_every=10, threads=args.threads)
    s = train(Path(args.data), Path(args.out), cfg, tc, progress=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps({"dtype": args.dtype, "keep_freed": args.keep_freed, "steps": s["step"], "peak_MB": peak,
                      f"rss_MB_every_{args.every:g}s": samples}))


if __name__ == "__main__":
    main()
