"""A/B of the 16-bit LayerNorm (aiayn.fast.LayerNorm) against torch's nn.LayerNorm behaviour in real training: the
same `aiayn train` command run twice on the same machine, once with each, for a fixed number of minutes; prints the
steps each made and the training NLL at the same steps (the two must learn alike: the change is a speed lever).
aiayn.fast.LayerNorm is 16-bit under CPU autocast only; on a GPU both arms run torch's kernel unless the device check
in its forward is removed (how the GPU rows of docs/speed-peers.md were measured). On a GPU the first arm also pays the
loss's compilation.

    python -m benchmarks.ab.layer_norm --minutes 1 -- --config configs/multi30k.yaml --max-tokens 2048

The switch is `aiayn train --layer-norm` (TrainConfig.layer_norm: fp32 = torch's nn.LayerNorm behaviour, what
`aiayn.fast.set_layer_norm_output(model, autocast=False)` sets on a model's modules).
"""

import argparse
import json
import tempfile
from pathlib import Path

from aiayn.cli import main as aiayn_main
from benchmarks.timing import table

ARMS = {"torch": "fp32", "16-bit": "16-bit"}  # --layer-norm of each arm


def run(kind: str, minutes: float, log_every: int, args: list[str]) -> list[dict]:
    out = Path(tempfile.mkdtemp()) / kind
    aiayn_main(["train", *args, "--out", str(out), "--max-minutes", str(minutes), "--no-progress",
                "--log-every", str(log_every), "--layer-norm", ARMS[kind]])
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("train_args", nargs=argparse.REMAINDER, help="after --: arguments of aiayn train")
    a = ap.parse_args()
    train_args = [x for x in a.train_args if x != "--"]
    logs = {kind: run(kind, a.minutes, a.log_every, train_args) for kind in ARMS}
    train = {k: {r["step"]: r for r in v if r["kind"] == "train"} for k, v in logs.items()}
    rows = []
    for k, v in train.items():
        rates = [r["tokens_per_s"] for _, r in sorted(v.items())[1:]] or [r["tokens_per_s"] for r in v.values()]
        rows.append([k, f"{max(r['step'] for r in logs[k]):,}", f"{sum(rates) / len(rates):,.0f}"])
    print(table(["LayerNorm", f"steps in {a.minutes:g} min", "tokens/s (mean of the logged windows after the first)"],
                rows))
    common = sorted(set(train["torch"]) & set(train["16-bit"]))
    print()
    print(table(["step", "train NLL torch", "train NLL 16-bit"],
                [[s, f"{train['torch'][s]['nll']:.4f}", f"{train['16-bit'][s]['nll']:.4f}"]
                 for s in common[:: max(1, len(common) // 8)]]))


if __name__ == "__main__":
    main()
