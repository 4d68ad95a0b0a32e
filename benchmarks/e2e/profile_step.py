"""Where the time goes: torch.profiler over one aiayn training step or one translated batch, on the shared harness's
shapes (benchmarks/workloads.py), so the same work `bench_train.py` / `bench_infer.py` time through
benchmarks/peers/aiayn_adapter.py.

    python -m benchmarks.e2e.profile_step --what train --config base --dtype bf16 [--threads 2] [--rows 25]
    python -m benchmarks.e2e.profile_step --what beam --dtype bf16      # beam 4, 64 sentences, 30 output tokens
    python -m benchmarks.e2e.profile_step --what greedy --dtype fp32 [--precision int8] [--unpacked]

Prints the top operators by self CPU time. A training step is forward + loss under autocast, backward, Adam,
zero_grad; "## forward+loss", "## backward", "## optimizer" rows give the split. Decoding runs on aiayn's decoding
copy (aiayn.decoding.inference.decoding_copy: --precision, default the --dtype's; --unpacked: prepack=False).
"""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from aiayn.config import PRECISIONS
from aiayn.decoding.inference import decoding_copy
from aiayn.fast import keep_freed_memory
from aiayn.model import Transformer
from aiayn.training.losses import TrainingObjective
from benchmarks import workloads
from benchmarks.timing import measure


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", default="train", choices=["train", "beam", "greedy"])
    ap.add_argument("--config", default="base", choices=sorted(workloads.HARNESS_VOCAB))
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"], help="training: autocast or not")
    ap.add_argument("--precision", "--weights", choices=PRECISIONS,
                    help="decoding precision (default: fp32 or bf16 as --dtype; --weights: its old name)")
    ap.add_argument("--unpacked", action="store_true", help="decode with unpacked weights (prepack=False)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rows", type=int, default=25, help="operators in the table")
    ap.add_argument("--tokens", type=int, default=4096, help="target tokens of the training batch")
    ap.add_argument("--sents", type=int, default=64, help="sentences of the decoding batch")
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as every `aiayn` command does
    torch.manual_seed(0)
    cfg = workloads.model_config(args.config)
    model = Transformer(cfg).train()
    if args.what == "train":
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        objective = TrainingObjective(model)
        src, tgt_in, tgt_out, _, tgt_l = workloads.train_batch(cfg.vocab_size, args.tokens)
        n_tokens = sum(tgt_l)
        autocast = args.dtype == "bf16"

        def step():
            with record_function("## forward+loss"), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss, _ = objective(src, tgt_in, tgt_out)
            with record_function("## backward"):
                loss.backward()
            with record_function("## optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
    else:
        decoder = decoding_copy(model, args.precision or args.dtype, prepack=False if args.unpacked else None)
        src = workloads.src_batch(cfg.vocab_size, args.sents)
        beam, n_tokens = (4 if args.what == "beam" else 1), args.sents * 30

        def step():
            with torch.inference_mode():
                workloads.search_fixed_length(decoder, src, beam, 30)

    plain = measure(step, repeats=1, warmup=args.warmup).best
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print(f"{args.what} {args.config} {args.dtype}, threads {torch.get_num_threads()}: unprofiled {plain:.2f} s, "
          f"{n_tokens / plain:.0f} tgt tok/s")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
