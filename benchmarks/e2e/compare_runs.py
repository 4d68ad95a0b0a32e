"""Compare the training curves of runs (e.g. bf16 vs fp32 on the same data, seed and batches).

    python -m benchmarks.e2e.compare_runs runs/m30k-fp32 runs/m30k-bf16 --out docs/img/bf16_vs_fp32.png

Prints a table of smoothed training loss (and dev NLL/PPL) at the same steps and plots all runs on one figure.
"""

import argparse
from pathlib import Path

from aiayn.rundir import RunDir


def read_log(run: Path) -> tuple[dict[int, dict], dict[int, dict]]:
    """({step: training record}, {step: dev record}) of a run's log.jsonl."""
    train, valid = {}, {}
    for r in RunDir(run).log:
        if r["kind"] in ("train", "valid"):
            (train if r["kind"] == "train" else valid)[r["step"]] = r
    return train, valid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    logs = {run: read_log(run) for run in args.runs}
    names = [run.name for run in args.runs]
    steps = sorted(set.intersection(*(set(t) for t, _ in logs.values())))
    print("| step | " + " | ".join(f"{n} loss" for n in names) + " | max rel. diff |")
    print("|---|" + "---|" * (len(names) + 1))
    every = max(1, len(steps) // 12)
    for s in steps[::every] + ([steps[-1]] if steps[-1] not in steps[::every] else []):
        vals = [logs[r][0][s]["loss"] for r in args.runs]
        rel = (max(vals) - min(vals)) / min(vals)
        print(f"| {s} | " + " | ".join(f"{v:.4f}" for v in vals) + f" | {rel:.2%} |")
    vsteps = sorted(set.intersection(*(set(v) for _, v in logs.values())))
    for s in vsteps:
        print(f"dev at step {s}: " + ", ".join(
            f"{n} nll {logs[r][1][s]['nll']:.4f} ppl {logs[r][1][s]['ppl']:.2f}" for n, r in zip(names, args.runs)))
    for n, r in zip(names, args.runs):
        tps = [x["tokens_per_s"] for x in logs[r][0].values()][1:]
        if tps:
            print(f"{n}: median {sorted(tps)[len(tps) // 2]:.0f} target tokens/s")
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for n, r in zip(names, args.runs):
            t = logs[r][0]
            ax.plot(sorted(t), [t[s]["loss"] for s in sorted(t)], label=f"{n} train")
            v = logs[r][1]
            if v:
                ax.plot(sorted(v), [v[s]["loss"] for s in sorted(v)], "o--", label=f"{n} dev")
        ax.set_xlabel("step")
        ax.set_ylabel("label-smoothed loss (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.out, dpi=100)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
