"""Table 3 of the paper (model variations), regenerated: every row trained with everything else equal, scored the
paper's way, set beside the paper's numbers.

    ROWS, paper_row(name)        the 20 rows (base, A1..A4, B1, B2, C1..C7, D1..D4, E, big) and their published
                                 PPL / BLEU / params (aiayn.config.TABLE3, the numbers of PAPER.md)
    scaled_preset(name, K)       a row shrunk K times: d_model, d_ff, d_k, d_v divided by K; N, h, P_drop, eps_ls and
                                 positions as the row says, so the rows keep their differences on a smaller machine
    run_variations(...)          train and score every row -> OUT/<row>/result.json, then `report`
    report(out)                  the markdown table in the paper's layout (ours beside the paper's), the plot of our
                                 PPL against the paper's, Spearman's rank correlation
    spearman(x, y)               Spearman's rho with tied values given their average rank

The protocol (PAPER.md, Table 3): EN-DE newstest2013 dev, perplexity per subword token, BLEU with beam search
(beam 4, alpha 0.6), no checkpoint averaging. Here every row trains the same number of steps (the paper's 100K for
all but big, 300K for big: we give big the same steps as the others) on the data given, from the same seed; the
last checkpoint is scored: dev perplexity exp(NLL per target token, EOS included) in fp32, and sacreBLEU of the
beam-search translations of the dev sources.

Layout of OUT (one folder per row, so rows trained on several machines merge by copying folders):

    OUT/plan.json            data, scale, steps, training options: the same for every row; a later call must agree
    OUT/<row>/run/           the row's run directory (`aiayn train --resume OUT/<row>/run` continues it exactly);
                             its checkpoints are deleted once the row is scored, unless keep_checkpoints
    OUT/<row>/result.json    written last: its presence marks the row finished (it is then skipped)
    OUT/<row>/dev.hyp        the dev translations that were scored
    OUT/<row>/worker.log     the row's training output (rows trained as subprocesses)
    OUT/table3.md, OUT/table3.png, OUT/summary.json   `report`'s outputs

`--jobs N` trains N rows at once as subprocesses (`python -m aiayn.experiments.table3 --worker ...`), for a GPU or
a many-core machine; larger rows start first. `--minutes M` instead of `--steps N` first trains every row a few
steps (CALIBRATION_STEPS) at that concurrency, measures its seconds per step, and picks the one step count that
fits all rows into about M minutes of training (scoring comes on top); the calibration steps are kept, not wasted,
since the schedule does not depend on the step limit and a run resumes exactly.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiayn import checkpoint as ckpt
from aiayn import files, rundir
from aiayn.config import TABLE3, ModelConfig
from aiayn.errors import DataError, UsageError
from aiayn.train import TrainConfig

# Table 3's rows in the paper's order (the presets of aiayn.config with the same names), and their groups.
ROWS = ("base", "A1", "A2", "A3", "A4", "B1", "B2", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "D1", "D2", "D3",
        "D4", "E", "big")
GROUPS = {"base": "base", "big": "big", "E": "(E)"} | {r: f"({r[0]})" for r in ROWS if r[0] in "ABCD"}
PAPER_STEPS = {"big": "300K"}  # every other row: 100K

# Training options every row shares unless given: the paper's (TrainConfig's defaults) but for how a run saves:
# often enough to resume an interrupted row, and only the newest checkpoint (no averaging in Table 3).
DEFAULT_TRAIN = {"save_every_minutes": 5.0, "keep_last": 1, "log_every": 10}
# Options that may differ between machines without changing what a row computes.
PER_MACHINE = ("device", "threads", "max_steps", "max_minutes")
CALIBRATION_STEPS = 40  # steps each row trains before --minutes picks the step count (seconds/step: last half)
PLAN, RESULT = "plan.json", "result.json"


# ---------------------------------------------------------------------------------------------------------
# The rows.


def paper_row(name: str) -> dict[str, Any]:
    """The paper's columns of a row: group label, params (millions; None = blank), PPL, BLEU, steps."""
    params, ppl, bleu = TABLE3[name]
    return {"group": GROUPS[name], "params_M": params, "ppl": ppl, "bleu": bleu, "steps": PAPER_STEPS.get(name, "100K")}


