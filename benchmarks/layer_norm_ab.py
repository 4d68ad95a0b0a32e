"""A/B of the 16-bit LayerNorm (aiayn.fast.LayerNorm) against torch's nn.LayerNorm in real training: the same
`aiayn train` command run twice on the same machine, once with each, for a fixed number of minutes; prints the
steps each made and the training NLL at the same steps (the two must learn alike: the change is a speed lever).
aiayn.fast.LayerNorm is 16-bit under CPU autocast only; on a GPU both arms run torch's kernel unless the device
check in its forward is removed (how the GPU rows of docs/speed.md were measured). On a GPU the first arm also
pays the loss's compilation.

    python benchmarks/layer_norm_ab.py --minutes 1 -- --config configs/multi30k.yaml --device cuda --max-tokens 8192
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

from torch import nn

import aiayn.model
from aiayn import fast
from aiayn.cli import main as aiayn_main


def run(kind: str, minutes: float, log_every: int, args: list[str]) -> list[dict]:
    aiayn.model.LayerNorm = fast.LayerNorm if kind == "16-bit" else nn.LayerNorm
    out = Path(tempfile.mkdtemp()) / kind
    aiayn_main(["train", *args, "--out", str(out), "--max-minutes", str(minutes), "--no-progress",
                "--log-every", str(log_every)])
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("train_args", nargs=argparse.REMAINDER, help="after --: arguments of aiayn train")
    a = ap.parse_args()
    train_args = [x for x in a.train_args if x != "--"]
    logs = {kind: run(kind, a.minutes, a.log_every, train_args) for kind in ("torch", "16-bit")}
    train = {k: {r["step"]: r for r in v if r["kind"] == "train"} for k, v in logs.items()}
    print(f"| LayerNorm | steps in {a.minutes:g} min | tokens/s (mean of the logged windows after the first) |")
    print("|---|---|---|")
    for k, v in train.items():
        rates = [r["tokens_per_s"] for _, r in sorted(v.items())[1:]] or [r["tokens_per_s"] for r in v.values()]
        print(f"| {k} | {max(r['step'] for r in logs[k]):,} | {sum(rates) / len(rates):,.0f} |")
    common = sorted(set(train["torch"]) & set(train["16-bit"]))
    print("\n| step | train NLL torch | train NLL 16-bit |\n|---|---|---|")
    for s in common[:: max(1, len(common) // 8)]:
        print(f"| {s} | {train['torch'][s]['nll']:.4f} | {train['16-bit'][s]['nll']:.4f} |")


if __name__ == "__main__":
    sys.exit(main())
