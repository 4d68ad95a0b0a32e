"""torch.mm rates in fp32 and bf16 (best of 5 after 2 warm-up calls), to see whether this CPU multiplies bf16 natively.

    python -m benchmarks.ab.matmul_rates --threads 1,2 --sizes 512,1024,2048
"""

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sizes", default="512,1024,2048")
    args = ap.parse_args()
    for threads in map(int, args.threads.split(",")):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16):
            for n in map(int, args.sizes.split(",")):
                a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
                for _ in range(2):
                    a @ b
                best = 1e9
                for _ in range(5):
                    t = time.perf_counter()
                    a @ b
                    best = min(best, time.perf_counter() - t)
                print(threads, dtype, n, f"{2 * n**3 / best / 1e9:.0f} GFLOP/s", flush=True)


if __name__ == "__main__":
    main()
