"""Which models a server serves and the language pair of each (docs/serving.md "Many pairs, one server"): the
catalogue `aiayn serve` builds from --checkpoint (repeated) and --models, one entry per model; a server of one
model is a catalogue of one.

A model's pair is, first found: the one named (--checkpoint SRC:TGT=PATH); --source-lang/--target-lang, which name
the pair of a catalogue's only model; the one recorded with the model (its run's config.json or prepared data, its
import, its CTranslate2 export, an Argos package's metadata: aiayn.data.folder.run_languages); under --models, the
subfolder's name (en-es); for a catalogue's only model, the paper's English -> German. Anything else is a
ValueError saying what to name.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aiayn.data.folder import run_languages
from aiayn.errors import DataError
from aiayn.serve.libre import LanguagePair

MODEL_ARG = re.compile(r"([A-Za-z][A-Za-z0-9_-]*):([A-Za-z][A-Za-z0-9_-]*)=(.+)")
PAIR_FOLDER = re.compile(r"([a-z]{2,3})[-_]([a-z]{2,3})")  # models/en-es: a folder named by its pair
PAPER_PAIR = ("en", "de")


@dataclass(frozen=True)
class Listed:
    """One model of the catalogue: its pair, its path, and where the pair comes from (for the banner)."""

    pair: LanguagePair
    path: str
    said: str


def model_arg(text: str) -> tuple[tuple[str, str] | None, str]:
    """--checkpoint's value: ((source, target) or None, the path): "en:es=runs/a" names the pair, "runs/a" not."""
    found = MODEL_ARG.fullmatch(text)
    return ((found[1], found[2]), found[3]) if found else (None, text)


def build_catalog(checkpoints: Sequence[str], folder: Path | None = None, source_lang: str | None = None,
                  target_lang: str | None = None) -> list[Listed]:
    """The catalogue of `aiayn serve --checkpoint ... --models FOLDER --source-lang --target-lang` (module
    docstring); a DataError for a path missing, a ValueError for a model whose languages nothing says, or two
    models of one pair."""
    given = [model_arg(text) for text in checkpoints]
    found = _folder_models(folder) if folder is not None else []
    alone = len(given) + len(found) == 1
    if (source_lang or target_lang) and not (alone and given):
        raise ValueError("--source-lang/--target-lang name the languages of one model; for several, name each "
                         "model's pair: --checkpoint SRC:TGT=PATH")
    listed = []
    for named, path in given:
        if not Path(path).exists():
            raise DataError(f"--checkpoint {path}: no such file or folder")
        listed.append(_pair_of(named, path, source_lang, target_lang, alone))
    listed += found
    seen: dict = {}
    for model in listed:
        key = (model.pair.source, model.pair.target)
        if key in seen:
            raise ValueError(f"two models translate {model.pair}: {seen[key]} and {model.path}; serve one (or name "
                             "another pair: --checkpoint SRC:TGT=PATH)")
        seen[key] = model.path
    return listed


def _pair_of(named: tuple[str, str] | None, path: str, source: str | None, target: str | None, alone: bool) -> Listed:
    """A --checkpoint's entry: its pair named, else the flags (filled from the record), else recorded, else the
    paper's for a catalogue's only model."""
    if named:
        return Listed(LanguagePair(*named), path, "--checkpoint SRC:TGT=PATH")
    recorded = run_languages(path)
    if not recorded and not alone:
        raise ValueError(f"--checkpoint {path}: its run records no languages; name them: --checkpoint "
                         f"SRC:TGT={path} (e.g. en:es={path})")
    default = recorded or PAPER_PAIR
    said = ("--source-lang/--target-lang" if source and target else "recorded with the model" if recorded else
            "not recorded by the run's data: the default; --source-lang/--target-lang name others")
    return Listed(LanguagePair(source or default[0], target or default[1]), path, said)


def _folder_models(folder: Path) -> list[Listed]:
    """--models FOLDER: each model folder (or .argosmodel file) in it, its pair recorded or in its name; a folder
    with neither is skipped with a warning."""
    if not folder.is_dir():
        raise ValueError(f"--models {folder}: no such folder")
    found = []
    for path in sorted(p for p in folder.iterdir() if (p.is_dir() or p.suffix == ".argosmodel")
                       and not p.name.startswith(".")):
        named = PAIR_FOLDER.fullmatch(path.name)
        languages = run_languages(path) or (named and (named[1], named[2]))
        if not languages:
            print(f"warning: --models: {path} is skipped: its run records no languages and its name is not a pair "
                  "(name the folder SRC-TGT, e.g. en-es)", file=sys.stderr, flush=True)
            continue
        found.append(Listed(LanguagePair(*languages), str(path), "recorded" if run_languages(path) else
                            "the folder's name"))
    if not found:
        raise ValueError(f"--models {folder}: no model folder in it (one folder per model: a run directory, named by "
                         "its pair where its run records none, e.g. en-es)")
    return found
