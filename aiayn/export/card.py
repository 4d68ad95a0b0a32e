"""What every exported folder carries besides weights: where the model came from, and a README model card.

`Provenance` is read from an aiayn checkpoint (its run directory's config.json and the prepared data's meta.json,
when they exist); `write_card` turns it into the README.md of an HF or CTranslate2 folder. Both exporters also
write their folders through `fresh_folder`, so a failed export never leaves half a folder where OUT should be.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiayn.config import ModelConfig
from aiayn.data.folder import META_FILE, read_meta
from aiayn.errors import UserError
from aiayn.files import commit_folder, write_text
from aiayn.rundir import RunDir


@dataclass
class Provenance:
    """Where an exported model came from (all optional: a model built in memory has none of it)."""

    checkpoint: str = ""  # the checkpoint file exported
    step: int | None = None  # training step of that checkpoint
    data: dict = field(default_factory=dict)  # prepared-data summary: path, pairs, vocabulary size
    bleu: str = ""  # a measured score to quote, e.g. "38.1 sacreBLEU on Multi30k test_2016_flickr"


def provenance(checkpoint: Path, bleu: str = "") -> Provenance:
    """Provenance of a checkpoint file: its step (safetensors metadata) and its run's data (config.json)."""
    from safetensors import safe_open

    with safe_open(str(checkpoint), framework="pt") as f:
        meta = f.metadata() or {}
    prov = Provenance(str(checkpoint), int(meta["step"]) if "step" in meta else None, bleu=bleu)
    for folder in Path(checkpoint).resolve().parents[:2]:  # RUN/x.safetensors or RUN/checkpoints/step_N.safetensors
        if RunDir(folder).is_run:
            data_dir = RunDir(folder).data
            prov.data = {"path": str(data_dir)}
            if (data_dir / META_FILE).is_file():  # the data may have moved since: then only its path is known
                meta_json = read_meta(data_dir)
                train = meta_json["splits"].get("train", {})
                prov.data.update(pairs=train.get("kept"), vocab_size=meta_json["vocab_size"])
            break
    return prov


def write_card(folder: Path, cfg: ModelConfig, prov: Provenance, target: str, usage: str, notes: str,
               weights: str = "float32") -> None:
    """README.md: what the model is, what it was trained on, how well it does, its config, how to use it.
    target: "hf" or "ct2"; weights: how the weights are stored (a CTranslate2 quantization, or float32)."""
    data = prov.data
    data_line = "not recorded (the model was exported from memory)"
    if data:
        data_line = f"`{Path(data['path']).name}` (prepared by `aiayn prepare`"
        if data.get("pairs"):
            data_line += f"; {data['pairs']:,} training pairs, shared vocabulary of {data['vocab_size']:,} pieces"
        data_line += ")"
    step = f", step {prov.step:,}" if prov.step is not None else ""
    bleu = prov.bleu or ("not measured at export; measure with `aiayn translate` on the test set and sacreBLEU "
                         "(docs/export.md)")
    config_rows = "\n".join(f"| `{k}` | {v} |" for k, v in cfg.to_dict().items())
    text = f"""---
library_name: {"transformers" if target == "hf" else "ctranslate2"}
tags: [translation, aiayn, transformer]
---
# aiayn Transformer ({"HF transformers MarianMTModel" if target == "hf" else "CTranslate2"}, {weights} weights)

The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), trained with aiayn and exported by
`aiayn export --to {target}`. The weights are aiayn's, rearranged, not retrained: in float32 this model gives
the aiayn model's log-probabilities, and with the same search settings its translations (aiayn's
tests/test_export.py checks both).

- Checkpoint: `{Path(prov.checkpoint).name or "in memory"}`{step}
- Training data: {data_line}
- BLEU: {bleu}

## How to use

{usage}

## Decoding: what differs from `aiayn translate`

{notes}

## Model config (aiayn `ModelConfig`)

| field | value |
|---|---|
{config_rows}
"""
    write_text(folder / "README.md", text)


def check_fresh(out: Path) -> None:
    """Refuse an output folder that holds files (before anything long is done for it)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} already exists and is not an empty folder; remove it or choose another output folder")


@contextmanager
def fresh_folder(out: Path) -> Iterator[Path]:
    """Yield a temporary folder beside `out`; on success rename it to `out` (aiayn.files.commit_folder: a kill leaves
    no half-written `out`). Refuses an `out` that holds files."""
    out = Path(out)
    check_fresh(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would hide the model from other users
    try:
        yield tmp
        if out.exists():
            out.rmdir()
        commit_folder(tmp, out)  # every file fsynced, then the folder renamed into place
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
