"""The quickstart's recipe search: `aiayn quickstart` trials, each in a fresh folder with the same time budget, scored
on the held-out Gospel of John. One trial = one command; every trial's command and score go in RESULTS.md.

    python benchmarks/quickstart_search.py --list                       # the trials and their flags
    python benchmarks/quickstart_search.py --trials baseline,vocab4k    # run these, one after the other
    python benchmarks/quickstart_search.py --report                     # the table of what has run

Each trial runs `python -m aiayn quickstart --out WORK/NAME --no-progress FLAGS` (WORK default runs/qs-search) as
a user would, on whatever cores are free (the quickstart's own thread choice), then reads the run's log for the
steps and the last dev perplexity and scores WORK/NAME/run/test.hyp with sacreBLEU and chrF. Results are JSON lines
in WORK/results.jsonl with the CPU model and the cores that were free when the trial started (machines differ from
session to session: compare trials of one machine). A trial with a result is not run again (--force reruns it).
Trials want an idle machine: anything else running steals steps from them.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiayn.metrics import chrf, corpus_bleu  # noqa: E402
from aiayn.runtime import free_cores  # noqa: E402

# name -> quickstart flags. The baseline is the quickstart's defaults (small, 8k pieces, 2k-token batches,
# warm-up 400, lr factor 0.65, P_drop 0.1, last 5 checkpoints averaged, beam 4, alpha 0.6).
TRIALS: dict[str, list[str]] = {
    "baseline": [],
    "vocab4k": ["--vocab-size", "4000"],
    "vocab4k-lr1": ["--vocab-size", "4000", "--lr-factor", "1.0"],
    "vocab4k-lr1-drop0": ["--vocab-size", "4000", "--lr-factor", "1.0", "--set", "dropout=0.0"],
    "vocab4k-prenorm-lr1.5": ["--vocab-size", "4000", "--lr-factor", "1.5", "--set", "norm_first=true"],
    "vocab4k-4k-batch": ["--vocab-size", "4000", "--max-tokens", "4096", "--lr-factor", "1.0"],
    "vocab4k-d384": ["--vocab-size", "4000", "--set", "d_model=384", "--set", "d_ff=1536", "--set", "n_heads=6"],
    "vocab4k-enc4-dec2": ["--vocab-size", "4000", "--set", "n_enc_layers=4", "--set", "n_dec_layers=2"],
}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_trial(name: str, flags: list[str], work: Path, minutes: float) -> dict:
    out = work / name
    cmd = [sys.executable, "-m", "aiayn", "quickstart", "--out", str(out), "--no-progress",
           "--minutes", f"{minutes:g}", *flags]
    free = free_cores()
    print(f"== {name}: {shlex.join(cmd[1:])} (free cores: {free})", flush=True)
    t0 = time.time()
    with open(work / f"{name}.log", "w", encoding="utf-8") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO).returncode
    wall = time.time() - t0
    if rc != 0:
        raise SystemExit(f"trial {name} failed (exit {rc}); see {work / f'{name}.log'}")
    records = [json.loads(x) for x in (out / "run" / "log.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    hyps = (out / "run" / "test.hyp").read_text(encoding="utf-8").splitlines()
    refs = (out / "data" / "test.tgt.txt").read_text(encoding="utf-8").splitlines()
    return {"trial": name, "flags": flags, "command": "aiayn quickstart " + shlex.join(flags),
            "minutes": minutes, "steps": train[-1]["step"] if train else 0,
            "dev_ppl": valid[-1]["ppl"] if valid else None, "bleu": corpus_bleu(hyps, refs).score,
            "chrf": chrf(hyps, refs).score, "wall_min": wall / 60, "cpu": cpu_model(), "free_cores": free,
            "date": time.strftime("%Y-%m-%d %H:%M")}


def read_results(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def report(rows: list[dict]) -> None:
    print("| trial | command | steps | dev ppl | test BLEU | chrF | wall min | CPU, free cores |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ppl = f"{r['dev_ppl']:.1f}" if r["dev_ppl"] else ""
        print(f"| {r['trial']} | `{r['command']}` | {r['steps']:,} | {ppl} | {r['bleu']:.1f} | {r['chrf']:.1f} | "
              f"{r['wall_min']:.1f} | {r['cpu']}, {r['free_cores']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", default="baseline", help="comma-separated names (see --list)")
    ap.add_argument("--minutes", type=float, default=12.0, help="training budget of every trial (default 12)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "qs-search")
    ap.add_argument("--force", action="store_true", help="rerun trials that have a result")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    if args.list:
        for name, flags in TRIALS.items():
            print(f"{name:24s} aiayn quickstart {shlex.join(flags)}")
        return
    args.work.mkdir(parents=True, exist_ok=True)
    results = args.work / "results.jsonl"
    if not args.report:
        names = [n for n in args.trials.split(",") if n]
        unknown = [n for n in names if n not in TRIALS]
        if unknown:
            raise SystemExit(f"unknown trial(s) {unknown}; --list shows them")
        for name in names:
            done = {r["trial"] for r in read_results(results) if r["minutes"] == args.minutes}
            if name in done and not args.force:
                print(f"== {name}: done already (--force reruns it)")
                continue
            row = run_trial(name, TRIALS[name], args.work, args.minutes)
            with open(results, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(f"   {row['steps']:,} steps, test BLEU {row['bleu']:.1f}, chrF {row['chrf']:.1f}", flush=True)
    report(read_results(results))


if __name__ == "__main__":
    main()
