"""What drawing 15 random bits per element (aiayn.fast.Dropout since 2026-11-25) instead of 31 gives: the mask alone
on activation-sized tensors, then whole bf16 training steps on the shared harness's batch, the two versions
interleaved step by step on one model (in alternating order).

    python benchmarks/dropout_bits.py --threads 2 --configs small,base --steps 10,4
"""

import argparse
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "shared" / "bench" / "peers"))

import common  # noqa: E402  (the shared harness)
from aiayn_adapter import Adapter  # noqa: E402

from aiayn import fast  # noqa: E402

FIFTEEN_BITS = fast.Dropout.forward


def thirty_one_bits(self, x):
    """aiayn.fast.Dropout as it was until 2026-11-25: 31 bits per element, two per 64-bit draw."""
    if not self.training or self.p == 0.0 or x.device.type != "cpu" or self.p >= 1.0:
        return torch.nn.Dropout.forward(self, x)
    n = x.numel()
    bits = torch.empty((n + 1) // 2, dtype=torch.int64).random_().view(torch.int32)[:n].view(x.shape)
    keep = bits.bitwise_and_(0x7FFFFFFF) >= round(self.p * 2**31)
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))


VERSIONS = {"31-bit": thirty_one_bits, "15-bit": FIFTEEN_BITS}


def ms(fn, reps: int = 40) -> float:
    for _ in range(3):
        fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default="small,base")
    ap.add_argument("--steps", default="10,4", help="timed steps per version, per config")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    print("| mask of | 31-bit ms | 15-bit ms | torch's dropout ms |\n|---|---|---|---|")
    for shape, dtype in (((4470, 512), torch.bfloat16), ((4470, 512), torch.float32), ((4470, 2048), torch.bfloat16)):
        x = torch.randn(shape).to(dtype)
        drop = fast.Dropout(0.1).train()
        cells = [ms(lambda f=f, d=drop, x=x: f(d, x)) for f in VERSIONS.values()]
        torch_ms = ms(lambda x=x: torch.nn.functional.dropout(x, 0.1, True))
        print(f"| {shape} {str(dtype)[6:]} | {cells[0]:.2f} | {cells[1]:.2f} | {torch_ms:.2f} |")

    print("\n| training step (bf16) | 31-bit s/step | 15-bit s/step | ratio |\n|---|---|---|---|")
    for name, steps in zip(args.configs.split(","), map(int, args.steps.split(","))):
        cfg = common.get_config(name)
        batch = common.make_train_batch(cfg.vocab, 4096, 25, 30)
        torch.manual_seed(0)
        adapter = Adapter(cfg)
        model = adapter.build().train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
        prepared = adapter.prepare_train(batch)
        times = {k: [] for k in VERSIONS}
        for rep in range(steps + 1):
            order = list(VERSIONS.items())
            for k, forward in order if rep % 2 else order[::-1]:  # ABBA: neither version always goes first
                fast.Dropout.forward = forward
                t = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = adapter.train_loss(model, prepared)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if rep:  # the first round warms up
                    times[k].append(time.perf_counter() - t)
        fast.Dropout.forward = FIFTEEN_BITS
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        print(f"| {name} | {med['31-bit']:.3f} | {med['15-bit']:.3f} | {med['31-bit'] / med['15-bit']:.3f}x |")


if __name__ == "__main__":
    main()
