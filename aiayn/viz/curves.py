"""Training curves of a run directory (`aiayn plot`): training and dev loss against step, and the learning rate."""

from __future__ import annotations

from pathlib import Path

from aiayn.files import atomic_write
from aiayn.rundir import RunDir


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Training and dev loss against step (and learning rate) from RUN/log.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = RunDir(run_dir).log
    tr = [r for r in records if r["kind"] == "train"]
    va = [r for r in records if r["kind"] == "valid"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([r["step"] for r in tr], [r["loss"] for r in tr], label="train loss (smoothed)")
    ax1.plot([r["step"] for r in tr], [r["nll"] for r in tr], label="train NLL", alpha=0.7)
    if va:
        ax1.plot([r["step"] for r in va], [r["nll"] for r in va], "o-", label="dev NLL")
    ax1.set_xlabel("step")
    ax1.set_ylabel("nats / token")
    ax1.legend()
    ax1.grid(alpha=0.3)
    ax2.plot([r["step"] for r in tr], [r["lr"] for r in tr])
    ax2.set_xlabel("step")
    ax2.set_ylabel("learning rate")
    ax2.grid(alpha=0.3)
    fig.suptitle(str(run_dir))
    fig.tight_layout()
    out = Path(out) if out else Path(run_dir) / "curves.png"
    atomic_write(out, lambda p: fig.savefig(p, format="png", dpi=100))
    plt.close(fig)
    return out
