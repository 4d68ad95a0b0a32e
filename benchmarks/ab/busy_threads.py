"""Training speed on a busy machine: torch's default (a thread per core) against `threads: 0`, which takes only the
cores other processes leave free (aiayn.runtime.free_cores), with 0, 1, ... cores kept busy by spinning processes.

    python -m benchmarks.ab.busy_threads --busy 0,1 --steps 6

Each cell: median seconds per training step of the quickstart's model (`small`, fp32, 2k-token batches).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import torch

from aiayn.config import BOS_ID, EOS_ID, ModelConfig
from aiayn.model import Transformer
from aiayn.runtime import free_cores
from aiayn.training.losses import TrainingObjective
from benchmarks.timing import measure, table


def spin(stop) -> None:
    while not stop.is_set():
        pass


def step_time(threads: int, steps: int) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("small")).train()
    objective = TrainingObjective(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
    b, n = 64, 32  # 2,048 target tokens
    src = torch.randint(4, 8000, (b, n))
    src[:, -1] = EOS_ID
    tgt = torch.randint(4, 8000, (b, n + 1))
    tgt_in, tgt_out = tgt[:, :-1].clone(), tgt[:, 1:].clone()
    tgt_in[:, 0], tgt_out[:, -1] = BOS_ID, EOS_ID

    def step():
        loss, _ = objective(src, tgt_in, tgt_out)
        (loss / (b * n)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return measure(step, repeats=steps, warmup=1).median


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", default="0,1", help="how many cores to keep busy, per row")
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores; seconds per step (median of {args.steps}), small preset, fp32, 2k tokens")
    rows = []
    for busy in (int(x) for x in args.busy.split(",")):
        stop = mp.Event()
        procs = [mp.Process(target=spin, args=(stop,)) for _ in range(busy)]
        for p in procs:
            p.start()
        time.sleep(0.5)
        free = free_cores()
        row = [step_time(n, args.steps) for n in (cores, 1, free)]
        stop.set()
        for p in procs:
            p.join()
        rows.append([busy, free, *(f"{t:.2f}" for t in row)])
    print(table(["cores kept busy", "free_cores()", "all cores (torch default)", "1 thread", "threads 0 (free cores)"],
                rows))


if __name__ == "__main__":
    main()
