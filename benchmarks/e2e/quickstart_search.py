"""The quickstart's recipe search: `aiayn quickstart` trials, each in a fresh folder with the same time budget, scored
on the held-out Gospel of John. One trial = one command; every trial's command and score go in RESULTS.md.

    python -m benchmarks.e2e.quickstart_search --list                       # the trials and their flags
    python -m benchmarks.e2e.quickstart_search --trials baseline,vocab4k    # run these, one after the other
    python -m benchmarks.e2e.quickstart_search --report                     # the table of what has run
    python -m benchmarks.e2e.quickstart_search --trials a,b,c,d --jobs 2    # step-budgeted trials, one core each

Each trial runs `python -m aiayn quickstart --out WORK/NAME --no-progress FLAGS` (WORK default runs/qs-search) as
a user would, on whatever cores are free (the quickstart's own thread choice), then reads the run's log for the
steps and the last dev perplexity and scores WORK/NAME/run/test.hyp with sacreBLEU and chrF. Results are JSON lines
in WORK/results.jsonl with the CPU model and the cores that were free when the trial started (machines differ from
day to day: compare trials of one machine). A trial with a result is not run again (--force reruns it).
Time-budgeted trials want an idle machine: anything else running steals steps from them. Step-budgeted trials
(`--max-steps N` in their flags, N from benchmarks/e2e/step_cost.py: the steps that shape makes in the time budget
on the machine being stood in for) give the same model however busy the machine is, so they can run side by side:
--jobs N runs N at once, each pinned to a core of its own.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from aiayn.metrics import chrf, corpus_bleu
from aiayn.rundir import RunDir
from aiayn.runtime import free_cores
from benchmarks.timing import once, table

REPO = Path(__file__).resolve().parents[2]

# name -> quickstart flags, each trial written out in full against the defaults of the time it ran (until
# 2026-11-24 the quickstart averaged the last 5 checkpoints and had no annealing; both are now flags). The first
# recipe: `small`, 8k pieces, 2k-token batches, warm-up 400, lr factor 0.65, P_drop 0.1, beam 4, alpha 0.6.
# Since 2026-11-24 the quickstart also trains without dropout (MODEL_DEFAULTS); the trials before that say
# dropout=0.1 (the `small` preset's) unless they set it.
OLD = ["--average-last", "5", "--anneal", "0", "--set", "dropout=0.1"]
LAST = ["--average-last", "1", "--anneal", "0", "--set", "dropout=0.1"]  # the last checkpoint alone, paper's schedule
ANNEAL = ["--average-last", "1", "--anneal", "0.3"]  # the last checkpoint alone, the rate annealed to 0
P01 = ["--set", "dropout=0.1"]
SMALL = ["--set", "n_enc_layers=3", "--set", "n_dec_layers=3"]  # the `small` preset's depth (a later --set wins)
# 2026-11-25, step-budgeted trials "avx2-NAME": each shape gets the steps it makes in 8.4 minutes under the AVX2
# reproduction (= 12 minutes of a 2-core AMD Zen 3), from benchmarks/e2e/step_cost.py and fp32-vocab4k's 820 steps.
AVX2_STEPS: dict[str, tuple[int, list[str]]] = {
    "v4k": (820, ["--vocab-size", "4000"]),
    "v4k-d192": (1320, ["--vocab-size", "4000", "--set", "d_model=192", "--set", "d_ff=768", "--set", "d_k=48",
                        "--set", "d_v=48"]),
    "v4k-2x2": (1160, ["--vocab-size", "4000", "--set", "n_enc_layers=2", "--set", "n_dec_layers=2"]),
    "v4k-ff512": (1050, ["--vocab-size", "4000", "--set", "d_ff=512"]),
    "v4k-tok1k": (1610, ["--vocab-size", "4000", "--max-tokens", "1024"]),
    "v4k-ff512-tok1k": (2060, ["--vocab-size", "4000", "--set", "d_ff=512", "--max-tokens", "1024"]),
    "v4k-2x2-d192": (1780, ["--vocab-size", "4000", "--set", "n_enc_layers=2", "--set", "n_dec_layers=2",
                            "--set", "d_model=192", "--set", "d_ff=768", "--set", "d_k=48", "--set", "d_v=48"]),
    "v4k-2x2-tok1k": (2220, ["--vocab-size", "4000", "--set", "n_enc_layers=2", "--set", "n_dec_layers=2",
                             "--max-tokens", "1024"]),
    "v4k-2x2-d128": (3030, ["--vocab-size", "4000", "--set", "n_enc_layers=2", "--set", "n_dec_layers=2",
                            "--set", "d_model=128", "--set", "d_ff=512", "--set", "d_k=32", "--set", "d_v=32"]),
    "v4k-2x2-d192-tok1k": (3500, ["--vocab-size", "4000", "--set", "n_enc_layers=2", "--set", "n_dec_layers=2",
                                  "--set", "d_model=192", "--set", "d_ff=768", "--set", "d_k=48", "--set", "d_v=48",
                                  "--max-tokens", "1024"]),
}
TRIALS: dict[str, list[str]] = {
    "baseline": [*OLD],
    "vocab4k": ["--vocab-size", "4000", *OLD],
    "vocab4k-lr1": ["--vocab-size", "4000", "--lr-factor", "1.0", *OLD],
    "vocab4k-lr1-drop0": ["--vocab-size", "4000", "--lr-factor", "1.0", *OLD, "--set", "dropout=0.0"],
    "vocab4k-prenorm-lr1.5": ["--vocab-size", "4000", "--lr-factor", "1.5", "--set", "norm_first=true", *OLD],
    "vocab4k-4k-batch": ["--vocab-size", "4000", "--max-tokens", "4096", "--lr-factor", "1.0", *OLD],
    "vocab4k-d384": ["--vocab-size", "4000", "--set", "d_model=384", "--set", "d_ff=1536", "--set", "n_heads=6", *OLD],
    "vocab4k-enc4-dec2": ["--vocab-size", "4000", "--set", "n_enc_layers=4", "--set", "n_dec_layers=2", *OLD],
    # Averaging the last 5 checkpoints of a 12-minute run (saved every 1.5 minutes) mixes in weights from minute 4,
    # when the model was much worse (the baseline's dev perplexity falls from 72 to 50 over those checkpoints).
    # Defined once, its results lost; not rerun since (the quickstart lab note has what ran).
    "avg1": [*LAST],
    "avg2": ["--average-last", "2", "--anneal", "0", *P01],
    "vocab4k-avg1": ["--vocab-size", "4000", *LAST],
    "prenorm-lr1.5-avg1": ["--lr-factor", "1.5", "--set", "norm_first=true", *LAST],
    "lr1-drop0-avg1": ["--lr-factor", "1.0", *LAST, "--set", "dropout=0.0"],
    "prenorm-lr2-drop0-avg1": ["--lr-factor", "2.0", "--set", "norm_first=true", *LAST, "--set", "dropout=0.0"],
    "vocab16k-avg1": ["--vocab-size", "16000", *LAST],
    "tok1k-avg1": ["--max-tokens", "1024", *LAST],
    "lr0.4-avg1": ["--lr-factor", "0.4", *LAST],
    # The inverse-square-root decay leaves half the peak rate at the end of a 12-minute run: anneal it to 0.
    "anneal0.3-avg1": ["--anneal", "0.3", "--average-last", "1", *P01],  # the defaults of the morning of 2026-11-24
    "lr0.4-anneal0.3-avg1": ["--lr-factor", "0.4", "--anneal", "0.3", "--average-last", "1", *P01],
    "lr1-anneal0.3-avg1": ["--lr-factor", "1.0", "--anneal", "0.3", "--average-last", "1", *P01],
    "anneal0.5-avg1": ["--anneal", "0.5", "--average-last", "1", *P01],
    "lr0.25-anneal0.3-avg1": ["--lr-factor", "0.25", "--anneal", "0.3", "--average-last", "1", *P01],
    # 2026-11-24 (a machine that made ~1,400 steps in 12 minutes): anneal0.3-avg1 is the base from here on.
    "drop0": ["--set", "dropout=0.0", *ANNEAL],
    "prenorm-lr1.5-drop0": ["--set", "norm_first=true", "--lr-factor", "1.5", "--set", "dropout=0.0", *ANNEAL],
    "drop0-4k-batch-lr1": ["--set", "dropout=0.0", "--max-tokens", "4096", "--lr-factor", "1.0", *ANNEAL],
    "drop0-vocab4k": ["--set", "dropout=0.0", "--vocab-size", "4000", *ANNEAL],
    "drop0-lr1": ["--set", "dropout=0.0", "--lr-factor", "1.0", *ANNEAL],
    "drop0-lr0.45": ["--set", "dropout=0.0", "--lr-factor", "0.45", *ANNEAL],
    "drop0-lr0.3": ["--set", "dropout=0.0", "--lr-factor", "0.3", *ANNEAL],
    "drop0-ls0": ["--set", "dropout=0.0", "--set", "label_smoothing=0.0", *ANNEAL],
    "drop0-warmup200": ["--set", "dropout=0.0", "--warmup", "200", "--lr-factor", "0.46", *ANNEAL],
    # 2026-11-25: fp32, for CPUs where bf16 does not pay (AVX2-only, or reproduced with AVX2_ENV on an AVX-512 one).
    # Written out against the bf16 recipe's shape and vocabulary (the fp32 recipe's defaults differ since).
    "fp32": ["--dtype", "fp32", "--vocab-size", "8000", *SMALL],
    "fp32-vocab4k": ["--dtype", "fp32", "--vocab-size", "4000", *SMALL],
    "fp32-vocab4k-lr0.7": ["--dtype", "fp32", "--vocab-size", "4000", "--lr-factor", "0.7", *SMALL],
    **{f"avx2-{name}": ["--dtype", "fp32", "--max-steps", str(steps), *SMALL, *flags]
       for name, (steps, flags) in AVX2_STEPS.items()},
}

# What makes an AVX-512 machine run as an AVX2-only one (every kernel library capped at AVX2): set them in the
# environment of a trial to stand in for the common CPU; a result records the ones that were set.
AVX2_ENV = ("MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "FBGEMM_ENABLE_INSTRUCTIONS",
            "CT2_FORCE_CPU_ISA")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_trial(name: str, flags: list[str], work: Path, minutes: float, core: int | None = None) -> dict:
    """One quickstart trial (pinned to `core` if given), scored on dev and test."""
    out = work / name
    cmd = [sys.executable, "-m", "aiayn", "quickstart", "--out", str(out), "--no-progress",
           "--minutes", f"{minutes:g}", *flags]
    free = free_cores() if core is None else 1
    print(f"== {name}: {shlex.join(cmd[1:])} ({f'free cores: {free}' if core is None else f'core {core}'})",
          flush=True)
    with open(work / f"{name}.log", "w", encoding="utf-8") as log:
        (rc, peak_mb), wall = once(lambda: _run(cmd, log, core))
        if rc != 0:
            raise SystemExit(f"trial {name} failed (exit {rc}); see {work / f'{name}.log'}")
        data, run = out / "data", out / "run"
        if not (run / "valid.hyp").is_file():  # the dev set, scored for choosing (the quickstart scores test only)
            beam = flags[flags.index("--beam") + 1] if "--beam" in flags else "4"
            dev = [sys.executable, "-m", "aiayn", "translate", "--checkpoint", str(run), "--no-progress", "--beam",
                   beam, "--input", str(data / "valid.src.txt"), "--output", str(run / "valid.hyp"),
                   "--no-split-sentences"]  # whole verses, as the quickstart translates its test set
            if _run(dev, log, core)[0] != 0:
                raise SystemExit(f"translating the dev set of {name} failed; see {work / f'{name}.log'}")
    records = RunDir(run).log
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    test = _scores(run / "test.hyp", data / "test.tgt.txt")
    dev = _scores(run / "valid.hyp", data / "valid.tgt.txt")
    return {"trial": name, "flags": flags, "command": "aiayn quickstart " + shlex.join(flags),
            "minutes": minutes, "steps": train[-1]["step"] if train else 0,
            "dev_ppl": valid[-1]["ppl"] if valid else None, "bleu": test[0], "chrf": test[1], "dev_bleu": dev[0],
            "dev_chrf": dev[1], "wall_min": wall / 60, "cpu": cpu_model(), "free_cores": free, "core": core,
            "date": time.strftime("%Y-%m-%d %H:%M"), "isa_env": {k: os.environ[k] for k in AVX2_ENV if k in os.environ},
            "peak_rss_mb": peak_mb}


def _scores(hyp: Path, ref: Path) -> tuple[float, float]:
    hyps = hyp.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    return corpus_bleu(hyps, refs).score, chrf(hyps, refs).score


def _run(cmd: list[str], log, core: int | None = None) -> tuple[int, float]:
    """Run a trial; (exit code, its peak resident memory in MB, from the kernel's accounting of that child)."""
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, preexec_fn=pin)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024


