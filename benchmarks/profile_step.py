"""Where the time goes: torch.profiler over one aiayn training step or one translated batch, on the shared
harness's synthetic inputs, through `aiayn_adapter.py` (so exactly what `bench_train.py` / `bench_infer.py` time).

    python benchmarks/profile_step.py --what train --config base --dtype bf16 [--threads 2] [--rows 25]
    python benchmarks/profile_step.py --what beam --dtype bf16      # beam 4, 64 sentences, 30 output tokens
    python benchmarks/profile_step.py --what greedy --dtype fp32

Prints the top operators by self CPU time. A training step is forward + loss under autocast, backward, Adam,
zero_grad; "## forward+loss", "## backward", "## optimizer" rows give the split.
"""

import argparse
import contextlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "shared" / "bench" / "peers"))

import common  # noqa: E402  (the shared harness)
import torch  # noqa: E402
from aiayn_adapter import Adapter  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", default="train", choices=["train", "beam", "greedy"])
    ap.add_argument("--config", default="base", choices=sorted(common.CONFIGS))
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()

    common.setup_threads(args.threads)
    torch.manual_seed(0)
    cfg = common.get_config(args.config)
    adapter = Adapter(cfg)
    model = adapter.build().train()
    opt = adapter.make_optimizer(model) if hasattr(adapter, "make_optimizer") else torch.optim.Adam(
        model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.dtype == "bf16" else contextlib.nullcontext
    if args.what == "train":
        batch = common.make_train_batch(cfg.vocab, 4096, 25, 30)
        prepared = adapter.prepare_train(batch)
        n_tokens = batch.n_tgt_tokens

        def step():
            with record_function("## forward+loss"), ctx():
                loss = adapter.train_loss(model, prepared)
            with record_function("## backward"):
                loss.backward()
            with record_function("## optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
    else:
        model.eval()
        src = adapter.prepare_src(common.make_src_batch(cfg.vocab, 64))
        beam, n_tokens = (4 if args.what == "beam" else 1), 64 * 30

        def step():
            with torch.inference_mode(), ctx():
                adapter.generate(model, src, beam, 30, 0.6)

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    step()
    plain = time.perf_counter() - t0
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print(f"{args.what} {args.config} {args.dtype}, threads {torch.get_num_threads()}: unprofiled {plain:.2f} s, "
          f"{n_tokens / plain:.0f} tgt tok/s")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
