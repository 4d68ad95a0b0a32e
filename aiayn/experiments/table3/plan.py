"""OUT's plan (what every row shares, fixed by the first call and checked at every later one) and OUT's layout."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiayn import files
from aiayn.config import INITS, ModelConfig
from aiayn.data.folder import META_FILE
from aiayn.errors import DataError, UsageError
from aiayn.experiments.table3.rows import ROWS, scaled_preset
from aiayn.rundir import RunDir
from aiayn.training.train import TrainConfig

# Training options every row shares unless given: the paper's (TrainConfig's defaults) but for how a run saves:
# often enough to resume an interrupted row, and only the newest checkpoint (no averaging in Table 3).
DEFAULT_TRAIN = {"save_every_minutes": 5.0, "keep_last": 1, "log_every": 10}
# Options that may differ between machines without changing what a row computes.
PER_MACHINE = ("device", "threads", "max_steps", "max_minutes")
PLAN, RESULT, TIME = "plan.json", "result.json", "time.json"
# Model options that are not a row's difference and may be set for every row alike (the paper's: post-norm, and an
# initialization it does not give): --norm-first, --init.
BACKBONE = ("norm_first", "init")


@dataclass(frozen=True)
class Plan:
    data: str
    scale: int
    steps: int | None  # None until --minutes has calibrated
    minutes: float | None
    train: dict[str, Any]  # TrainConfig fields but PER_MACHINE
    dev_sentences: int | None = None  # BLEU on the first N dev sentences; None: all of them (the paper's)
    backbone: dict[str, Any] = field(default_factory=dict)  # BACKBONE options set for every row ({}: the paper's)

    def model_config(self, name: str) -> ModelConfig:
        """Row `name` (or the row a replica repeats) as this plan trains it: scaled, with the plan's backbone."""
        return scaled_preset(name, self.scale).replace(**self.backbone)

    def train_config(self, max_steps: int, device: str, threads: int, seed: int | None = None) -> TrainConfig:
        """seed: a replica's, instead of the plan's."""
        seed = self.train["seed"] if seed is None else seed
        return TrainConfig.from_dict({**self.train, "max_steps": max_steps, "device": device, "threads": threads,
                                      "seed": seed})


def make_plan(out: Path, data: str | Path | None = None, scale: int | None = None, steps: int | None = None,
              minutes: float | None = None, train: dict[str, Any] | None = None,
              dev_sentences: int | None = None, backbone: dict[str, Any] | None = None) -> Plan:
    """Read OUT/plan.json, or write it from the options given. Options given again must match the plan (so every row
    is trained and scored alike); options not given are taken from it."""
    out = Path(out)
    train = dict(train or {})
    backbone = dict(backbone or {})
    unknown = sorted(set(backbone) - set(BACKBONE))
    if unknown:
        raise UsageError(f"{', '.join(unknown)}: not a backbone option; those are {', '.join(BACKBONE)}")
    if backbone.get("init", INITS[0]) not in INITS:
        raise UsageError(f"init must be one of {', '.join(INITS)}, not {backbone['init']!r}")
    if steps is not None and minutes is not None:
        raise UsageError("give --steps or --minutes, not both")
    bad = sorted(set(train) & set(PER_MACHINE))
    if bad:
        raise UsageError(f"{', '.join(bad)} are chosen per machine or by --steps/--minutes, not in the plan")
    if (out / PLAN).is_file():
        plan = Plan(**json.loads((out / PLAN).read_text(encoding="utf-8")))
        given = {"data": None if data is None else str(Path(data).resolve()), "scale": scale, "steps": steps,
                 "minutes": minutes, "dev_sentences": dev_sentences}
        clashes = [f"{k} {v} (plan: {getattr(plan, k)})" for k, v in given.items()
                   if v is not None and v != getattr(plan, k) and not (k == "steps" and plan.steps is None)]
        clashes += [f"{k} {v} (plan: {plan.train.get(k)})" for k, v in train.items() if plan.train.get(k) != v]
        clashes += [f"{k} {v} (plan: {plan.backbone.get(k, getattr(ModelConfig(), k))})"
                    for k, v in backbone.items() if plan.backbone.get(k, getattr(ModelConfig(), k)) != v]
        if clashes:
            raise UsageError(f"{out} was started with other options: {'; '.join(clashes)}. Every row must be trained "
                             "alike: give the same options (or none), or use another --out")
        return plan
    if data is None:
        raise UsageError(f"{out} has no {PLAN} yet: give --data to start it")
    _check_data(Path(data))
    if steps is None and minutes is None:
        steps = 100_000  # the paper's
    if steps is not None and steps < 1 or minutes is not None and minutes <= 0:
        raise UsageError("--steps and --minutes must be positive")
    if dev_sentences is not None and dev_sentences < 1:
        raise UsageError(f"--dev-sentences must be positive, got {dev_sentences}")
    options = {**{f.name: f.default for f in dataclasses.fields(TrainConfig) if f.name not in PER_MACHINE},
               **DEFAULT_TRAIN, **train}
    TrainConfig.from_dict(options)  # validate now, not in a worker
    plan = Plan(str(Path(data).resolve()), scale or 1, steps, minutes, options, dev_sentences, backbone)
    for name in ROWS:
        plan.model_config(name)  # an impossible scale fails here
    out.mkdir(parents=True, exist_ok=True)  # only now: a refused start leaves no folder behind
    files.write_json(out / PLAN, dataclasses.asdict(plan))
    return plan


