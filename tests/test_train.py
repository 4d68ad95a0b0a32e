"""Training: the schedule by hand, exact resume after SIGKILL,
DDP (2 processes) equals one process with update-freq 2, and a tiny model learns the task."""

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO

from aiayn import rundir
from aiayn.config import ModelConfig
from aiayn.progress import TrainingProgress as Progress
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt
from aiayn.training.train import TrainConfig, anneal_factor, noam_lr, train


def test_noam_lr_values():
    # 512^-0.5 * min(step^-0.5, step * 4000^-1.5)
    assert noam_lr(1, 512) == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-12)
    assert noam_lr(1, 512) == pytest.approx(1.7469e-7, rel=1e-4)
    assert noam_lr(4000, 512) == pytest.approx(6.9877e-4, rel=1e-4)  # the peak: both branches meet
    assert noam_lr(100_000, 512) == pytest.approx(1.39754e-4, rel=1e-4)
    assert noam_lr(2000, 512) == pytest.approx(noam_lr(4000, 512) / 2, rel=1e-12)  # linear warm-up
    assert noam_lr(16000, 512) == pytest.approx(noam_lr(4000, 512) / 2, rel=1e-12)  # inverse-sqrt decay
    assert noam_lr(4000, 512, factor=2.0) == pytest.approx(2 * noam_lr(4000, 512))
    assert noam_lr(4000, 1024) == pytest.approx(noam_lr(4000, 512) / math.sqrt(2))


def test_anneal_factor_values():
    tc = TrainConfig(max_steps=1000, max_minutes=10, anneal=0.25)
    assert anneal_factor(1, 0.0, tc) == 1.0
    assert anneal_factor(750, 0.0, tc) == pytest.approx(1.0)  # the last quarter starts here
    assert anneal_factor(875, 0.0, tc) == pytest.approx(0.5)
    assert anneal_factor(100, 525.0, tc) == pytest.approx(0.5)  # by time: 8.75 of 10 minutes
    assert anneal_factor(100, 600.0, tc) == 0.0 and anneal_factor(1000, 0.0, tc) == 0.0
    assert anneal_factor(999, 0.0, TrainConfig(max_steps=1000)) == 1.0  # off by default: the paper's schedule
    with pytest.raises(ValueError, match="anneal must be"):
        TrainConfig(anneal=1.0)


def test_anneal_reaches_zero_at_max_steps(copy_data, tmp_path):
    tc = TrainConfig(max_steps=20, max_tokens=400, warmup=40, anneal=0.5, save_every_minutes=0, log_every=1,
                     threads=1)
    train(copy_data, tmp_path / "run", ModelConfig.preset("tiny"), tc, progress=False)
    lrs = {r["step"]: r["lr"] for r in map(json.loads, (tmp_path / "run" / "log.jsonl").read_text().splitlines())
           if r["kind"] == "train"}
    d_model = ModelConfig.preset("tiny").d_model
    for step in (1, 5, 10, 15, 20):  # full rate until step 10, then falling linearly to 0 at step 20
        want = noam_lr(step, d_model, 40) * min(1.0, (1 - step / 20) / 0.5)
        assert lrs[step] == pytest.approx(want, rel=1e-9), step
    assert lrs[20] == 0.0 and lrs[10] == pytest.approx(noam_lr(10, d_model, 40))


def test_progress_in_a_log_is_plain_lines_every_interval(capsys, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("aiayn.progress.time.time", lambda: clock[0])
    log = Progress(TrainConfig(max_minutes=12), step=0, enabled=True, plain_every=60, terminal=False)
    assert log.bar is None
    for second in range(0, 181, 10):  # a figure every 10 s for 3 minutes: a line once a minute
        clock[0] = 1000.0 + second
        log.update(second, step=second, loss="2.500", tok_s="9000")
    log.update(190)  # no new figures (not a logging step): no line
    log.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"train: {s}/720 s, step {s}, loss 2.500, tok_s 9000" for s in (60, 120, 180)]
    by_steps = Progress(TrainConfig(max_steps=500), step=0, enabled=True, plain_every=0, terminal=False)
    by_steps.update(1.0, step=10, loss="9.000")
    assert capsys.readouterr().out == "train: 10/500 steps, loss 9.000\n"
    quiet = Progress(TrainConfig(max_minutes=12), step=0, enabled=False, plain_every=0, terminal=False)
    quiet.update(5.0, step=1, loss="9.000")  # --no-progress: nothing
    assert capsys.readouterr().out == ""
    bar = Progress(TrainConfig(max_minutes=12), step=0, enabled=True, terminal=True)
    assert bar.bar is not None and bar.plain_every is None  # a terminal gets the bar
    bar.close()


