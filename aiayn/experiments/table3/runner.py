"""All rows: trained in this process one after another, or N at a time as subprocesses of the `aiayn` command;
`--minutes` calibration; `train_variations`, what `aiayn variations` runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiayn.errors import DataError, UsageError
from aiayn.experiments.table3.plan import (
    PLAN,
    Plan,
    finished,
    make_plan,
    read_result,
    run_dir,
    set_steps,
    trained_steps,
)
from aiayn.experiments.table3.report import backbone_text, report
from aiayn.experiments.table3.rows import cost, parse_rows, scaled_table
from aiayn.experiments.table3.score import train_row
from aiayn.rundir import RunDir
from aiayn.runtime import StopOnSignal

CALIBRATION_STEPS = 40  # steps each row trains before --minutes picks the step count (seconds/step: last half)
Say = Callable[[str], None]


def train_variations(data: str | Path | None, out: str | Path, rows: str | Sequence[str] | None = None,
                   scale: int | None = None, steps: int | None = None, minutes: float | None = None, jobs: int = 1,
                   device: str = "auto", threads: int | None = None, keep_checkpoints: bool = False,
                   train: dict[str, Any] | None = None, dev_sentences: int | None = None,
                   backbone: dict[str, Any] | None = None, say: Say = print) -> dict[str, Any]:
    """Train and score the rows (finished rows skipped, interrupted ones resumed), then `report`. Returns its
    summary; raises DataError naming the rows that failed. threads: CPU threads per row (default: cores / jobs)."""
    out = Path(out)
    names = parse_rows(rows)
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    plan = make_plan(out, data, scale, steps, minutes, train, dev_sentences, backbone)
    say(f"Table 3 at scale 1/{plan.scale} on {plan.data}: {len(names)} rows, "
        f"{plan.steps if plan.steps else f'~{plan.minutes:g} minutes of'} steps, {jobs} at a time; results in {out}"
        + (f"; every row with {backbone_text(plan.backbone)}" if plan.backbone else ""))
    say(scaled_table(names, plan.scale))
    names.sort(key=lambda n: cost(plan.model_config(n)), reverse=True)  # longest first
    pool = Pool(out, device, jobs, threads, keep_checkpoints, say)
    if plan.steps is None:
        plan = calibrate(out, plan, names, pool)
    failed = pool.run(plan, names, plan.steps)
    summary = report(out)
    say(summary["text"])
    if failed:
        raise DataError(f"rows {', '.join(failed)} failed; see OUT/<row>/worker.log, then run the same command again "
                        "(finished rows are skipped)")
    return summary


def calibrate(out: Path, plan: Plan, names: list[str], pool: Pool) -> Plan:
    """Train every row CALIBRATION_STEPS steps, time them, and save in the plan the one step count that fits all
    rows into plan.minutes (the calibration steps are kept: the schedule does not depend on the step limit)."""
    failed = pool.run(plan, names, CALIBRATION_STEPS)
    if failed:
        raise DataError(f"calibration failed for {', '.join(failed)}; see their worker.log")
    timing = {n: seconds_per_step(run_dir(out, n)) for n in names}
    n_steps = steps_for_budget(list(timing.values()), plan.minutes, pool.jobs)
    pool.say("seconds per step: " + ", ".join(f"{n} {t:.3f}" for n, t in timing.items()))
    if n_steps < CALIBRATION_STEPS:
        raise UsageError(f"{plan.minutes:g} minutes allow only {n_steps} steps per row; give more --minutes")
    plan = set_steps(out, plan, n_steps)
    pool.say(f"{n_steps} steps per row fit {plan.minutes:g} minutes (saved in {out / PLAN})")
    return plan


def seconds_per_step(run: Path) -> float:
    """Seconds per step over the second half of the newest training call logged in RUN/log.jsonl that logged
    at least two lines there (a call that resumed near its end may not have)."""
    calls: list[list[dict]] = [[]]
    for r in (r for r in RunDir(run).log if r["kind"] == "train"):
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


class Pool:
    """Brings rows to a step: in this process (jobs = 1), or `jobs` rows at a time as `aiayn variations --worker`
    subprocesses (OUT/<row>/worker.log), for a GPU or a many-core machine."""

    def __init__(self, out: Path, device: str, jobs: int, threads: int, keep_checkpoints: bool, say: Say):
        self.out, self.device, self.jobs, self.threads, self.keep, self.say = out, device, jobs, threads, \
            keep_checkpoints, say

    def run(self, plan: Plan, names: list[str], max_steps: int) -> list[str]:
        """Bring every row to max_steps (scoring those that reach the plan's steps). Returns the rows that failed."""
        todo = [n for n in names if not finished(self.out, n)
                and (max_steps == plan.steps or trained_steps(self.out, n) < max_steps)]
        if self.jobs > 1:
            return self._in_subprocesses(todo, max_steps)
        for n in todo:
            t0 = time.time()
            train_row(self.out, plan, n, max_steps, self.device, self.threads, self.keep, self.jobs)
            self._done(n, max_steps, t0)
        return []

    def _in_subprocesses(self, todo: list[str], max_steps: int) -> list[str]:
        """A SIGINT or SIGTERM (Ctrl-C, a scheduler's, a timeout's) stops starting rows and sends each running one a
        SIGTERM, on which it saves a checkpoint and exits (the trainer's StopOnSignal); then KeyboardInterrupt."""
        queue, running, failed = list(todo), {}, []
        with StopOnSignal(enabled=True) as stop:
            try:
                while (queue or running) and stop.signal is None:
                    while queue and len(running) < self.jobs:
                        n = queue.pop(0)
                        running[n] = (self._start(n, max_steps), time.time())
                    time.sleep(0.2)
                    for n, (proc, t0) in list(running.items()):
                        if proc.poll() is not None:
                            del running[n]
                            if proc.returncode == 0:
                                self._done(n, max_steps, t0)
                            else:
                                failed.append(n)
                                self.say(f"{n}: FAILED (exit {proc.returncode}); see {self.out / n / 'worker.log'}")
            finally:  # an error or a signal here: stop the running rows (each saves a checkpoint) and wait for them
                for proc, _ in running.values():
                    proc.terminate()
                for proc, _ in running.values():
                    proc.wait()
        if stop.signal is not None:
            raise KeyboardInterrupt
        return failed

    def _start(self, name: str, max_steps: int) -> subprocess.Popen:
        """`aiayn variations --worker ROW` for one row, its output appended to OUT/<row>/worker.log."""
        cmd = [sys.executable, "-m", "aiayn", "variations", "--out", str(self.out), "--worker", name,
               "--worker-steps", str(max_steps), "--device", self.device, "--threads", str(self.threads),
               "--jobs", str(self.jobs), *(["--keep-checkpoints"] if self.keep else [])]
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "PYTHONUNBUFFERED": "1"}
        (self.out / name).mkdir(parents=True, exist_ok=True)
        with open(self.out / name / "worker.log", "a", encoding="utf-8") as log:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)

    def _done(self, name: str, max_steps: int, t0: float) -> None:
        line = f"{name}: step {max_steps} ({(time.time() - t0) / 60:.1f} min)"
        if finished(self.out, name):
            r = read_result(self.out, name)
            line += (f"; dev PPL {r['dev_ppl']:.2f} (paper {r['paper']['ppl']}), BLEU {r['dev_bleu']:.1f}, "
                     f"{r['params'] / 1e6:.2f}M parameters")
        self.say(line)


def row_worker(out: str | Path, name: str, max_steps: int, device: str, threads: int, keep_checkpoints: bool,
               jobs: int) -> int:
    """One row of OUT's plan brought to max_steps: what a `--jobs` subprocess runs."""
    train_row(Path(out), make_plan(Path(out)), name, max_steps, device, threads, keep_checkpoints, jobs)
    return 0
