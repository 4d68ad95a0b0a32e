"""Train the quickstart's model for a few minutes, sampling RSS; argv: OUT dtype minutes keep_freed(0/1)"""
import sys, threading, time, resource, json
from pathlib import Path
out, dtype, minutes, keep = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
from aiayn.fast import keep_freed_memory
if keep:
    keep_freed_memory()
from aiayn.config import ModelConfig
from aiayn.train import TrainConfig, train
samples = []
def sample():
    t0 = time.time()
    while True:
        with open("/proc/self/status") as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
        samples.append((round(time.time() - t0), rss // 1024))
        time.sleep(5)
threading.Thread(target=sample, daemon=True).start()
cfg = ModelConfig.preset("small", dropout=0.0, init="fairseq")
tc = TrainConfig(max_steps=int(minutes), max_minutes=0, max_tokens=2048, warmup=400, lr_factor=0.45, anneal=0.3,
                 save_every_steps=int(minutes) // 2, save_every_minutes=0, keep_last=1, dtype=dtype, log_every=10, threads=2)
s = train(Path("/tmp/mem/data"), Path(out), cfg, tc, progress=False)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(json.dumps({"dtype": dtype, "keep_freed": keep, "steps": s["step"], "peak_MB": peak,
                  "rss_MB_every_5s": [m for _, m in samples][::6]}))
