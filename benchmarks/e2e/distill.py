"""A distilled student beside its teacher (aiayn distill): BLEU and sentences/s on a held-out test split, through
aiayn's engine (fp32 and int8) and CTranslate2 int8, at one thread, beam 4 and greedy.

    python -m benchmarks.e2e.distill --teacher runs/qs/run --student runs/qs-student --data runs/qs/data \
        [--threads 1] [--out benchmarks/results/distill-xeon]

Both runs are exported once with `aiayn export --to ct2` (float32 weights; int8 is CTranslate2's compute type at
load, as benchmarks/e2e/realtext.py does; the student's shortlist is left out of the export, so both decode the whole
vocabulary). Every cell is a fresh process pinned to --threads (OMP_NUM_THREADS, CTranslate2's intra_threads) on the
whole test split, batch 64, alpha 0.6: aiayn with its own default stopping rule, CTranslate2 with its own (patience 1).
Sentences/s are in process (load and start-up excluded); BLEU is sacreBLEU's against DATA/test.tgt.txt. Raw cells go to
DIR/cells.jsonl, outputs to DIR/out/, the table to DIR/table.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def inprocess(args: argparse.Namespace) -> None:
    """One aiayn cell: load, translate the file, print the seconds as JSON (the `inprocess` subcommand)."""
    import torch

    from aiayn.decoding.search import SearchConfig
    from aiayn.decoding.translator import Translator

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    translator = Translator.load(args.run, SearchConfig(beam=args.beam, alpha=0.6), precision=args.precision)
    start = time.perf_counter()
    hyps = translator.translate(lines)
    seconds = time.perf_counter() - start
    Path(args.output).write_text("\n".join(hyps) + "\n", encoding="utf-8")
    print(json.dumps({"translate_s": seconds, "sentences": len(lines)}))


def _run(cmd: list[str], threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with tempfile.TemporaryFile("w+") as out:
        res = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.PIPE, text=True)
        out.seek(0)
        stdout = out.read()
    if res.returncode:
        raise SystemExit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-2000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def bleu(hyp: Path, ref: Path) -> float:
    from aiayn.metrics import corpus_bleu

    return corpus_bleu(hyp.read_text(encoding="utf-8").splitlines(), ref.read_text(encoding="utf-8").splitlines()).score


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return f"{model}, {os.cpu_count()} cores"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd")
    one = sub.add_parser("inprocess")
    for flag in ("--run", "--src", "--output", "--precision"):
        one.add_argument(flag, required=True)
    one.add_argument("--beam", type=int, default=4)
    p.add_argument("--teacher")
    p.add_argument("--student")
    p.add_argument("--data")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/distill")
    args = p.parse_args()
    if args.cmd == "inprocess":
        return inprocess(args)
    out = Path(args.out)
    (out / "out").mkdir(parents=True, exist_ok=True)
    src, ref = Path(args.data) / "test.src.txt", Path(args.data) / "test.tgt.txt"
    work = Path(tempfile.mkdtemp(prefix="distill-bench-"))
    folders = {}
    for name, run in (("teacher", args.teacher), ("student", args.student)):
        folders[name] = work / name
        subprocess.run(["aiayn", "export", "--checkpoint", run, "--to", "ct2", str(folders[name])], check=True,
                       capture_output=True)
        (folders[name] / "vmap.txt").unlink(missing_ok=True)
    cells = []
    for name, run in (("teacher", args.teacher), ("student", args.student)):
        for beam in (4, 1):
            for engine in ("aiayn fp32", "aiayn int8", "ct2 int8"):
                hyp = out / "out" / f"{name}.beam{beam}.{engine.replace(' ', '-')}.txt"
                if engine.startswith("aiayn"):
                    cmd = [sys.executable, "-m", "benchmarks.e2e.distill", "inprocess", "--run", run, "--src",
                           str(src), "--output", str(hyp), "--precision", engine.split()[1], "--beam", str(beam)]
                else:
                    cmd = [sys.executable, str(HERE / "ct2_direct.py"), str(folders[name]), str(src), str(hyp),
                           str(args.threads), "int8", str(beam), "0.6", "64", "1"]
                cell = _run(cmd, args.threads)
                cell = {"model": name, "beam": beam, "engine": engine, "threads": args.threads, **cell,
                        "sentences_per_s": cell["sentences"] / cell["translate_s"], "bleu": bleu(hyp, ref)}
                print(json.dumps(cell), flush=True)
                cells.append(cell)
    with open(out / "cells.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(c) + "\n" for c in cells)
    (out / "table.md").write_text(table(cells), encoding="utf-8")
    print(table(cells))


def table(cells: list[dict]) -> str:
    """One row per engine and beam: teacher and student BLEU and sentences/s, and the student's speed-up."""
    rows = [f"{machine()}; {cells[0]['threads']} thread(s); sentences/s in process", "",
            "| engine | beam | teacher BLEU | student BLEU | teacher sent/s | student sent/s | student / teacher |",
            "|---|---|---|---|---|---|---|"]
    by = {(c["model"], c["engine"], c["beam"]): c for c in cells}
    for engine in ("aiayn fp32", "aiayn int8", "ct2 int8"):
        for beam in (4, 1):
            t, s = by[("teacher", engine, beam)], by[("student", engine, beam)]
            rows.append(f"| {engine} | {beam} | {t['bleu']:.1f} | {s['bleu']:.1f} | {t['sentences_per_s']:.1f} | "
                        f"{s['sentences_per_s']:.1f} | {s['sentences_per_s'] / t['sentences_per_s']:.2f}x |")
    t4 = by[("teacher", "ct2 int8", 4)]
    rows.append("")
    rows.append("The student greedy against the teacher with beam 4 (CTranslate2 int8): "
                f"{by[('student', 'ct2 int8', 1)]['sentences_per_s'] / t4['sentences_per_s']:.2f}x the sentences/s, "
                f"BLEU {by[('student', 'ct2 int8', 1)]['bleu'] - t4['bleu']:+.1f}")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
