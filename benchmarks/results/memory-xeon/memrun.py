"""Train the quickstart's model for STEPS steps, sampling resident memory every 5 s; prints one JSON line.

    python memrun.py DATA OUT DTYPE STEPS KEEP_FREED(0/1)      (DATA: the built-in Bible, 8,000 pieces, prepared)
"""

import json
import resource
import sys
import threading
import time
from pathlib import Path

from aiayn.config import ModelConfig
from aiayn.fast import keep_freed_memory
from aiayn.train import TrainConfig, train

data, out, dtype, steps, keep = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
if keep:
    keep_freed_memory()
samples = []


def sample() -> None:
    while True:
        with open("/proc/self/status") as f:
            samples.append(next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) // 1024)
        time.sleep(5)


threading.Thread(target=sample, daemon=True).start()
cfg = ModelConfig.preset("small", dropout=0.0, init="fairseq")
tc = TrainConfig(max_steps=steps, max_minutes=0, max_tokens=2048, warmup=400, lr_factor=0.45, anneal=0.3,
                 save_every_steps=steps // 2, save_every_minutes=0, keep_last=1, dtype=dtype, log_every=10, threads=2)
s = train(Path(data), Path(out), cfg, tc, progress=False)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(json.dumps({"dtype": dtype, "keep_freed": keep, "steps": s["step"], "peak_MB": peak,
                  "rss_MB_every_5s": samples[::6]}))
