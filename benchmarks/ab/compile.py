"""Does `aiayn train --compile` (torch.compile) pay on this machine? Times eager and compiled training steps of
the same model on the same batch (the peer harness's shape, benchmarks/workloads.py), interleaved, after warm-up
(compile time reported separately).

    python -m benchmarks.ab.compile [--config small --dtype bf16 --threads 0 --reps 5]
"""

import argparse

import torch

from aiayn.model import Transformer
from aiayn.training.losses import TrainingObjective
from benchmarks import workloads
from benchmarks.timing import compare, once


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="small", choices=sorted(workloads.HARNESS_VOCAB))
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=4096, help="target tokens per batch")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = workloads.model_config(args.config)
    src, tgt_in, tgt_out, _, tgt_l = workloads.train_batch(cfg.vocab_size, args.tokens)
    n_tokens = sum(tgt_l)

    def make(compiled: bool):
        torch.manual_seed(0)
        model = Transformer(cfg).train()
        objective = TrainingObjective(model)
        if compiled:
            objective = torch.compile(objective)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, foreach=True)

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
                loss, _ = objective(src, tgt_in, tgt_out)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    steps = {"eager": make(False), "compiled": make(True)}
    _, seconds = once(steps["compiled"])
    print(f"compile + first step: {seconds:.1f} s", flush=True)
    t = compare(steps, repeats=args.reps)
    print(f"{args.config} {args.dtype}, {torch.get_num_threads()} threads, {n_tokens} target tokens/step")
    for name in steps:
        print(f"  {name:9s} median {t[name].median:.3f} s/step = {n_tokens / t[name].median:.0f} target tok/s")
    print(f"  compiled / eager speed: {t['eager'].median / t['compiled'].median:.2f}x")


if __name__ == "__main__":
    main()
