"""Fine-tuning (`aiayn train --init-from`): the parent's weights really are the start (the first forward sees them,
the first loss is the parent's level, not a fresh model's), Adam and the schedule start afresh, config.json names the
parent, the run resumes exactly (also before its first checkpoint: from the parent again), and another vocabulary or
a missing parent is one clear line."""

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from conftest import write_copy_corpus

from aiayn import files, rundir
from aiayn.cli import main
from aiayn.config import ModelConfig
from aiayn.errors import CheckpointError, DataError
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt
from aiayn.training.train import TrainConfig, noam_lr, resume, train

CFG = ModelConfig.preset("tiny", dropout=0.0)
TUNE = TrainConfig(max_steps=6, max_tokens=400, warmup=10, lr_factor=0.3, save_every_steps=3, save_every_minutes=0,
                   log_every=1, threads=1, seed=7)


@pytest.fixture(scope="module")
def parent(copy_data, tmp_path_factory) -> Path:
    """A run that has learnt the copy task a little (dev loss well below a fresh model's ~ln 120)."""
    run = tmp_path_factory.mktemp("parent") / "run"
    tc = TrainConfig(max_steps=120, max_tokens=400, warmup=40, lr_factor=0.5, save_every_steps=60,
                     save_every_minutes=0, log_every=10, threads=1)
    train(copy_data, run, CFG, tc, progress=False)
    return run


def _train_records(run: Path) -> list[dict]:
    return [r for r in RunDir(run).log if r["kind"] == "train"]


def _first_forward_weights(monkeypatch) -> list:
    """Patches the training objective to keep a copy of the weights its first forward saw."""
    import aiayn.training.train
    from aiayn.training.losses import TrainingObjective

    seen = []

    class Objective(TrainingObjective):
        def forward(self, *a, **k):
            if not seen:
                seen.append({n: p.detach().clone() for n, p in self.model.named_parameters()})
            return super().forward(*a, **k)

    monkeypatch.setattr(aiayn.training.train, "TrainingObjective", Objective)
    return seen


def test_finetune_starts_from_the_parents_weights_with_a_fresh_optimizer(copy_data, parent, tmp_path, monkeypatch):
    seen = _first_forward_weights(monkeypatch)
    train(copy_data, tmp_path / "tuned", CFG, TUNE, progress=False, init_from=parent)
    best = ckpt.load_weights(parent / rundir.BEST)[0]  # a run's averaged, else best, else newest checkpoint
    assert all(torch.equal(seen[0][n], best[n]) for n in seen[0])

    fresh = train(copy_data, tmp_path / "fresh", CFG, TUNE, progress=False)
    assert fresh["step"] == 6
    parent_dev = [r["loss"] for r in RunDir(parent).log if r["kind"] == "valid"][-1]
    first, first_fresh = _train_records(tmp_path / "tuned")[0], _train_records(tmp_path / "fresh")[0]
    assert first_fresh["loss"] > 0.8 * math.log(120) and first["loss"] < 1.3 * parent_dev < 0.5 * first_fresh["loss"]
    # A fresh schedule (step 1 of the new warm-up and factor) and a fresh Adam: 3 steps at the first checkpoint.
    assert first["lr"] == noam_lr(1, CFG.d_model, TUNE.warmup, TUNE.lr_factor)
    adam = ckpt.load_trainer_state(RunDir(tmp_path / "tuned").step(3))["optimizer"]["state"]
    assert {float(s["step"]) for s in adam.values()} == {3.0}
    parent_adam = ckpt.load_trainer_state(RunDir(parent).latest())["optimizer"]["state"]
    assert {float(s["step"]) for s in parent_adam.values()} == {120.0}

    record = json.loads((tmp_path / "tuned" / rundir.CONFIG).read_text())["parent"]
    best_step = int(ckpt.read_header(parent / rundir.BEST)[0]["step"])
    assert record == {"checkpoint": str((parent / rundir.BEST).resolve()), "step": best_step,
                      "sha256": files.sha256_file(parent / rundir.BEST)}
    assert "parent" not in json.loads((tmp_path / "fresh" / rundir.CONFIG).read_text())


