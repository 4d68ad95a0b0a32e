"""Real-text decoding on the user's path: `aiayn translate` beside CTranslate2 on the same exported model, in one run.

    python -m benchmarks.e2e.realtext --run runs/quickstart/run --src test.en --ref test.es \
        [--threads 1 2] [--precisions fp32 int8 bf16] [--rounds 3] [--engine-ct2] [--startup] [--out DIR]
    OMP_NUM_THREADS=1 python -m benchmarks.e2e.realtext inprocess --run RUN --src SRC --output OUT --precision bf16 \
        --profile        # one in-process cell, then its torch.profiler table

The model is exported once with `aiayn export --to ct2` (float32; int8 is CTranslate2's compute_type at load). Every
cell is a fresh process pinned to OMP_NUM_THREADS (and CTranslate2's intra_threads) = the thread count, on the whole
test file, beam 4, |Y|^0.6 (`--lp power`: the penalty CTranslate2 has), batch 64, and the same stopping rule:
CTranslate2's default patience 1, aiayn's `--beam-patience 1` (--beam-patience sets both):

    aiayn          `aiayn translate --precision P --lp power` as a user runs it: whole-process wall seconds and peak RSS
    aiayn (in)     the same decoding in process (benchmarks/e2e/realtext.py inprocess): the process settings `aiayn`
                   applies (runtime.configure_process: freed memory kept, kernel caches bounded), open_engine, then
                   translate_nbest timed alone: sentences/s
    ct2            CTranslate2 called directly (benchmarks/e2e/ct2_direct.py, torch never imported): one translate_batch
                   over the file, max_batch_size 64; whole process and in process
    ct2, inter     at two threads or more, CTranslate2 as its documentation advises for throughput: inter_threads =
                   the thread count (batches side by side, one thread each), as aiayn's default (`--parallel-batches`)
    aiayn --engine ct2   `aiayn translate --engine ct2` on the same folder: whole process
    ..., one line  (--startup) each whole-process command on the file's first line alone: what a user waits for
    aiayn (in), paper's rule   in process with aiayn's default stopping rule (`--beam-patience 0`: stop when no live
                   hypothesis can win), for what that rule costs and gains

Precisions: fp32 against CTranslate2's float32, int8 against its int8, and aiayn's bf16 (where the CPU multiplies bf16
natively) against CTranslate2's fastest type on this CPU (int8: it has no CPU bf16). Cells run round-robin, --rounds
times (a machine's drift hits every cell alike); the table gives medians, and the ratios CTranslate2's time / aiayn's
(> 1: aiayn is faster), whole process and in process. Each cell also records its CPU seconds (user + system, the
process's own work; in process, translate_nbest's or translate_batch's): on a machine shared with other work, wall
time waits for the cores and CPU time does not, so the table gives both ratios (at two threads CPU time also counts
what the threads spend spinning). BLEU is sacreBLEU's against --ref; "= fp32" counts aiayn's lines equal to aiayn
fp32's. The package's bytecode is compiled first (as an installed package holds it; a process that finds none compiles
every module it imports, more than 0.06 s of a one-line start). Raw cells go to DIR/cells.jsonl, outputs to DIR/out/,
the table to DIR/table.md.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CT2_TYPE = {"fp32": "float32", "int8": "int8", "bf16": "int8"}  # aiayn's precision -> CTranslate2's compute type


def _run(cmd: list[str], threads: int) -> dict:
    """Run `cmd` with `threads` threads; its wall and CPU (user + system) seconds, peak RSS (MB) and the JSON its
    stdout ends with, if any."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, so that its own rusage (peak RSS) is ours to read
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{stderr[-2000:]}")
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    info = json.loads(last) if last.startswith("{") else {}
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024, **info}


def bleu(hyp: Path, ref: Path) -> float:
    import sacrebleu

    hyps = hyp.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    return sacrebleu.corpus_bleu(hyps, [refs]).score