def scaled_preset(name: str, scale: int) -> ModelConfig:
    """Row `name` with d_model, d_ff, d_k and d_v divided by `scale` (rounded; d_model kept even, every width >= 1);
    N, h, P_drop, eps_ls and the positional encoding as the row says."""
    if name not in ROWS:
        raise UsageError(f"{name!r} is not a row of Table 3; the rows are: {', '.join(ROWS)}")
    if not isinstance(scale, int) or scale < 1:
        raise UsageError(f"scale must be a positive integer, got {scale!r}")
    cfg = ModelConfig.preset(name)

    def shrink(width: int) -> int:
        return max(1, round(width / scale))

    return cfg.replace(d_model=max(2, 2 * round(cfg.d_model / (2 * scale))), d_ff=shrink(cfg.d_ff),
                       d_k=shrink(cfg.d_k), d_v=shrink(cfg.d_v))


def parse_rows(text: str | Sequence[str] | None) -> list[str]:
    """'base,A1,C5' (or a list) -> row names in the paper's order; None -> all rows."""
    if text is None:
        return list(ROWS)
    names = [r.strip() for r in (text.split(",") if isinstance(text, str) else text) if r.strip()]
    unknown = [r for r in names if r not in ROWS]
    if unknown or not names:
        raise UsageError(f"unknown row(s) {', '.join(unknown) or '(none given)'}; the rows are: {', '.join(ROWS)}")
    return [r for r in ROWS if r in names]


def _cost(cfg: ModelConfig) -> tuple[int, int, int]:
    """An ordering key for scheduling: deeper, then wider rows take longer per step (on a GPU depth rules)."""
    return (cfg.n_enc_layers + cfg.n_dec_layers, cfg.d_model, cfg.d_ff)


# ---------------------------------------------------------------------------------------------------------
# Ranks.


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n in increasing order of value; tied values share the average of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):  # positions start..end hold ranks start+1..end+1: their mean
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's correlation of the average ranks (nan if a side is constant or n < 2)."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} values against {len(y)}")
    if len(x) < 2:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


# ---------------------------------------------------------------------------------------------------------
# The plan: what every row shares, fixed at the first call and checked at every later one.


@dataclass(frozen=True)
class Plan:
    data: str
    scale: int
    steps: int | None  # None until --minutes has calibrated
    minutes: float | None
    train: dict[str, Any]  # TrainConfig fields but PER_MACHINE

    def train_config(self, max_steps: int, device: str, threads: int) -> TrainConfig:
        return TrainConfig.from_dict({**self.train, "max_steps": max_steps, "device": device, "threads": threads})


