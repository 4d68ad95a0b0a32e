"""`--from PATH`: which of the paper's results a folder already holds, recognised by the files each command writes."""

from __future__ import annotations

import re
from pathlib import Path

from aiayn.data.folder import read_meta
from aiayn.errors import DataError, UsageError, UserError
from aiayn.experiments.table3.plan import PLAN, RESULT
from aiayn.experiments.table3.rows import ROWS
from aiayn.rundir import RunDir

KINDS = {
    "table1": "a Table 1 measurement (table1.json, from aiayn table1 --json)",
    "table3": f"a Table 3 study (aiayn variations --out: {PLAN} and <row>/{RESULT})",
    "parser": "a parser results folder (eval.log of aiayn evaluate --task parse, after '== NAME (...): COMMAND' lines)",
    "translation": "a translation run (aiayn train --out, or the folder of aiayn quickstart --out)",
}


def recognise(path: str | Path) -> tuple[str, Path]:
    """(kind, the folder or file to read) of a --from path; a UsageError naming what is recognised otherwise."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"--from {p}: no such file or folder")
    if p.is_file() and p.suffix == ".json":
        return "table1", p
    if (p / "table1.json").is_file():
        return "table1", p / "table1.json"
    if (p / PLAN).is_file() and any((p / row / RESULT).is_file() for row in ROWS):
        return "table3", p
    if (p / "eval.log").is_file():
        return "parser", p
    if RunDir(p).is_run:
        return "translation", p
    if RunDir(p / "run").is_run:  # a quickstart folder: run/ and data/
        return "translation", p / "run"
    raise UsageError(f"--from {p}: not a result folder aiayn paper recognises; give " + "; or ".join(KINDS.values()))


def recognise_all(paths: list[str | Path]) -> dict[str, Path]:
    """Every --from path by kind; one per kind."""
    found: dict[str, Path] = {}
    for path in paths:
        kind, where = recognise(path)
        if kind in found:
            raise UsageError(f"--from {path}: a second {kind} source (the first: {found[kind]}); give one per kind")
        found[kind] = where
    return found


_SYSTEM = re.compile(r"^== (?P<name>\S+) \((?P<seconds>[\d.]+) s to decode\): (?P<command>.*)$")
_SCORE = {"f1": re.compile(r"^parse F1\s+([\d.]+)"), "recall": re.compile(r"^Bracketing Recall\s+=\s+([\d.]+)"),
          "precision": re.compile(r"^Bracketing Precision\s+=\s+([\d.]+)"),
          "complete": re.compile(r"^Complete match\s+=\s+([\d.]+)")}


def parser_systems(folder: Path) -> list[dict]:
    """The systems scored in FOLDER/eval.log, in order: name, command, F1, recall, precision, complete match (the
    first of each score after the system's line: EVALB's summary repeats them for short sentences)."""
    systems: list[dict] = []
    for line in (folder / "eval.log").read_text(encoding="utf-8").splitlines():
        if m := _SYSTEM.match(line):
            systems.append({"name": m["name"], "command": m["command"], "decode_seconds": float(m["seconds"])})
        elif systems:
            for key, pattern in _SCORE.items():
                if key not in systems[-1] and (s := pattern.match(line)):
                    systems[-1][key] = float(s[1])
    systems = [s for s in systems if "f1" in s]
    if not systems:
        raise DataError(f"{folder / 'eval.log'} has no scored system ('== NAME (N s to decode): COMMAND' followed by "
                        "'parse F1 X')")
    return systems


def parser_runs(folder: Path) -> list[Path]:
    """The training runs kept in a parser results folder (sub-folders with config.json and log.jsonl)."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and RunDir(p).is_run)


def training_pairs(run: Path) -> int | None:
    """The training-set size a run's output reports ("3,500 training pairs"), else its prepared data's; None if
    neither is there."""
    for name in ("train.log", "worker.log"):
        if (run / name).is_file():
            with open(run / name, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if m := re.search(r"([\d,]+) training pairs", line):
                        return int(m[1].replace(",", ""))
    try:  # else the prepared data's count, if the data are still where the run was trained
        return read_meta(RunDir(run).data)["splits"]["train"]["kept"]
    except (UserError, OSError, KeyError):
        return None
