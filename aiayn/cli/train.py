"""`aiayn train` (a new run, or --resume one) and `aiayn plot` (its training curves)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from aiayn.cli.common import add_dataclass_args, add_progress_arg, given_fields, model_overrides
from aiayn.config import PRESETS, ModelConfig
from aiayn.errors import UsageError
from aiayn.extras import require
from aiayn.training.run import parent_checkpoint
from aiayn.training.train import FINE_TUNE_FIELDS, TrainConfig, resume, train, train_or_resume


def load_config_file(path: Path) -> dict[str, Any]:
    """A YAML or JSON file: {preset: NAME, model: {field: value}, train: {field: value}, data: DIR}, checked here so
    that a mistake in it is one line naming the file."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        if str(path).endswith((".yaml", ".yml")):
            import yaml

            cfg = yaml.safe_load(text) or {}
        else:
            cfg = json.loads(text)
    except Exception as e:  # yaml.YAMLError or json.JSONDecodeError: say which file
        raise UsageError(f"{path}: not valid {'YAML' if str(path).endswith(('.yaml', '.yml')) else 'JSON'}: "
                         f"{str(e).splitlines()[0]}") from None
    if not isinstance(cfg, dict) or not set(cfg) <= {"preset", "model", "train", "data"}:
        raise UsageError(f"{path}: expected a mapping with the sections preset, model, train, data")
    kinds = {"preset": str, "model": dict, "train": dict, "data": str}
    for key, value in cfg.items():
        if not isinstance(value, kinds[key]):
            raise UsageError(f"{path}: {key} must be a {'mapping' if kinds[key] is dict else 'string'}, got {value!r}")
    try:
        ModelConfig.preset(cfg.get("preset", "base"), **cfg.get("model", {}))
        TrainConfig.from_dict(cfg.get("train", {}))
    except UsageError as e:
        raise UsageError(f"{path}: {e}") from None
    return cfg


def train_command(args: argparse.Namespace) -> int:
    flags = given_fields(args, TrainConfig)  # every training flag given, so that resume refuses what it cannot honour
    if args.resume and args.resume_if_exists:
        raise UsageError("--resume-if-exists goes with the command that starts a run (--data, --out, ...) and "
                         "resumes it when it exists; --resume RUN continues an existing run: give one of them")
    if args.resume:
        given = [f for f in ("data", "out", "preset", "config", "set", "init_from") if getattr(args, f)]
        if given:
            raise UsageError("--resume continues a run as it was configured; drop "
                             + ", ".join("--" + f.replace("_", "-") for f in given))
        summary = resume(Path(args.resume), progress=not args.no_progress, **flags)
    else:
        file_cfg = load_config_file(args.config) if args.config else {}
        data = args.data or file_cfg.get("data")
        if not data or not args.out:
            raise UsageError("--data DIR and --out RUN_DIR are required (or --resume RUN_DIR)")
        model_over = {**file_cfg.get("model", {}), **model_overrides(args.set)}
        if args.init_from:  # the parent's model, but for the fields --set may change (train checks which)
            if args.preset or "preset" in file_cfg:
                raise UsageError("--init-from trains the parent's model further; drop the preset (--preset or the "
                                 "config file's preset section)")
            cfg = parent_checkpoint(Path(args.init_from))[1].replace(**model_over)
        else:
            cfg = ModelConfig.preset(args.preset or file_cfg.get("preset", "base"), **model_over)
        tc = TrainConfig.from_dict({**file_cfg.get("train", {}), **flags})
        start = train_or_resume if args.resume_if_exists else train
        summary = start(Path(data), Path(args.out), cfg, tc, progress=not args.no_progress,
                        init_from=Path(args.init_from) if args.init_from else None)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"{'stopped' if summary['interrupted_by'] else 'done'}: step {summary['step']} in "
              f"{summary['elapsed_s'] / 60:.1f} min; run directory {summary['run_dir']}")
    if summary["interrupted_by"] is not None:  # saved, but not done: say so to schedulers, as a shell would
        return 128 + summary["interrupted_by"]  # 130 for SIGINT (Ctrl-C), 143 for SIGTERM
    return 0


def plot(args: argparse.Namespace) -> int:
    require("aiayn plot", "viz")
    from aiayn.viz.curves import plot_run

    print(f"wrote {plot_run(args.run, args.output)}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="train a preset on a prepared-data directory (or resume a run)",
                       description="Train the Transformer with the paper's recipe. Example: aiayn train --data "
                       "data-bin/wmt14 --preset base --out runs/base; multi-GPU: torchrun --nproc_per_node 8 "
                       "-m aiayn train ...; continue: aiayn train --resume runs/base [--max-steps N] "
                       "[--max-minutes M] (only the stopping criteria may change on resume); fine-tune: aiayn "
                       "train --init-from runs/base --data data-bin/new --out runs/tuned. Ctrl-C or SIGTERM saves a "
                       "checkpoint and exits 130 or 143.")
    p.add_argument("--data", help="prepared-data directory (aiayn prepare)")
    p.add_argument("--out", help="new run directory")
    p.add_argument("--resume", help="continue this run directory exactly where it stopped; only --max-steps, "
                                    "--max-minutes and --no-progress may be given with it (any other training flag "
                                    "is refused: the run's config.json fixes them)")
    p.add_argument("--init-from", metavar="RUN|CHECKPOINT",
                   help="fine-tune: start from this run's weights (its averaged, else best, else newest checkpoint) "
                        "or this checkpoint file's, with a fresh optimizer and learning-rate schedule; --data must be "
                        "prepared with the parent's vocabulary (aiayn prepare --vocab RUN/vocab.model); the model is "
                        f"the parent's ({', '.join(FINE_TUNE_FIELDS)} may change with --set)")
    p.add_argument("--resume-if-exists", action="store_true",
                   help="with --data/--out: if --out is a run already, resume it instead of refusing (refused if it "
                        "was started with other options; only --max-steps and --max-minutes may change); else start "
                        "it. The one command to relaunch after a failure (torchrun --max-restarts, a preempted job)")
    p.add_argument("--preset", choices=list(PRESETS), help="model preset (default base)")
    p.add_argument("--config", help="YAML/JSON file with preset, model, train and data sections")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="override a model field, e.g. dropout=0.3")
    add_dataclass_args(p.add_argument_group("training options (TrainConfig)"), TrainConfig)
    add_progress_arg(p)
    p.set_defaults(func=train_command)

    pl = sub.add_parser("plot", help="plot the training curves of a run directory to a PNG")
    pl.add_argument("run", type=Path, help="run directory (its log.jsonl)")
    pl.add_argument("--output", type=Path, metavar="FILE", help="output image file (default RUN/curves.png)")
    pl.set_defaults(func=plot)