def make_plan(out: Path, data: str | Path | None = None, scale: int | None = None, steps: int | None = None,
              minutes: float | None = None, train: dict[str, Any] | None = None) -> Plan:
    """Read OUT/plan.json, or write it from the options given. Options given again must match the plan (so every row
    is trained alike); options not given are taken from it."""
    out = Path(out)
    train = dict(train or {})
    if steps is not None and minutes is not None:
        raise UsageError("give --steps or --minutes, not both")
    bad = sorted(set(train) & set(PER_MACHINE))
    if bad:
        raise UsageError(f"{', '.join(bad)} are chosen per machine or by --steps/--minutes, not in the plan")
    if (out / PLAN).is_file():
        saved = json.loads((out / PLAN).read_text(encoding="utf-8"))
        plan = Plan(**saved)
        given = {"data": None if data is None else str(Path(data).resolve()), "scale": scale, "steps": steps,
                 "minutes": minutes}
        clashes = [f"{k} {v} (plan: {getattr(plan, k)})" for k, v in given.items()
                   if v is not None and v != getattr(plan, k) and not (k == "steps" and plan.steps is None)]
        clashes += [f"{k} {v} (plan: {plan.train.get(k)})" for k, v in train.items() if plan.train.get(k) != v]
        if clashes:
            raise UsageError(f"{out} was started with other options: {'; '.join(clashes)}. Every row must be trained "
                             "alike: give the same options (or none), or use another --out")
        return plan
    if data is None:
        raise UsageError(f"{out} has no {PLAN} yet: give --data to start it")
    from aiayn.data import has_split, load_split

    if not (Path(data) / "meta.json").is_file():
        raise DataError(f"{data} is not a prepared-data directory (no meta.json); run `aiayn prepare` first")
    if not has_split(data, "valid") or load_split(data, "valid").text_paths is None:
        raise DataError(f"{data} has no dev (valid) split with its text; Table 3 scores every row on it: prepare "
                        "the data with --valid-src and --valid-tgt")
    if steps is None and minutes is None:
        steps = 100_000  # the paper's
    if steps is not None and steps < 1 or minutes is not None and minutes <= 0:
        raise UsageError("--steps and --minutes must be positive")
    options = {**{f.name: f.default for f in dataclasses.fields(TrainConfig) if f.name not in PER_MACHINE},
               **DEFAULT_TRAIN, **train}
    TrainConfig.from_dict(options)  # validate now, not in a worker
    plan = Plan(str(Path(data).resolve()), scale or 1, steps, minutes, options)
    for name in ROWS:
        scaled_preset(name, plan.scale)  # an impossible scale fails here
    out.mkdir(parents=True, exist_ok=True)  # only now: a refused start leaves no folder behind
    files.write_json(out / PLAN, dataclasses.asdict(plan))
    return plan


def _set_steps(out: Path, plan: Plan, steps: int) -> Plan:
    plan = dataclasses.replace(plan, steps=steps)
    files.write_json(out / PLAN, dataclasses.asdict(plan))
    return plan


# ---------------------------------------------------------------------------------------------------------
# One row: train (or resume) to a step, then score.


def run_dir(out: Path, name: str) -> Path:
    return Path(out) / name / "run"


def finished(out: Path, name: str) -> bool:
    return (Path(out) / name / RESULT).is_file()


def trained_steps(out: Path, name: str) -> int:
    """The step of the row's newest resumable checkpoint (0 if none)."""
    last = rundir.latest_checkpoint(run_dir(out, name), resumable=True) if run_dir(out, name).is_dir() else None
    return int(last.stem.removeprefix("step_")) if last else 0


def run_row(out: Path, plan: Plan, name: str, max_steps: int, device: str = "auto", threads: int = 0,
            keep_checkpoints: bool = False, jobs: int = 1) -> dict[str, Any] | None:
    """Train row `name` of the plan to `max_steps` (a new run, or resuming the one there); when that is the plan's
    step count, score it and write OUT/<name>/result.json. Returns the result, or None if not (yet) scored."""
    from aiayn.train import resume, train

    out = Path(out)
    if finished(out, name):
        return json.loads((out / name / RESULT).read_text(encoding="utf-8"))
    run = run_dir(out, name)
    t0 = time.time()
    if (run / "config.json").is_file():
        summary = resume(run, progress=False, max_steps=max_steps)
    else:
        if run.exists():  # created, but killed before its config was written
            shutil.rmtree(run)
        cfg = scaled_preset(name, plan.scale)
        summary = train(Path(plan.data), run, cfg, plan.train_config(max_steps, device, threads), progress=False)
    _add_time(out / name, time.time() - t0, summary["elapsed_s"])
    if summary["interrupted_by"] is not None:
        raise KeyboardInterrupt
    if plan.steps is None or summary["step"] < plan.steps:
        return None
    result = score_row(out, plan, name, device, jobs)
    if not keep_checkpoints:
        shutil.rmtree(run / rundir.CHECKPOINT_DIR, ignore_errors=True)
        (run / rundir.BEST).unlink(missing_ok=True)
    return result


def _add_time(row_dir: Path, wall_s: float, train_s: float) -> None:
    """Accumulate the row's training time over the calls that trained it (each call adds its own)."""
    path = row_dir / "time.json"
    t = json.loads(path.read_text()) if path.is_file() else {"train_s": 0.0, "wall_s": 0.0, "calls": 0}
    files.write_json(path, {"train_s": t["train_s"] + train_s, "wall_s": t["wall_s"] + wall_s, "calls": t["calls"] + 1})