def inprocess(args: argparse.Namespace) -> None:
    """One in-process cell: load, translate the file, print the seconds as JSON (the `inprocess` subcommand)."""
    import dataclasses

    import torch

    from aiayn.decoding.engine import EngineOptions, open_engine
    from aiayn.decoding.search import PAPER_SEARCH
    from aiayn.runtime import configure_process

    if not args.bare_process:
        configure_process(kernel_cache=True, keep_freed_memory=True)  # what `aiayn`'s main sets for every command
    start = time.perf_counter()
    search = dataclasses.replace(PAPER_SEARCH, beam=args.beam, lp="power", beam_patience=args.beam_patience,
                                 scores=False)  # none asked, as `aiayn translate` without --print-scores
    translator = open_engine(args.run, EngineOptions(engine="aiayn", search=search, precision=args.precision,
                                                    device="cpu", batch_size=args.batch_size,
                                                    shortlist=args.shortlist or None,
                                                    parallel_batches=args.parallel_batches))
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    loaded, cpu = time.perf_counter(), time.process_time()
    texts = [hyps[0].text for hyps in translator.translate_nbest(lines)]
    done, cpu = time.perf_counter(), time.process_time() - cpu
    Path(args.output).write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    if args.profile:  # where the time goes: the same file again under torch.profiler, the top operators by self time
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            translator.translate_nbest(lines)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=44))
    print(json.dumps({"load_s": loaded - start, "translate_s": done - loaded, "translate_cpu_s": cpu,
                      "sentences": len(lines), "threads": torch.get_num_threads()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    one = sub.add_parser("inprocess", help="one in-process aiayn cell (used by the benchmark itself)")
    one.add_argument("--run", required=True)
    one.add_argument("--src", required=True)
    one.add_argument("--output", required=True)
    one.add_argument("--precision", default="fp32")
    one.add_argument("--batch-size", type=int, default=None, help="default: aiayn's (64; 128 for greedy search)")
    one.add_argument("--beam-patience", type=float, default=1.0)
    one.add_argument("--beam", type=int, default=4, help="beam size (1: greedy)")
    one.add_argument("--parallel-batches", type=int, default=None, help="default: aiayn's (2, at most the threads)")
    one.add_argument("--profile", action="store_true", help="translate again under torch.profiler, print its table")
    one.add_argument("--shortlist", action="store_true", help="decode with the run's lexical shortlist")
    one.add_argument("--bare-process", action="store_true",
                     help="keep a Python process's allocator and kernel-cache defaults (by default: what `aiayn` sets)")
    ap.add_argument("--run", help="aiayn run directory (or checkpoint)")
    ap.add_argument("--src", help="source text, one sentence per line")
    ap.add_argument("--ref", help="reference translations, aligned")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "int8", "bf16"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--beam-patience", type=float, default=1.0,
                    help="the stopping rule of aiayn and CTranslate2 alike (default 1: CTranslate2's default)")
    ap.add_argument("--engine-ct2", action="store_true", help="also time `aiayn translate --engine ct2`")
    ap.add_argument("--startup", action="store_true",
                    help="also time each command on the first line alone (start-up: import, load, one sentence)")
    ap.add_argument("--out", help="folder for cells.jsonl, table.md and the outputs (default: a temporary one)")
    args = ap.parse_args()
    if args.cmd == "inprocess":
        return inprocess(args)
    if not (args.run and args.src and args.ref):
        ap.error("--run, --src and --ref are required")
    out = Path(args.out or tempfile.mkdtemp(prefix="realtext-"))
    (out / "out").mkdir(parents=True, exist_ok=True)
    ct2_dir = out / "ct2"
    if not (ct2_dir / "model.bin").is_file():
        subprocess.run(["aiayn", "export", "--checkpoint", args.run, "--to", "ct2", str(ct2_dir)], check=True,
                       stdout=subprocess.DEVNULL)
    py = sys.executable
    for package in ("aiayn", "benchmarks"):  # bytecode, as an installed package has it: every cell starts alike
        compileall.compile_dir(importlib.util.find_spec(package).submodule_search_locations[0], quiet=1)
    one_line = out / "one-line.txt"
    one_line.write_text(Path(args.src).read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    cells = []
    for threads in args.threads:
        for precision in args.precisions:
            name, ct = f"{precision}-{threads}t", CT2_TYPE[precision]
            engine = args.engine_ct2 and precision != "bf16"  # CTranslate2 has no CPU bf16
            whole = commands(args, ct2_dir, threads, precision, args.src, {
                "aiayn": out / "out" / f"aiayn-{name}.txt", "ct2": out / "out" / f"ct2-{ct}-{threads}t.txt",
                "aiayn --engine ct2": out / "out" / f"engine-ct2-{name}.txt"})
            cells.append((threads, precision, "aiayn", whole["aiayn"]))
            inprocess_cell = [py, "-m", "benchmarks.e2e.realtext", "inprocess", "--run", args.run, "--src", args.src,
                              "--precision", precision]
            cells.append((threads, precision, "aiayn (in)", [*inprocess_cell, "--beam-patience",
                          str(args.beam_patience), "--output", str(out / "out" / f"aiayn-in-{name}.txt")]))
            cells.append((threads, precision, "aiayn (in), paper's rule", [*inprocess_cell, "--beam-patience", "0",
                          "--output", str(out / "out" / f"aiayn-paper-{name}.txt")]))
            cells.append((threads, precision, "ct2", whole["ct2"]))
            if threads > 1:  # CTranslate2's batches side by side, as aiayn's are
                cells.append((threads, precision, "ct2, inter", [*whole["ct2"], str(threads)]))
            if engine:
                cells.append((threads, precision, "aiayn --engine ct2", whole["aiayn --engine ct2"]))
            if args.startup:  # the same commands on one line: what a user waits for before anything is translated
                scratch = out / "out" / "one-line-out.txt"
                short = commands(args, ct2_dir, threads, precision, str(one_line), dict.fromkeys(whole, scratch))
                for system in ["aiayn", "ct2"] + ["aiayn --engine ct2"] * engine:
                    cells.append((threads, precision, f"{system}, one line", short[system]))
    raw = out / "cells.jsonl"  # resumable: a cell already recorded for its round is not run again
    done = {(c["round"], c["threads"], c["precision"], c["system"]) for c in
            (json.loads(line) for line in (raw.read_text().splitlines() if raw.is_file() else []))}
    with raw.open("a") as log:
        for r in range(args.rounds):
            for threads, precision, system, cmd in cells:
                if (r, threads, precision, system) in done:
                    continue
                result = {"round": r, "threads": threads, "precision": precision, "system": system,
                          **_run(cmd, threads)}
                log.write(json.dumps(result) + "\n")
                log.flush()
                print(f"round {r} {system:18} {precision} {threads}t: {result['wall_s']:.2f} s", file=sys.stderr)
    print(report(raw, out, Path(args.ref), args.rounds, " ".join(["python -m benchmarks.e2e.realtext", *sys.argv[1:]])))


def commands(args: argparse.Namespace, ct2_dir: Path, threads: int, precision: str, src: str,
             outputs: dict[str, Path]) -> dict[str, list[str]]:
    """The whole-process commands of one cell: `aiayn translate`, CTranslate2 called directly, `aiayn translate
    --engine ct2`, on `src`, each writing to outputs[system]. Whole lines, as CTranslate2 is given them (aiayn
    translate splits lines into sentences by default), and the same stopping rule."""
    patience = ["--beam-patience", str(args.beam_patience), "--no-split-sentences"]
    return {"aiayn": ["aiayn", "translate", "--checkpoint", args.run, "--input", src, "--output",
                      str(outputs["aiayn"]), "--precision", precision, "--lp", "power", "--no-progress", *patience],
            "ct2": [sys.executable, str(Path(__file__).resolve().parent / "ct2_direct.py"), str(ct2_dir), src,
                    str(outputs["ct2"]), str(threads), CT2_TYPE[precision], "4", "0.6", "64", str(args.beam_patience)],
            "aiayn --engine ct2": ["aiayn", "translate", "--engine", "ct2", "--checkpoint", str(ct2_dir), "--input",
                                   src, "--output", str(outputs["aiayn --engine ct2"]), "--precision", precision,
                                   "--lp", "power", "--no-progress", *patience]}


def machine() -> str:
    """The CPU, the instruction sets aiayn's doctor names, and the versions: one line for the table's header."""
    import platform

    import ctranslate2
    import torch

    from aiayn.runtime import cpu_flags, cpu_model

    flags = sorted(f for f in cpu_flags() if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni"))
    return (f"{cpu_model()} ({', '.join(flags)}), {os.cpu_count()} cores; Python {platform.python_version()}, torch "
            f"{torch.__version__}, ctranslate2 {ctranslate2.__version__}; {time.strftime('%Y-%m-%d')}")


def report(raw: Path, out: Path, ref: Path, rounds: int, command: str = "") -> str:
    rows = [json.loads(line) for line in raw.read_text().splitlines()]
    rows = [r for r in rows if r["round"] < rounds]

    def med(system, precision, threads, key):
        values = [r[key] for r in rows if (r["system"], r["precision"], r["threads"]) == (system, precision, threads)
                  and key in r and r[key] == r[key]]
        return statistics.median(values) if values else float("nan")

    def lines(path):
        return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []

    head = ["threads", "aiayn", "CTranslate2", "aiayn process s", "CT2 process s", "process: CT2 / aiayn",
            "aiayn sent/s (in process)", "CT2 sent/s (in process)", "in process: aiayn / CT2",
            "`--engine ct2` process s", "peak MB aiayn / CT2", "BLEU aiayn / CT2", "aiayn lines = fp32",
            "paper's rule: sent/s, BLEU", "CPU s, process: aiayn / CT2", "CPU: CT2 / aiayn",
            "CPU s, in process: aiayn / CT2", "in process CPU: CT2 / aiayn"]
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = sorted({(r["threads"], r["precision"]) for r in rows}, key=lambda k: (k[0], ["fp32", "int8", "bf16"].index(
        k[1]) if k[1] in ("fp32", "int8", "bf16") else 9))
    for threads, precision in keys:
        ct = CT2_TYPE[precision]
        a_p, c_p = med("aiayn", precision, threads, "wall_s"), med("ct2", precision, threads, "wall_s")
        n = med("aiayn (in)", precision, threads, "sentences")
        a_in = n / med("aiayn (in)", precision, threads, "translate_s")
        c_in = n / med("ct2", precision, threads, "translate_s")
        eng = med("aiayn --engine ct2", precision, threads, "wall_s")
        a_out = out / "out" / f"aiayn-{precision}-{threads}t.txt"
        c_out = out / "out" / f"ct2-{ct}-{threads}t.txt"
        fp32 = lines(out / "out" / f"aiayn-fp32-{threads}t.txt")
        same = sum(a == b for a, b in zip(lines(a_out), fp32))
        paper = n / med("aiayn (in), paper's rule", precision, threads, "translate_s")
        p_out = out / "out" / f"aiayn-paper-{precision}-{threads}t.txt"
        a_cpu, c_cpu = med("aiayn", precision, threads, "cpu_s"), med("ct2", precision, threads, "cpu_s")
        a_icpu = med("aiayn (in)", precision, threads, "translate_cpu_s")
        c_icpu = med("ct2", precision, threads, "translate_cpu_s")
        table.append("| " + " | ".join([
            str(threads), precision, ct, f"{a_p:.2f}", f"{c_p:.2f}", f"**{c_p / a_p:.2f}**", f"{a_in:.1f}",
            f"{c_in:.1f}", f"**{a_in / c_in:.2f}**", f"{eng:.2f}" if eng == eng else "",
            f"{med('aiayn', precision, threads, 'peak_mb'):.0f} / {med('ct2', precision, threads, 'peak_mb'):.0f}",
            f"{bleu(a_out, ref):.1f} / {bleu(c_out, ref):.1f}", f"{same} / {len(fp32)}",
            f"{paper:.1f}, {bleu(p_out, ref):.1f}" if p_out.is_file() else "", f"{a_cpu:.2f} / {c_cpu:.2f}",
            f"**{c_cpu / a_cpu:.2f}**", f"{a_icpu:.2f} / {c_icpu:.2f}", f"**{c_icpu / a_icpu:.2f}**"]) + " |")
    text = f"`{command}`\n\n{machine()}; medians of {rounds} rounds\n\n" + "\n".join(table) + "\n"
    if any(r["system"].endswith(", one line") for r in rows):  # start-up: the same commands on the first line
        head = ["threads", "aiayn", "aiayn translate s", "`--engine ct2` s", "CTranslate2 direct s",
                "`--engine ct2` / CTranslate2", "full file: CTranslate2 / `--engine ct2` (whole process)",
                "CPU s: aiayn translate / `--engine ct2` / CTranslate2"]
        table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for threads, precision in keys:
            a, c = med("aiayn, one line", precision, threads, "wall_s"), med("ct2, one line", precision, threads,
                                                                               "wall_s")
            e = med("aiayn --engine ct2, one line", precision, threads, "wall_s")
            full = med("ct2", precision, threads, "wall_s") / med("aiayn --engine ct2", precision, threads, "wall_s")
            cpu = [med(f"{system}, one line", precision, threads, "cpu_s") for system in
                   ("aiayn", "aiayn --engine ct2", "ct2")]
            table.append("| " + " | ".join([str(threads), precision, f"{a:.2f}", f"{e:.2f}" if e == e else "",
                                            f"{c:.2f}", f"{e / c:.2f}" if e == e else "",
                                            f"**{full:.2f}**" if full == full else "",
                                            " / ".join(f"{x:.2f}" if x == x else "-" for x in cpu)]) + " |")
        text += "\nOne line (the first of the file), whole process:\n\n" + "\n".join(table) + "\n"
    inter = [k for k in keys if not math.isnan(med("ct2, inter", k[1], k[0], "wall_s"))]
    if inter:  # CTranslate2's batches side by side (inter_threads), beside aiayn's default
        head = ["threads", "aiayn", "CTranslate2", "CT2 inter_threads process s", "process: CT2 inter / aiayn",
                "CT2 inter sent/s (in process)", "in process: aiayn / CT2 inter", "CPU s, in process: CT2 inter",
                "in process CPU: CT2 inter / aiayn"]
        table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for threads, precision in inter:
            c_p, a_p = med("ct2, inter", precision, threads, "wall_s"), med("aiayn", precision, threads, "wall_s")
            n = med("aiayn (in)", precision, threads, "sentences")
            a_in = n / med("aiayn (in)", precision, threads, "translate_s")
            c_in = n / med("ct2, inter", precision, threads, "translate_s")
            c_icpu = med("ct2, inter", precision, threads, "translate_cpu_s")
            a_icpu = med("aiayn (in)", precision, threads, "translate_cpu_s")
            table.append("| " + " | ".join([str(threads), precision, CT2_TYPE[precision], f"{c_p:.2f}",
                                            f"**{c_p / a_p:.2f}**", f"{c_in:.1f}", f"**{a_in / c_in:.2f}**",
                                            f"{c_icpu:.2f}", f"**{c_icpu / a_icpu:.2f}**"]) + " |")
        text += ("\nCTranslate2 with inter_threads = the threads (one each), whole process and in process:\n\n"
                 + "\n".join(table) + "\n")
    (out / "table.md").write_text(text)
    return text


if __name__ == "__main__":
    main()