def test_train_config_rejects_unknown_option():
    with pytest.raises(ValueError, match="unknown training options"):
        TrainConfig.from_dict({"max_step": 5})


def _weights(path: Path) -> dict:
    state, _, _ = ckpt.load_weights(path)
    return state


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "aiayn", *args]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


TINY_ARGS = ["--preset", "tiny", "--max-tokens", "160", "--save-every-minutes", "0", "--no-progress",
             "--threads", "1", "--log-every", "5", "--warmup", "50", "--lr-factor", "2"]


def test_resume_after_sigkill_is_bit_exact(copy_data, tmp_path):
    steps = "120"
    ref = tmp_path / "ref"
    subprocess.run(_cli("train", "--data", str(copy_data), "--out", str(ref), "--max-steps", steps,
                        "--save-every-steps", "10", *TINY_ARGS), check=True, env=_env(), capture_output=True)

    run = tmp_path / "killed"
    proc = subprocess.Popen(_cli("train", "--data", str(copy_data), "--out", str(run), "--max-steps", steps,
                                 "--save-every-steps", "10", *TINY_ARGS), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not RunDir(run).step(30).exists():
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = RunDir(run).checkpoints
    assert done and int(done[-1].stem.split("_")[1]) < int(steps), "the run finished before it could be killed"

    subprocess.run(_cli("train", "--resume", str(run), "--no-progress"), check=True, env=_env(),
                   capture_output=True)
    final_ref = _weights(RunDir(ref).step(int(steps)))
    final = _weights(RunDir(run).step(int(steps)))
    assert final.keys() == final_ref.keys()
    for k in final:
        assert torch.equal(final[k], final_ref[k]), k


def test_two_processes_equal_one_process_with_update_freq_2(copy_data, tmp_path):
    common = ["--max-steps", "6", "--save-every-steps", "6", "--set", "dropout=0.0", *TINY_ARGS]
    one = tmp_path / "one"
    subprocess.run(_cli("train", "--data", str(copy_data), "--out", str(one), "--update-freq", "2", *common),
                   check=True, env=_env(), capture_output=True)
    two = tmp_path / "two"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "aiayn", "train", "--data", str(copy_data), "--out", str(two), *common]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    a, b = _weights(RunDir(one).step(6)), _weights(RunDir(two).step(6))
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-5, worst


def test_tiny_model_learns_and_run_dir_is_self_contained(copy_data, tmp_path):
    cfg = ModelConfig.preset("tiny", dropout=0.0)
    tc = TrainConfig(max_steps=150, max_tokens=400, warmup=40, lr_factor=0.5, save_every_steps=50,
                     save_every_minutes=0, log_every=10, keep_last=2, threads=1)
    summary = train(copy_data, tmp_path / "run", cfg, tc, progress=False)
    assert summary["step"] == 150
    run = tmp_path / "run"
    logs = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    train_losses = [r["loss"] for r in logs if r["kind"] == "train"]
    dev = [r for r in logs if r["kind"] == "valid"]
    assert train_losses[-1] < 0.5 * train_losses[0]
    assert len(dev) == 3 and dev[-1]["ppl"] < dev[0]["ppl"]
    assert [p.name for p in RunDir(run).checkpoints] == ["step_00000100.safetensors", "step_00000150.safetensors"]
    assert (run / "vocab.model").is_file() and (run / "config.json").is_file() and (run / rundir.BEST).is_file()
    model, vocab, loaded_cfg = rundir.load_for_inference(run)
    assert loaded_cfg.vocab_size == len(vocab) and not model.training
    assert (run / "tb").is_dir()
    from aiayn.viz.curves import plot_run

    assert plot_run(run).stat().st_size > 1000


# ---------------------------------------------------------------------------------------------------------
# fp16: autocast with dynamic loss scaling (CPU autocast runs float16 matmuls, so all of it is tested here).