def score_row(out: Path, plan: Plan, name: str, device: str = "auto", jobs: int = 1) -> dict[str, Any]:
    """Dev perplexity and dev BLEU of the row's last checkpoint (Table 3's protocol) -> OUT/<name>/result.json."""
    import torch

    from aiayn.data import Vocab, load_split
    from aiayn.metrics import corpus_bleu, perplexity
    from aiayn.model import Transformer, count_parameters
    from aiayn.runtime import Runtime, resolve_device
    from aiayn.search import PAPER_SEARCH
    from aiayn.translate import Translator

    run = run_dir(out, name)
    last = rundir.latest_checkpoint(run)
    if last is None:
        raise DataError(f"row {name}: no checkpoint in {run} to score")
    state, cfg, meta = ckpt.load_weights(last)
    dev = resolve_device(device)
    model = Transformer(cfg)
    model.load_state_dict(state)
    model.to(dev).eval()
    data = Path(plan.data)
    valid = load_split(data, "valid")
    t0 = time.time()
    ppl = perplexity(model, valid, plan.train["max_tokens"], 0.0, Runtime(dev))  # fp32, eps 0: the true NLL
    src_path, ref_path = valid.text_paths
    sources = src_path.read_text(encoding="utf-8").splitlines()
    refs = ref_path.read_text(encoding="utf-8").splitlines()
    translator = Translator(model, Vocab.load(data), PAPER_SEARCH, device=dev, batch_size=128 if dev.type == "cuda"
                            else 64)
    hyps = translator.translate(sources)
    bleu = corpus_bleu(hyps, refs)
    (out / name / "dev.hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    times = json.loads((out / name / "time.json").read_text())
    run_cfg = rundir.read_config(run)
    result = {
        "row": name, "scale": plan.scale, "steps": int(meta.get("step", -1)), "model": cfg.to_dict(),
        "params": count_parameters(model), "dev_ppl": ppl.ppl, "dev_nll_per_token": ppl.nll / ppl.tokens,
        "dev_tokens": ppl.tokens, "dev_bleu": bleu.score, "bleu_signature": bleu.signature,
        "train_minutes": times["train_s"] / 60, "train_calls": times["calls"], "score_seconds": time.time() - t0,
        "device": str(dev), "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "dtype": run_cfg["train"]["dtype"], "concurrent_jobs": jobs, "train": plan.train, "data": plan.data,
        "paper": paper_row(name),
    }
    files.write_json(out / name / RESULT, result)
    return result


# ---------------------------------------------------------------------------------------------------------
# All rows: in this process, or N subprocesses at a time.


def _worker_command(out: Path, name: str, max_steps: int, device: str, threads: int, keep: bool, jobs: int) -> list:
    cmd = [sys.executable, "-m", "aiayn.experiments.table3", "--worker", str(out), name, "--max-steps",
           str(max_steps), "--device", device, "--threads", str(threads), "--jobs", str(jobs)]
    return cmd + (["--keep-checkpoints"] if keep else [])


def _run_all(out: Path, plan: Plan, names: list[str], max_steps: int, device: str, jobs: int, threads: int,
             keep: bool, say) -> list[str]:
    """Bring every row to max_steps (scoring those that reach the plan's steps). Returns the rows that failed."""
    todo = [n for n in names if not finished(out, n) and (max_steps == plan.steps or trained_steps(out, n) < max_steps)]
    if jobs == 1:
        for n in todo:
            t0 = time.time()
            run_row(out, plan, n, max_steps, device, threads, keep, jobs)
            say(f"{n}: step {max_steps} ({(time.time() - t0) / 60:.1f} min){_scored(out, n)}")
        return []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    running: dict[str, tuple[subprocess.Popen, float, Any]] = {}
    failed: list[str] = []
    queue = list(todo)
    old_handler = signal.signal(signal.SIGTERM, _interrupt)  # a scheduler's or timeout's SIGTERM: stop as Ctrl-C
    try:
        while queue or running:
            while queue and len(running) < jobs:
                n = queue.pop(0)
                (out / n).mkdir(parents=True, exist_ok=True)
                log = open(out / n / "worker.log", "a", encoding="utf-8")
                proc = subprocess.Popen(_worker_command(out, n, max_steps, device, threads, keep, jobs), stdout=log,
                                        stderr=subprocess.STDOUT, env=env)
                running[n] = (proc, time.time(), log)
            time.sleep(0.2)
            for n, (proc, t0, log) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del running[n]
                if proc.returncode == 0:
                    say(f"{n}: step {max_steps} ({(time.time() - t0) / 60:.1f} min){_scored(out, n)}")
                else:
                    failed.append(n)
                    say(f"{n}: FAILED (exit {proc.returncode}); see {out / n / 'worker.log'}")
    finally:  # Ctrl-C or an error here: ask each running row to stop (it saves a checkpoint), then wait for it
        for proc, _, _log in running.values():
            if proc.poll() is None:
                proc.terminate()
        for proc, _, log in running.values():
            proc.wait()
            log.close()
        signal.signal(signal.SIGTERM, old_handler)
    return failed


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _scored(out: Path, name: str) -> str:
    if not finished(out, name):
        return ""
    r = json.loads((out / name / RESULT).read_text())
    return (f"; dev PPL {r['dev_ppl']:.2f} (paper {r['paper']['ppl']}), BLEU {r['dev_bleu']:.1f}, "
            f"{r['params'] / 1e6:.2f}M parameters")


def seconds_per_step(run: Path) -> float:
    """Seconds per step over the second half of the newest training call logged in RUN/log.jsonl that logged
    at least two lines there (a call that resumed near its end may not have)."""
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]
    calls: list[list[dict]] = [[]]
    for r in (r for r in records if r["kind"] == "train"):
        if calls[-1] and r["elapsed_s"] < calls[-1][-1]["elapsed_s"]:  # elapsed_s restarts with each call
            calls.append([])
        calls[-1].append(r)
    for call in reversed(calls):
        half = [r for r in call if r["step"] >= call[-1]["step"] // 2] if call else []
        if len(half) >= 2:
            return (half[-1]["elapsed_s"] - half[0]["elapsed_s"]) / (half[-1]["step"] - half[0]["step"])
    raise DataError(f"{run}: too few log lines to time a step (train at least {CALIBRATION_STEPS} steps)")


def steps_for_budget(step_seconds: Sequence[float], minutes: float, jobs: int) -> int:
    """The equal step count that fits rows of these seconds/step into `minutes` on `jobs` slots: the work spread over
    the slots, but never less than the slowest row alone. Rounded down to a multiple of 10."""
    per_step = max(max(step_seconds), sum(step_seconds) / jobs)
    return int(minutes * 60 / per_step) // 10 * 10


def run_variations(data: str | Path | None, out: str | Path, rows: str | Sequence[str] | None = None,
                   scale: int | None = None, steps: int | None = None, minutes: float | None = None, jobs: int = 1,
                   device: str = "auto", threads: int | None = None, keep_checkpoints: bool = False,
                   train: dict[str, Any] | None = None, say=print) -> dict[str, Any]:
    """Train and score the rows (finished rows skipped, interrupted ones resumed), then `report`. Returns its
    summary; raises DataError naming the rows that failed. threads: CPU threads per row (default: cores / jobs)."""
    out = Path(out)
    names = parse_rows(rows)
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    plan = make_plan(out, data, scale, steps, minutes, train)
    say(f"Table 3 at scale 1/{plan.scale} on {plan.data}: {len(names)} rows, "
        f"{plan.steps if plan.steps else f'~{plan.minutes:g} minutes of'} steps, {jobs} at a time; results in {out}")
    say(scaled_table(names, plan.scale))
    names.sort(key=lambda n: _cost(scaled_preset(n, plan.scale)), reverse=True)  # longest first
    failed: list[str] = []
    if plan.steps is None:
        failed = _run_all(out, plan, names, CALIBRATION_STEPS, device, jobs, threads, keep_checkpoints, say)
        if failed:
            raise DataError(f"calibration failed for {', '.join(failed)}; see their worker.log")
        timing = {n: seconds_per_step(run_dir(out, n)) for n in names}
        n_steps = steps_for_budget(list(timing.values()), plan.minutes, jobs)
        say("seconds per step: " + ", ".join(f"{n} {t:.3f}" for n, t in timing.items()))
        if n_steps < CALIBRATION_STEPS:
            raise UsageError(f"{plan.minutes:g} minutes allow only {n_steps} steps per row; give more --minutes")
        plan = _set_steps(out, plan, n_steps)
        say(f"{n_steps} steps per row fit {plan.minutes:g} minutes (saved in {out / PLAN})")
    failed = _run_all(out, plan, names, plan.steps, device, jobs, threads, keep_checkpoints, say)
    summary = report(out)
    say(summary["text"])
    if failed:
        raise DataError(f"rows {', '.join(failed)} failed; see OUT/<row>/worker.log, then run the same command again "
                        "(finished rows are skipped)")
    return summary


# ---------------------------------------------------------------------------------------------------------
# The report.

_SHAPE = ("n_enc_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "dropout", "label_smoothing")
_SHAPE_HEAD = ("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls")


def _shape(cfg: ModelConfig) -> list[Any]:
    return [getattr(cfg, f) for f in _SHAPE]


def scaled_table(names: Sequence[str], scale: int) -> str:
    """The presets as the paper has them and as trained at this scale, one line per row."""
    head = "| row | paper: " + " | ".join(_SHAPE_HEAD) + " | trained (1/" + str(scale) + "): " + \
        " | ".join(_SHAPE_HEAD[:6]) + " |"
    lines = [head, "|" + "---|" * (1 + len(_SHAPE) + 6)]
    for n in names:
        paper, ours = _shape(ModelConfig.preset(n)), _shape(scaled_preset(n, scale))[:6]
        pos = " learned pos." if ModelConfig.preset(n).positional == "learned" else ""
        lines.append(f"| {n}{pos} | " + " | ".join(map(str, paper)) + " | " + " | ".join(map(str, ours)) + " |")
    return "\n".join(lines)


def load_results(out: Path) -> dict[str, dict[str, Any]]:
    """OUT/<row>/result.json of every finished row, by row name (in the paper's order)."""
    found = {}
    for name in ROWS:
        path = Path(out) / name / RESULT
        if path.is_file():
            found[name] = json.loads(path.read_text(encoding="utf-8"))
    return found


def report(out: str | Path, plot: bool = True) -> dict[str, Any]:
    """Write OUT/table3.md (and OUT/table3.png, OUT/summary.json) from the finished rows; returns the summary."""
    out = Path(out)
    results = load_results(out)
    if not results:
        raise DataError(f"{out} holds no finished row (no <row>/{RESULT}); train some first")
    settings = {(r["scale"], r["steps"], json.dumps(r["train"], sort_keys=True)) for r in results.values()}
    if len(settings) > 1:
        raise DataError(f"the rows in {out} were trained with different scales, steps or options; a table needs "
                        "rows trained alike: " + ", ".join(f"{n}: scale {r['scale']}, {r['steps']} steps"
                                                           for n, r in results.items()))
    any_r = next(iter(results.values()))
    names = list(results)
    ppl_rho = spearman([TABLE3[n][1] for n in names], [results[n]["dev_ppl"] for n in names])
    bleu_rho = spearman([TABLE3[n][2] for n in names], [results[n]["dev_bleu"] for n in names])
    base = _shape(ModelConfig.preset("base"))
    lines = [f"Table 3 at scale 1/{any_r['scale']} (d_model, d_ff, d_k, d_v divided by {any_r['scale']}), "
             f"{any_r['steps']:,} steps for every row, data {Path(any_r['data']).name}; dev PPL per subword token, "
             "dev sacreBLEU (beam 4, alpha 0.6), no checkpoint averaging. Shape columns are the paper's "
             "(blank = base).", "",
             "| | row | " + " | ".join(_SHAPE_HEAD) + " | steps | paper PPL | paper BLEU | paper params | PPL | BLEU | "
             "params | train min |",
             "|" + "---|" * (2 + len(_SHAPE) + 8)]
    for n in ROWS:
        r = results.get(n)
        cfg = ModelConfig.preset(n)
        shape = [("" if n != "base" and v == b else str(v)) for v, b in zip(_shape(cfg), base)]
        if n == "E":
            shape = ["learned positional embedding", *[""] * (len(shape) - 1)]
        p = paper_row(n)
        ours = (f"{r['dev_ppl']:.2f} | {r['dev_bleu']:.1f} | {r['params'] / 1e6:.2f}M | {r['train_minutes']:.1f}"
                if r else "- | - | - | -")
        params = f"{p['params_M']}M" if p["params_M"] else ""
        steps = p["steps"] if n in ("base", "big") else ""
        lines.append(f"| {p['group'] if n in ('base', 'big') or n[-1] in '1E' else ''} | {n} | " + " | ".join(shape)
                     + f" | {steps} | {p['ppl']:.2f} | {p['bleu']} | {params} | {ours} |")
    dtypes = sorted({r["dtype"] for r in results.values()})
    devices = sorted({r["device_name"] for r in results.values()})
    lines += ["", f"Spearman's rank correlation with the paper over {len(names)} rows: dev PPL rho = {ppl_rho:.3f}, "
              f"dev BLEU rho = {bleu_rho:.3f}.",
              f"Trained on {', '.join(devices)} ({', '.join(dtypes)}); train minutes are wall time with up to "
              f"{max(r['concurrent_jobs'] for r in results.values())} rows training at once.", "",
              "Presets as trained:", "", scaled_table(names, any_r["scale"])]
    text = "\n".join(lines) + "\n"
    (out / "table3.md").write_text(text, encoding="utf-8")
    summary = {"rows": names, "spearman_ppl": ppl_rho, "spearman_bleu": bleu_rho, "scale": any_r["scale"],
               "steps": any_r["steps"], "missing": [n for n in ROWS if n not in results], "text": text}
    if plot:
        try:
            summary["plot"] = str(plot_ppl(results, out / "table3.png", ppl_rho))
        except ImportError:
            summary["plot"] = None
            text += "\n(no plot: matplotlib is not installed; pip install 'aiayn[viz]')\n"
            summary["text"] = text
    files.write_json(out / "summary.json", {k: v for k, v in summary.items() if k != "text"})
    return summary


def plot_ppl(results: dict[str, dict[str, Any]], path: Path, rho: float) -> Path:
    """Our dev PPL against the paper's, one labelled point per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    x = [TABLE3[n][1] for n in names]
    y = [results[n]["dev_ppl"] for n in names]
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    ax.scatter(x, y, s=18)
    for n, a, b in zip(names, x, y):
        ax.annotate(n, (a, b), textcoords="offset points", xytext=(4, 3), fontsize=8)
    r = next(iter(results.values()))
    ax.set_xlabel("paper: dev PPL (newstest2013, 100K steps, full size)")
    ax.set_ylabel(f"ours: dev PPL (scale 1/{r['scale']}, {r['steps']:,} steps)")
    ax.set_title(f"Table 3 rows: Spearman rho = {rho:.2f} ({len(names)} rows)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------------
# The subprocess entry point of --jobs (not a user command: `aiayn variations` is).


def _worker(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="train and score one row of OUT's plan (used by aiayn variations)")
    p.add_argument("--worker", nargs=2, metavar=("OUT", "ROW"), required=True)
    p.add_argument("--max-steps", type=int, required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--keep-checkpoints", action="store_true")
    args = p.parse_args(argv)
    out, name = Path(args.worker[0]), args.worker[1]
    plan = make_plan(out)
    try:
        run_row(out, plan, name, args.max_steps, args.device, args.threads, args.keep_checkpoints, args.jobs)
    except KeyboardInterrupt:  # stopped by a signal after saving a checkpoint: the next call resumes it
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(_worker())