def read_results(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def report(rows: list[dict]) -> None:
    def num(value, fmt: str = ".1f") -> str:
        return "" if value is None else format(value, fmt)

    print(table(["trial", "command", "steps", "dev ppl", "dev BLEU", "test BLEU", "chrF", "peak MB", "wall min",
                 "CPU, free cores"],
                [[r["trial"], f"`{r['command']}`", f"{r['steps']:,}", num(r["dev_ppl"]), num(r.get("dev_bleu")),
                  num(r["bleu"]), num(r["chrf"]), num(r.get("peak_rss_mb"), ",.0f"), num(r["wall_min"]),
                  f"{r['cpu']}, " + (f"core {r['core']}" if r.get("core") is not None else f"{r['free_cores']}")]
                 for r in rows]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", default="baseline", help="comma-separated names (see --list)")
    ap.add_argument("--minutes", type=float, default=12.0, help="training budget of every trial (default 12)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "qs-search")
    ap.add_argument("--force", action="store_true", help="rerun trials that have a result")
    ap.add_argument("--jobs", type=int, default=1,
                    help="trials at once, each pinned to a core of its own (for step-budgeted trials; default 1: "
                    "one at a time on whatever cores are free)")
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
        done = {r["trial"] for r in read_results(results)
                if r["minutes"] == args.minutes or "--max-steps" in r["flags"]}
        todo = [n for n in names if args.force or n not in done]
        for name in sorted(set(names) - set(todo)):
            print(f"== {name}: done already (--force reruns it)")
        cores = list(range(args.jobs)) if args.jobs > 1 else [None]
        with concurrent.futures.ThreadPoolExecutor(len(cores)) as pool:
            free = list(cores)

            def one(name: str) -> None:
                core = free.pop()
                try:
                    row = run_trial(name, TRIALS[name], args.work, args.minutes, core)
                finally:
                    free.append(core)
                with open(results, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"   {name}: {row['steps']:,} steps, dev BLEU {row['dev_bleu']:.1f}, test BLEU "
                      f"{row['bleu']:.1f}, chrF {row['chrf']:.1f}", flush=True)
            for future in [pool.submit(one, n) for n in todo]:
                future.result()
    report(read_results(results))


if __name__ == "__main__":
    main()
