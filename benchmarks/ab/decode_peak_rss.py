"""Peak RSS of one harness-shaped decoding process (base, 64 sentences, 30 forced tokens, 1 thread) of the aiayn
checkout at REPO: run it once per checkout (A/B of two commits) and precision.

    python benchmarks/ab/decode_peak_rss.py --repo /path/to/checkout --precision int8 --beam 4 \
        --harness ../shared/bench/peers
"""

import argparse
import resource
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=".", help="the aiayn checkout whose decoding is measured")
    ap.add_argument("--precision", "--weights", choices=["fp32", "int8"], default="fp32",
                    help="--weights: its old name")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--harness", default="../shared/bench/peers", help="the shared peer harness (its common.py)")
    args = ap.parse_args()
    repo = str(Path(args.repo).resolve())
    sys.path[:0] = [args.harness, repo]
    import common  # the harness's module
    import torch

    import aiayn

    torch.set_num_threads(1)
    cfg = common.get_config("base")
    adapter = {"fp32": "aiayn_adapter", "int8": "aiayn_int8"}[args.precision]
    a = common.load_adapter(f"{repo}/benchmarks/peers/{adapter}.py")(cfg)
    m = a.build()
    m.eval()
    src = a.prepare_src(common.make_src_batch(cfg.vocab, 64))
    with torch.inference_mode():
        for _ in range(3):
            a.generate(m, src, args.beam, 30, 0.6)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.precision} beam {args.beam}: peak RSS {peak:,.0f} MB ({aiayn.__file__})")


if __name__ == "__main__":
    main()