def _train_records(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def test_fp16_tiny_model_learns_the_copy_task(copy_data, tmp_path):
    tc = TrainConfig(max_steps=100, max_tokens=400, warmup=40, lr_factor=0.5, save_every_minutes=0, log_every=10,
                     threads=1, dtype="fp16")
    train(copy_data, tmp_path / "run", ModelConfig.preset("tiny", dropout=0.0), tc, progress=False)
    recs = _train_records(tmp_path / "run")
    assert recs[-1]["step"] == 100 and recs[-1]["loss"] < 0.5 * recs[0]["loss"]
    assert all(r["loss_scale"] == 65536.0 and r["overflow_skips"] == 0 for r in recs)  # torch's initial scale kept


class _OverflowAt:
    """TrainingObjective whose loss is made inf at chosen forward calls (1-based); it keeps a copy of the weights
    each call saw, so that a skipped update can be seen to leave them alone."""

    def __init__(self, monkeypatch, at: set[int]):
        import aiayn.training.train
        from aiayn.training.losses import TrainingObjective

        self.calls, self.seen = 0, []
        hook = self

        class Objective(TrainingObjective):
            def forward(self, *a, **k):
                hook.calls += 1
                hook.seen.append({n: p.detach().clone() for n, p in self.model.named_parameters()})
                loss, nll = super().forward(*a, **k)
                return (loss * math.inf if hook.calls in at else loss), nll

        monkeypatch.setattr(aiayn.training.train, "TrainingObjective", Objective)


def test_fp16_overflow_is_skipped_counted_and_does_not_advance_the_schedule(copy_data, tmp_path, monkeypatch):
    hook = _OverflowAt(monkeypatch, at={4})
    d_model, warmup = ModelConfig.preset("tiny").d_model, 40
    tc = TrainConfig(max_steps=8, max_tokens=400, warmup=warmup, save_every_minutes=0, log_every=1, threads=1,
                     dtype="fp16")
    summary = train(copy_data, tmp_path / "run", ModelConfig.preset("tiny"), tc, progress=False)
    assert summary["step"] == 8 and hook.calls == 9  # 8 updates applied, one skipped
    before, after = hook.seen[3], hook.seen[4]  # the weights the 4th (overflowed) call saw, and the 5th
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert not all(torch.equal(hook.seen[2][n], before[n]) for n in before)  # an applied update does change them
    recs = _train_records(tmp_path / "run")
    assert [r["step"] for r in recs] == list(range(1, 9))  # no step logged twice, none missing
    assert [r["overflow_skips"] for r in recs] == [0, 0, 0] + [1] * 5
    assert [r["loss_scale"] for r in recs] == [65536.0] * 3 + [32768.0] * 5
    for r in recs:  # the schedule counts applied updates: step 4's rate is the one the skipped update would have had
        assert r["lr"] == noam_lr(r["step"], d_model, warmup) and math.isfinite(r["loss"])


def test_fp16_resume_equals_the_uninterrupted_run(copy_data, tmp_path, monkeypatch):
    from aiayn.training.train import resume

    cfg = ModelConfig.preset("tiny")
    tc = TrainConfig(max_steps=12, max_tokens=400, warmup=40, save_every_steps=6, save_every_minutes=0, log_every=3,
                     threads=1, dtype="fp16")
    _OverflowAt(monkeypatch, at={3})  # a scale that is not the initial one must survive the resume
    train(copy_data, tmp_path / "ref", cfg, tc, progress=False)
    _OverflowAt(monkeypatch, at={3})
    train(copy_data, tmp_path / "run", cfg, dataclasses.replace(tc, max_steps=6), progress=False)
    _OverflowAt(monkeypatch, at=set())
    assert resume(tmp_path / "run", progress=False, max_steps=12)["step"] == 12

    path_ref = RunDir(tmp_path / "ref").step(12)
    path = RunDir(tmp_path / "run").step(12)
    ref, got = _weights(path_ref), _weights(path)
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    scaler_ref, scaler = ckpt.load_trainer_state(path_ref)["scaler"], ckpt.load_trainer_state(path)["scaler"]
    assert scaler == scaler_ref and scaler["scale"] == 32768.0 and scaler["_growth_tracker"] == 10
    assert _train_records(tmp_path / "run")[-1]["overflow_skips"] == 1


def test_fp16_on_a_device_without_it_is_one_usage_error():
    from aiayn.errors import UsageError
    from aiayn.runtime import resolve_dtype

    with pytest.raises(UsageError, match="--dtype fp16 .* runs on CUDA GPUs, not on mps; use --dtype fp32"):
        resolve_dtype("fp16", torch.device("mps"))
