"""Helpers the test modules share (fixtures are in conftest.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from aiayn import rundir
from aiayn.config import EOS_ID, ModelConfig
from aiayn.model import Transformer
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt
from aiayn.training.run import run_record

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"  # the real corpora (../shared), read by path; may be absent


def tiny_model(vocab_size: int, seed: int = 0, eos_bias: float = 0.0, **overrides) -> Transformer:
    """The `tiny` preset with random weights, in eval mode. eos_bias > 0 raises the EOS logit (a random model
    otherwise repeats its input until the length limit), so that output lengths vary."""
    torch.manual_seed(seed)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=vocab_size, **overrides)).eval()
    if eos_bias:
        with torch.no_grad():
            eos = model.embedding.weight[EOS_ID]
            model.decoder.layers[-1].sublayers[-1].norm.bias += eos_bias * eos / eos.dot(eos)
    return model


def save_run(model: Transformer, vocab_model: Path, run: Path, step: int = 10) -> Path:
    """A run directory holding `model` as its only step checkpoint, and the vocabulary: what `--checkpoint` takes."""
    ckpt.save_weights(RunDir(run).step(step), model.state_dict(), model.cfg, step)
    shutil.copyfile(vocab_model, run / "vocab.model")
    return run


def labelled_run(model: Transformer, copy_data: Path, folder: Path, languages: tuple[str, str]) -> Path:
    """A run of `model` whose config.json names prepared data recording `languages` (the copy task's test pairs,
    prepared again with the copy task's vocabulary): what `aiayn train --data` leaves."""
    from aiayn.data import prepare

    pair = (copy_data / "test.src.txt", copy_data / "test.tgt.txt")
    data = folder / "data"
    prepare(*pair, data, vocab=copy_data / "vocab.model", languages=languages)
    run = save_run(model, data / "vocab.model", folder / "run")
    record = run_record(model.cfg.to_dict(), {}, data, data / "vocab.model")
    (run / rundir.CONFIG).write_text(json.dumps(record))
    return run


CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def browser():
    """Headless Chromium driven by Selenium (skips where they are not installed)."""
    if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
        pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,1400"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