def test_finetune_resumes_exactly_also_before_its_first_checkpoint(copy_data, parent, tmp_path):
    tc = dataclasses.replace(TUNE, max_steps=12, save_every_steps=3, seed=3)
    cfg = CFG.replace(dropout=0.2)  # dropout may change: masks must be reproduced on resume too
    train(copy_data, tmp_path / "ref", cfg, tc, progress=False, init_from=parent)
    train(copy_data, tmp_path / "run", cfg, dataclasses.replace(tc, max_steps=6), progress=False, init_from=parent)
    assert resume(tmp_path / "run", progress=False, max_steps=12)["step"] == 12
    # A run stopped before its first checkpoint starts again from its parent (not from a random model).
    train(copy_data, tmp_path / "early", cfg, dataclasses.replace(tc, max_steps=3), progress=False, init_from=parent)
    shutil.rmtree(tmp_path / "early" / rundir.CHECKPOINT_DIR)
    (tmp_path / "early" / rundir.LOG).unlink()
    assert resume(tmp_path / "early", progress=False, max_steps=12)["step"] == 12
    ref = ckpt.load_weights(RunDir(tmp_path / "ref").step(12))[0]
    for run in ("run", "early"):
        got = ckpt.load_weights(RunDir(tmp_path / run).step(12))[0]
        assert all(torch.equal(ref[k], got[k]) for k in ref), run


def test_another_vocabulary_or_a_missing_parent_is_one_clear_line(copy_data, parent, tmp_path, capsys):
    from aiayn.data import prepare

    other = write_copy_corpus(tmp_path / "raw", 200, seed=9)
    prepare(*other, tmp_path / "own_vocab", vocab_size=100, valid=write_copy_corpus(tmp_path / "raw", 20, seed=10))
    ours = files.sha256_file(parent / "vocab.model")[:12]
    theirs = files.sha256_file(tmp_path / "own_vocab" / "vocab.model")[:12]
    with pytest.raises(DataError) as e:
        train(tmp_path / "own_vocab", tmp_path / "bad", CFG, TUNE, progress=False, init_from=parent)
    assert ours in str(e.value) and theirs in str(e.value) and "aiayn prepare --vocab" in str(e.value)
    assert "\n" not in str(e.value) and not (tmp_path / "bad").exists()

    argv = ["train", "--data", str(tmp_path / "own_vocab"), "--out", str(tmp_path / "bad"), "--no-progress"]
    assert main([*argv, "--init-from", str(tmp_path / "no_such_run")]) == 1
    err = capsys.readouterr().err
    assert err == f"error: --init-from {tmp_path / 'no_such_run'}: no such run directory or checkpoint file\n"
    assert main([*argv, "--init-from", str(parent), "--preset", "tiny"]) == 2
    assert "drop the preset" in capsys.readouterr().err
    same_vocab = ["train", "--data", str(copy_data), "--out", str(tmp_path / "bad"), "--max-steps", "1"]
    assert main([*same_vocab, "--init-from", str(parent), "--set", "d_ff=128"]) == 2
    assert "d_ff cannot change (only dropout, label_smoothing may" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match="is a prepared-data directory, not a run directory"):
        train(copy_data, tmp_path / "bad", CFG, TUNE, progress=False, init_from=copy_data)

    # The remedy the error gives works: the new text prepared with the parent's vocabulary fine-tunes.
    prepare(*other, tmp_path / "parent_vocab", vocab=parent / "vocab.model")
    assert main(["train", "--data", str(tmp_path / "parent_vocab"), "--out", str(tmp_path / "ok"), "--init-from",
                 str(parent), "--max-steps", "2", "--max-tokens", "400", "--threads", "1", "--no-progress",
                 "--set", "dropout=0.3"]) == 0
    saved = json.loads((tmp_path / "ok" / rundir.CONFIG).read_text())
    assert saved["model"] == CFG.replace(dropout=0.3, vocab_size=120).to_dict() and saved["parent"]["step"] is not None
