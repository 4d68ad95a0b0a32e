"""How a decoding step's cross-attention should hold its keys on the CPU: Q K^T for beam search's few queries per
sentence (beams x heads rows against that sentence's S keys), as one batched matmul over (B * h) sentences-heads,

* against K held (B, h, S, dk) contiguous, read transposed (what aiayn did before),
* against K^T held (B, h, dk, S) contiguous (aiayn.decoding.cache.keys_for_queries: what it does now for 4 queries
  or more; --beam 1 or 2 shows why not for fewer: other bits, little gain),

and the step's second matmul, weights @ V, for scale; whether the two products are equal bit for bit.

    python -m benchmarks.ab.cross_attention_keys [--sentences 64 --heads 4 --beam 4 --dk 48 --lengths 23,37,64]
        [--threads 1 --reps 7]
"""

import argparse

import torch

from aiayn import native
from aiayn.decoding.cache import keys_for_queries
from benchmarks.timing import compare, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--dk", type=int, default=48)
    ap.add_argument("--lengths", default="23,37,64", help="source lengths S, comma-separated")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    native.set_enabled(False)  # keys_for_queries as it is for torch's matmuls (aiayn.native's kernels read K)
    torch.manual_seed(0)
    b, h, g, d = args.sentences, args.heads, args.beam, args.dk
    rows = []
    for s in map(int, args.lengths.split(",")):
        q = torch.randn(b, h, g, d)
        k, v = torch.randn(b, h, s, d), torch.randn(b, h, s, d)
        kt = keys_for_queries(k, g)
        weights = torch.randn(b, h, g, s).softmax(-1)
        kt = kt if g >= 4 else k.transpose(-2, -1).contiguous().transpose(-2, -1)  # the layout, to compare
        same = torch.equal(q @ k.transpose(-2, -1), q @ kt.transpose(-2, -1))
        t = compare({"K read transposed": lambda q=q, k=k: q @ k.transpose(-2, -1),
                     "K^T held": lambda q=q, kt=kt: q @ kt.transpose(-2, -1),
                     "weights @ V": lambda w=weights, v=v: w @ v}, repeats=args.reps, number=50)
        before, after = t["K read transposed"].best, t["K^T held"].best
        rows.append([s, f"{before * 1e6:.0f}", f"{after * 1e6:.0f}", f"{after / before:.2f}", "yes" if same else "no",
                     f"{t['weights @ V'].best * 1e6:.0f}"])
    print(f"{b} sentences x {h} heads, {g} queries each, dk {d}, {torch.get_num_threads()} thread(s); us a call, best "
          f"of {args.reps}")
    print(table(["S", "Q K^T, K read transposed", "Q K^T, K^T held", "ratio", "same bits", "weights @ V"], rows))


if __name__ == "__main__":
    main()
