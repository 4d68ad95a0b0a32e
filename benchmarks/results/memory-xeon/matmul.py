"""torch.mm rates in fp32 and bf16 at 1 and 2 threads (best of 5 after 2 warm-up calls): python matmul.py"""

import time

import torch

for threads in (1, 2):
    torch.set_num_threads(threads)
    for dtype in (torch.float32, torch.bfloat16):
        for n in (512, 1024, 2048):
            a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
            for _ in range(2):
                a @ b
            best = 1e9
            for _ in range(5):
                t = time.perf_counter()
                a @ b
                best = min(best, time.perf_counter() - t)
            print(threads, dtype, n, f"{2 * n**3 / best / 1e9:.0f} GFLOP/s", flush=True)
