"""A distilled student beside its teacher (`aiayn distill`), on the user's path: BLEU on the test split (never trained
on), sentences/s whole process and in process, one-line start-up and peak memory, through aiayn's own engine,
`aiayn translate --engine ct2` and CTranslate2 called directly, beam 4 and greedy, at --threads threads.

    taskset -c 0 python -m benchmarks.e2e.distill --teacher runs/qs/run --student runs/qs-student \
        --data runs/qs/data [--threads 1] [--beams 4 1] [--precisions fp32 int8] [--rounds 1] [--out DIR]

Both runs are exported once with `aiayn export --to ct2` (float32 weights, and the student's shortlist as vmap.txt;
int8 is CTranslate2's compute type at load). Every cell is a fresh process with --threads threads (OMP_NUM_THREADS,
CTranslate2's intra_threads) on the whole test split, batches of 64 (aiayn's engine greedy: its default, 128),
|Y|^0.6 (`--lp power`: the penalty CTranslate2 has), the same stopping rule on both engines (CTranslate2's default
patience 1; aiayn's `--beam-patience 1`), whole lines (`--no-split-sentences`):

    aiayn P              `aiayn translate --precision P` as a user runs it: whole-process wall and CPU seconds, peak RSS
    aiayn P (in)         the same decoding in process (this file's `inprocess`): open_engine, then translate_nbest
                         timed alone
    ct2 int8             CTranslate2 called directly (benchmarks/e2e/ct2_direct.py, no torch): whole process and in
                         process (translate_batch timed alone)
    ct2 int8 inter_threads   at two threads or more, the same with inter_threads = the threads (its batches side by
                         side, one thread each: its throughput setting, as aiayn's default --parallel-batches)
    aiayn --engine ct2   `aiayn translate --engine ct2 --precision int8` on the exported folder: whole process
    ... --shortlist      (a run with a shortlist: the student) aiayn int8 and `--engine ct2` with `--shortlist`
    ..., one line        each whole-process command on the test split's first line alone: start-up

Cells run round-robin, --rounds times; the table gives medians. On a machine shared with other work wall time waits
for the cores and CPU time (user + system, the process's own) does not: run the benchmark pinned to one core
(taskset) and read the ratios of CPU seconds. BLEU is sacreBLEU's against DATA/test.tgt.txt. Raw cells go to
DIR/cells.jsonl (resumable: a cell recorded for its round is not run again), outputs to DIR/out/, tables to
DIR/table.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.e2e.realtext import _run, bleu, machine

HERE = Path(__file__).resolve().parent
MODELS = ("teacher", "student")


def inprocess(args: argparse.Namespace) -> None:
    """One in-process aiayn cell: open the engine, translate the file, print the seconds as JSON."""
    import torch

    from aiayn.config import PAPER_SEARCH
    from aiayn.decoding.engine import EngineOptions, open_engine
    from aiayn.runtime import configure_process

    configure_process(kernel_cache=True, keep_freed_memory=True)  # what `aiayn`'s main sets for every command
    start = time.perf_counter()
    # no scores asked, as `aiayn translate` without --print-scores (and CTranslate2 without return_scores)
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=1.0, scores=False)
    engine = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision=args.precision,
                                                 device="cpu"))  # aiayn's default batches, as `aiayn translate`
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    loaded, cpu = time.perf_counter(), time.process_time()
    texts = [hyps[0].text for hyps in engine.translate_nbest(lines)]
    done, cpu = time.perf_counter(), time.process_time() - cpu
    Path(args.output).write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    print(json.dumps({"load_s": loaded - start, "translate_s": done - loaded, "translate_cpu_s": cpu,
                      "sentences": len(lines), "threads": torch.get_num_threads()}))


def whole(system: str, run: str, ct2: Path, src: str, out: Path, beam: int, threads: int) -> list[str]:
    """The whole-process command of `system` ("aiayn fp32", "aiayn int8", "aiayn int8 --shortlist", "ct2 int8",
    "aiayn --engine ct2", "aiayn --engine ct2 --shortlist") on `src`, writing `out`."""
    search = ["--beam", str(beam), "--lp", "power", "--beam-patience", "1", "--no-split-sentences", "--no-progress"]
    shortlist = ["--shortlist"] if system.endswith("--shortlist") else []
    if system.startswith("ct2 int8"):
        inter = [str(threads)] if system.endswith("inter_threads") else []
        return [sys.executable, str(HERE / "ct2_direct.py"), str(ct2), src, str(out), str(threads), "int8",
                str(beam), "0.6", "64", "1", *inter]
    if system.startswith("aiayn --engine ct2"):
        return ["aiayn", "translate", "--engine", "ct2", "--checkpoint", str(ct2), "--input", src, "--output",
                str(out), "--precision", "int8", *search, *shortlist]
    precision = system.split()[1]
    return ["aiayn", "translate", "--checkpoint", run, "--input", src, "--output", str(out), "--precision", precision,
            *search, *shortlist]


def slug(text: str) -> str:
    return text.replace(" --", "-").replace(" ", "-").replace("(", "").replace(")", "").replace(",", "")


def cells(args: argparse.Namespace, out: Path, exported: dict[str, Path]) -> list[tuple[dict, list[str]]]:
    """Every cell of one round: its key (model, beam, system) and its command."""
    runs = {"teacher": args.teacher, "student": args.student}
    src = str(Path(args.data) / "test.src.txt")
    one_line = out / "one-line.txt"
    one_line.write_text(Path(src).read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    todo = []
    for model in MODELS:
        run, ct2 = runs[model], exported[model]
        systems = [f"aiayn {p}" for p in args.precisions] + ["ct2 int8", "aiayn --engine ct2"]
        systems += ["ct2 int8 inter_threads"] * (args.threads > 1)
        if (Path(run) / "shortlist.safetensors").is_file():
            systems += ["aiayn int8 --shortlist", "aiayn --engine ct2 --shortlist"]
        for beam in args.beams:
            for system in systems:
                hyp = out / "out" / f"{model}.beam{beam}.{slug(system)}.txt"
                todo.append(({"model": model, "beam": beam, "system": system},
                             whole(system, run, ct2, src, hyp, beam, args.threads)))
                if system.startswith("aiayn") and "--" not in system:  # the same decoding in process
                    hyp = out / "out" / f"{model}.beam{beam}.{slug(system)}-in.txt"
                    todo.append(({"model": model, "beam": beam, "system": f"{system} (in)"},
                                 [sys.executable, "-m", "benchmarks.e2e.distill", "inprocess", "--run", run, "--src",
                                  src, "--output", str(hyp), "--precision", system.split()[1], "--beam", str(beam)]))
        for system in systems:  # start-up: the file's first line alone, at the first beam
            todo.append(({"model": model, "beam": args.beams[0], "system": f"{system}, one line"},
                         whole(system, run, ct2, str(one_line), out / "out" / "one-line-out.txt", args.beams[0],
                               args.threads)))
    return todo


def export(args: argparse.Namespace, out: Path) -> dict[str, Path]:
    folders = {}
    for model, run in (("teacher", args.teacher), ("student", args.student)):
        folders[model] = out / f"ct2-{model}"
        if not (folders[model] / "model.bin").is_file():
            subprocess.run(["aiayn", "export", "--checkpoint", run, "--to", "ct2", str(folders[model])], check=True,
                           stdout=subprocess.DEVNULL)
    return folders


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd")
    one = sub.add_parser("inprocess", help="one in-process aiayn cell (used by the benchmark itself)")
    for flag in ("--run", "--src", "--output", "--precision"):
        one.add_argument(flag, required=True)
    one.add_argument("--beam", type=int, default=4)
    p.add_argument("--teacher", help="the teacher's run")
    p.add_argument("--student", help="the student's run (aiayn distill's --out)")
    p.add_argument("--data", help="prepared data whose test split both translate (test.src.txt, test.tgt.txt)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--beams", type=int, nargs="+", default=[4, 1])
    p.add_argument("--precisions", nargs="+", default=["fp32", "int8"], help="aiayn's own engine's precisions")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/distill")
    args = p.parse_args()
    if args.cmd == "inprocess":
        return inprocess(args)
    if not (args.teacher and args.student and args.data):
        p.error("--teacher, --student and --data are required")
    out = Path(args.out)
    (out / "out").mkdir(parents=True, exist_ok=True)
    todo = cells(args, out, export(args, out))
    raw = out / "cells.jsonl"
    done = {(c["round"], c["model"], c["beam"], c["system"]) for c in
            (json.loads(line) for line in (raw.read_text().splitlines() if raw.is_file() else []))}
    with raw.open("a") as log:
        for r in range(args.rounds):
            for key, cmd in todo:
                if (r, key["model"], key["beam"], key["system"]) in done:
                    continue
                result = {"round": r, **key, "threads": args.threads, **_run(cmd, args.threads)}
                log.write(json.dumps(result) + "\n")
                log.flush()
                print(f"round {r} {key['model']} beam {key['beam']} {key['system']}: {result['wall_s']:.2f} s wall, "
                      f"{result['cpu_s']:.2f} s CPU", file=sys.stderr, flush=True)
    text = report(raw, out, Path(args.data) / "test.tgt.txt", args.rounds,
                  " ".join(["python -m benchmarks.e2e.distill", *sys.argv[1:]]))
    (out / "table.md").write_text(text, encoding="utf-8")
    print(text)


def report(raw: Path, out: Path, ref: Path, rounds: int, command: str) -> str:
    """The user-path table (one row per model, beam and system) and the student / teacher ratios."""
    rows = [r for r in map(json.loads, raw.read_text().splitlines()) if r["round"] < rounds]

    def med(model, beam, system, key):
        values = [r[key] for r in rows if (r["model"], r["beam"], r["system"]) == (model, beam, system) and key in r]
        return statistics.median(values) if values else float("nan")

    def fmt(x, spec=".2f"):
        return format(x, spec) if x == x else "-"

    keys = list(dict.fromkeys((r["model"], r["beam"], r["system"]) for r in rows
                              if not r["system"].endswith((" (in)", ", one line"))))
    head = ["model", "beam", "system", "BLEU", "whole process: s / CPU s", "sent/s whole (CPU)",
            "in process: sent/s / CPU s", "sent/s in process (CPU)", "peak MB", "one line: s / CPU s"]
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    speed = {}  # (model, beam, system) -> (sentences per CPU second whole, in process)
    for model, beam, system in keys:
        n = len(ref.read_text(encoding="utf-8").splitlines())
        wall, cpu = med(model, beam, system, "wall_s"), med(model, beam, system, "cpu_s")
        inner = f"{system} (in)" if system.startswith("aiayn") and "--" not in system else system
        in_wall, in_cpu = med(model, beam, inner, "translate_s"), med(model, beam, inner, "translate_cpu_s")
        speed[(model, beam, system)] = (n / cpu, n / in_cpu)
        hyp = out / "out" / f"{model}.beam{beam}.{slug(system)}.txt"
        one = [med(model, beam, f"{system}, one line", k) for k in ("wall_s", "cpu_s")]
        table.append("| " + " | ".join([
            model, str(beam), system, fmt(bleu(hyp, ref)), f"{fmt(wall)} / {fmt(cpu)}", fmt(n / cpu, ".1f"),
            f"{fmt(n / in_wall, '.1f')} / {fmt(in_cpu)}", fmt(n / in_cpu, ".1f"),
            fmt(med(model, beam, system, "peak_mb"), ".0f"), f"{fmt(one[0])} / {fmt(one[1])}"]) + " |")
    text = (f"`{command}`\n\n{machine()}; {rows[0]['threads']} thread(s); medians of {rounds} round(s); sentences/s "
            "per CPU second (the process's own user + system time)\n\n" + "\n".join(table) + "\n")
    return text + "\n" + ratios(speed, out, ref) + "\n"


def ratios(speed: dict, out: Path, ref: Path) -> str:
    """Student / teacher: sentences per CPU second, whole process and in process, each student beam against the
    teacher's beam 4 on the same system; BLEU of each beside the teacher's."""
    head = ["system", "student beam", "student / teacher beam 4: whole process", "in process", "BLEU student / teacher"]
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, beam, system), (s_whole, s_in) in speed.items():
        if model != "student" or ("teacher", 4, system) not in speed:
            continue
        t_whole, t_in = speed[("teacher", 4, system)]
        b_s = bleu(out / "out" / f"student.beam{beam}.{slug(system)}.txt", ref)
        b_t = bleu(out / "out" / f"teacher.beam4.{slug(system)}.txt", ref)
        cells = [f"**{s / t:.2f}x**" if s / t == s / t else "-" for s, t in ((s_whole, t_whole), (s_in, t_in))]
        table.append(f"| {system} | {beam} | {cells[0]} | {cells[1]} | {b_s:.2f} / {b_t:.2f} ({b_s - b_t:+.2f}) |")
    return "Student / teacher (ratios of sentences per CPU second):\n\n" + "\n".join(table) + "\n"


if __name__ == "__main__":
    main()
