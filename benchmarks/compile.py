"""Does `aiayn train --compile` (torch.compile) pay on this machine? Times eager and compiled training steps of
the same model on the same batch, interleaved, after warm-up (compile time reported separately).

    python benchmarks/compile.py [--config small --dtype bf16 --threads 0 --reps 5]
"""

import argparse
import sys
import time
from pathlib import Path

import torch

HARNESS = Path(__file__).resolve().parents[2] / "shared" / "bench" / "peers"
sys.path.insert(0, str(HARNESS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from aiayn_adapter import Adapter  # noqa: E402

from aiayn.losses import TrainingObjective  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="small", choices=sorted(common.CONFIGS))
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = common.CONFIGS[args.config]
    adapter = Adapter(cfg)
    batch = common.make_train_batch(cfg.vocab, 4096, 25, 30)
    src, tgt_in, tgt_out = adapter.prepare_train(batch)

    def make(compiled: bool):
        torch.manual_seed(0)
        model = adapter.build().train()
        objective = TrainingObjective(model)
        if compiled:
            objective = torch.compile(objective)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, foreach=True)

        def step():
            ctx = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16")
            with ctx:
                loss, _ = objective(src, tgt_in, tgt_out)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    steps = {"eager": make(False), "compiled": make(True)}
    t = time.perf_counter()
    steps["compiled"]()
    print(f"compile + first step: {time.perf_counter() - t:.1f} s", flush=True)
    steps["eager"]()
    times = {k: [] for k in steps}
    for _ in range(args.reps):
        for name, step in steps.items():
            t = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(f"{args.config} {args.dtype}, {torch.get_num_threads()} threads, {batch.n_tgt_tokens} target tokens/step")
    for name in steps:
        print(f"  {name:9s} median {med[name]:.3f} s/step = {batch.n_tgt_tokens / med[name]:.0f} target tok/s")
    print(f"  compiled / eager speed: {med['eager'] / med['compiled']:.2f}x")


if __name__ == "__main__":
    main()
