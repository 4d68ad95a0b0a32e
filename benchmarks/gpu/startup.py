"""Each system's start-up in a time-to-BLEU work folder (benchmarks/peers/time_to_bleu.py): the seconds from its
training process's start to its step 0, extrapolated back from its checkpoints' times at the steady rate between its
first and last checkpoint, beside the time and step of its first checkpoint. Start-up counts against every budget
(a checkpoint's time is its file's time since the process started), so it is stated beside the BLEU table.

    python -m benchmarks.gpu.startup WORK [--out startup.jsonl]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

from benchmarks.peers.time_to_bleu import SYSTEMS, checkpoints


def startup_seconds(points: list[tuple[float, int]]) -> float | None:
    """Seconds before step 0 given (seconds since the process started, step) of each checkpoint: the first
    checkpoint's time less its steps at the rate between the first and the last. None with fewer than two steps."""
    points = sorted(points, key=lambda p: p[1])
    if len(points) < 2 or points[-1][1] == points[0][1]:
        return None
    (t0, s0), (t1, s1) = points[0], points[-1]
    return t0 - s0 * (t1 - t0) / (s1 - s0)


def report(work: Path) -> list[dict]:
    """One record per system trained in `work`."""
    rows = []
    for system in SYSTEMS:
        if not (work / f"{system}.trained.json").exists():
            continue
        points = [(60 * minutes, step) for minutes, step, _ in checkpoints(SimpleNamespace(work=work), system)]
        row = {"system": system, "checkpoints": len(points), "startup_s": startup_seconds(points)}
        if points:
            row |= {"first_checkpoint_s": points[0][0], "first_checkpoint_step": points[0][1]}
        if len(points) > 1 and points[-1][0] > points[0][0]:
            row["steps_per_s"] = (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path, help="time_to_bleu.py's --work folder")
    ap.add_argument("--out", type=Path, help="write the records here (JSON lines)")
    args = ap.parse_args()
    rows = report(args.work)
    print("| system | start-up, s (to step 0, extrapolated) | first checkpoint | steps/s after it |\n|---|---|---|---|")
    for r in rows:
        up = f"{r['startup_s']:.1f}" if r["startup_s"] is not None else "(one checkpoint)"
        first = f"step {r['first_checkpoint_step']:,} at {r['first_checkpoint_s']:.1f} s" if r["checkpoints"] else ""
        rate = f"{r['steps_per_s']:.1f}" if "steps_per_s" in r else ""
        print(f"| {r['system']} | {up} | {first} | {rate} |")
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
