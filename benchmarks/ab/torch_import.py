"""A/B, whole process: `aiayn translate` importing torch without its meta-device and CUDA registrations (the default,
aiayn.torch_import) against the same command importing torch whole, interleaved, CPU seconds (user + system) of each
process, on one line and on a file; `python -c "import torch"` beside them. Both sides start through the same
`python -c` wrapper, which empties torch_import.REGISTRATIONS for the second; every side's output is compared.

    python -m benchmarks.ab.torch_import --run runs/quickstart/run --src runs/quickstart/data/test.src.txt
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WRAPPER = ("import sys\nfrom aiayn import torch_import\nif sys.argv[1] == 'whole': torch_import.REGISTRATIONS = ()\n"
           "from aiayn.cli import main\nsys.argv = ['aiayn', *sys.argv[2:]]\nsys.exit(main())")


def cpu_seconds(cmd: list[str]) -> float:
    """The CPU seconds (user + system) of `cmd` as a process of its own."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr.read().decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--src", required=True, help="the file; its first line is the one-line case")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--file-rounds", type=int, default=3, help="rounds on the whole file (0: one line alone)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    one = tmp / "one.txt"
    one.write_text(Path(args.src).read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    flags = ["--beam-patience", "1", "--no-split-sentences", "--lp", "power", "--no-progress"]
    cases = [("one line, fp32", one, [], args.rounds), ("one line, int8", one, ["--precision", "int8"], args.rounds),
             (f"{Path(args.src).name}, fp32", Path(args.src), [], args.file_rounds),
             (f"{Path(args.src).name}, int8", Path(args.src), ["--precision", "int8"], args.file_rounds)]
    print(f"# {' '.join(sys.argv)}\n# CPU seconds of each process (user + system), sides interleaved")
    bare = [cpu_seconds([sys.executable, "-c", "import torch"]) for _ in range(args.rounds)]
    print(f'python -c "import torch": min {min(bare):.3f}  median {statistics.median(bare):.3f}')
    for name, src, extra, rounds in [case for case in cases if case[3] > 0]:  # --file-rounds 0: one line alone
        seconds: dict[str, list[float]] = {"deferred": [], "whole": []}
        for _ in range(rounds):
            for side in seconds:
                out = tmp / f"{side}.txt"
                seconds[side].append(cpu_seconds([sys.executable, "-c", WRAPPER, side, "translate", "--checkpoint",
                                                  args.run, "--input", str(src), "--output", str(out), *flags,
                                                  *extra]))
        same = (tmp / "deferred.txt").read_bytes() == (tmp / "whole.txt").read_bytes()
        lines = len((tmp / "deferred.txt").read_text(encoding="utf-8").splitlines())
        print(f"{name} ({rounds} rounds, {lines} lines, outputs {'the same' if same else 'DIFFERENT'}):")
        for side, s in seconds.items():
            every = " ".join(f"{x:.2f}" for x in s)
            print(f"  {side:8s} min {min(s):.3f}  median {statistics.median(s):.3f}  all {every}")
        d, w = seconds["deferred"], seconds["whole"]
        print(f"  deferred - whole: {min(d) - min(w):+.3f} s by the minimum, "
              f"{statistics.median(d) - statistics.median(w):+.3f} s by the median")


if __name__ == "__main__":
    main()
