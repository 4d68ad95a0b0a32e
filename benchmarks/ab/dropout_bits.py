"""What drawing 15 random bits per element (aiayn.fast.Dropout since 2026-11-25) instead of 31 gives: the mask alone
on activation-sized tensors, then whole bf16 training steps on the peer harness's batch shape, the two versions
interleaved step by step (in alternating order) on two copies of one model.

    python -m benchmarks.ab.dropout_bits --threads 2 --configs small,base --steps 10,4

The 31-bit mask is no longer in aiayn: `ThirtyOneBitDropout` below keeps it (aiayn.fast.Dropout as it was until
2026-11-25), and `with_dropout` builds the other side of the A/B by swapping a model's Dropout modules for it.
"""

import argparse
import copy

import torch

from aiayn import fast
from aiayn.model import Transformer
from aiayn.training.losses import TrainingObjective
from benchmarks import workloads
from benchmarks.timing import compare, measure, table


class ThirtyOneBitDropout(fast.Dropout):
    """aiayn.fast.Dropout as it was until 2026-11-25: 31 bits per element, two per 64-bit draw."""

    def forward(self, x):
        if not self.training or self.p == 0.0 or x.device.type != "cpu" or self.p >= 1.0:
            return torch.nn.Dropout.forward(self, x)
        n = x.numel()
        bits = torch.empty((n + 1) // 2, dtype=torch.int64).random_().view(torch.int32)[:n].view(x.shape)
        keep = bits.bitwise_and_(0x7FFFFFFF) >= round(self.p * 2**31)
        return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))


VERSIONS = {"31-bit": ThirtyOneBitDropout, "15-bit": fast.Dropout}


def with_dropout(model: torch.nn.Module, cls: type) -> torch.nn.Module:
    """A copy of `model` whose fast.Dropout modules are `cls` modules of the same p."""
    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if isinstance(child, fast.Dropout):
                setattr(parent, name, cls(child.p))
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default="small,base")
    ap.add_argument("--steps", default="10,4", help="timed steps per version, per config")
    ap.add_argument("--tokens", type=int, default=4096, help="target tokens per training batch")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rows = []
    for shape, dtype in (((4470, 512), torch.bfloat16), ((4470, 512), torch.float32), ((4470, 2048), torch.bfloat16)):
        x = torch.randn(shape).to(dtype)
        drops = [cls(0.1).train() for cls in VERSIONS.values()]
        cells = [measure(lambda d=d, x=x: d(x), repeats=1, warmup=3, number=40).best for d in drops]
        cells.append(measure(lambda x=x: torch.nn.functional.dropout(x, 0.1, True), repeats=1, warmup=3,
                             number=40).best)
        rows.append([f"{shape} {str(dtype)[6:]}", *(f"{c * 1e3:.2f}" for c in cells)])
    print(table(["mask of", "31-bit ms", "15-bit ms", "torch's dropout ms"], rows))

    rows = []
    for name, steps in zip(args.configs.split(","), map(int, args.steps.split(","))):
        cfg = workloads.model_config(name)
        src, tgt_in, tgt_out, _, _ = workloads.train_batch(cfg.vocab_size, args.tokens)
        torch.manual_seed(0)
        model = Transformer(cfg).train()

        def step_of(m, src=src, tgt_in=tgt_in, tgt_out=tgt_out):
            objective = TrainingObjective(m)
            opt = torch.optim.Adam(m.parameters(), lr=1e-4, foreach=True)

            def step():
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss, _ = objective(src, tgt_in, tgt_out)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            return step

        # ABBA: neither version always goes first
        t = compare({k: step_of(with_dropout(model, cls)) for k, cls in VERSIONS.items()}, repeats=steps,
                    order="abba")
        a, b = t["31-bit"].median, t["15-bit"].median
        rows.append([name, f"{a:.3f}", f"{b:.3f}", f"{a / b:.3f}x"])
    print()
    print(table(["training step (bf16)", "31-bit s/step", "15-bit s/step", "ratio"], rows))


if __name__ == "__main__":
    main()