def _check_data(data: Path) -> None:
    from aiayn.data import has_split, load_split

    if not (data / META_FILE).is_file():
        raise DataError(f"{data} is not a prepared-data directory (no meta.json); run `aiayn prepare` first")
    if not has_split(data, "valid") or load_split(data, "valid").text_paths is None:
        raise DataError(f"{data} has no dev (valid) split with its text; Table 3 scores every row on it: prepare "
                        "the data with --valid-src and --valid-tgt")


def set_steps(out: Path, plan: Plan, steps: int) -> Plan:
    """The plan with its step count chosen (by --minutes' calibration), saved."""
    plan = dataclasses.replace(plan, steps=steps)
    files.write_json(Path(out) / PLAN, dataclasses.asdict(plan))
    return plan


# ---------------------------------------------------------------------------------------------------------
# OUT/<row>/: the row's run, its result, its training time.


def run_dir(out: Path, name: str) -> Path:
    return Path(out) / name / "run"


def finished(out: Path, name: str) -> bool:
    return (Path(out) / name / RESULT).is_file()


def read_result(out: Path, name: str) -> dict[str, Any]:
    return json.loads((Path(out) / name / RESULT).read_text(encoding="utf-8"))


def trained_steps(out: Path, name: str) -> int:
    """The step of the row's newest resumable checkpoint (0 if none)."""
    run = run_dir(out, name)
    last = RunDir(run).latest(resumable=True) if run.is_dir() else None
    return int(last.stem.removeprefix("step_")) if last else 0


def dev_curve(out: Path, name: str) -> list[dict[str, float]]:
    """The row's dev perplexity at each checkpoint its training saved ({"step", "dev_ppl"}, by step; the last entry
    logged for a step wins), from OUT/<row>/run/log.jsonl; [] if it has none."""
    run = run_dir(out, name)
    if not RunDir(run).log_path.is_file():
        return []
    points = {r["step"]: r["ppl"] for r in RunDir(run).log if r.get("kind") == "valid"}
    return [{"step": step, "dev_ppl": ppl} for step, ppl in sorted(points.items())]


def read_time(out: Path, name: str) -> dict[str, Any]:
    path = Path(out) / name / TIME
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"train_s": 0.0, "wall_s": 0.0,
                                                                                 "calls": 0}


def add_time(out: Path, name: str, wall_s: float, train_s: float) -> None:
    """Accumulate the row's training time over the calls that trained it (each call adds its own)."""
    t = read_time(out, name)
    files.write_json(Path(out) / name / TIME, {"train_s": t["train_s"] + train_s, "wall_s": t["wall_s"] + wall_s,
                                               "calls": t["calls"] + 1})
