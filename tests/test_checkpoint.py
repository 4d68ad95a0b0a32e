"""Checkpoints: averaging is the mean, a corrupt or missing file is a clear error, and what a checkpoint says about
itself (its config) is validated against its tensors before any is allocated."""

import json
import shutil

import pytest
import torch
from helpers import save_run, tiny_model
from safetensors.torch import load_file, safe_open, save_file

from aiayn import rundir
from aiayn.config import ModelConfig
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt


def test_average_two_checkpoints_is_their_mean(tmp_path):
    cfg = ModelConfig.preset("tiny", vocab_size=40)
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([[0.5]])}
    b = {"w": torch.tensor([3.0, -2.0]), "b": torch.tensor([[1.5]])}
    ckpt.save_weights(tmp_path / "a.safetensors", a, cfg, 1)
    ckpt.save_weights(tmp_path / "b.safetensors", b, cfg, 2)
    avg, avg_cfg = ckpt.average_checkpoints([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])
    assert avg_cfg == cfg
    torch.testing.assert_close(avg["w"], torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(avg["b"], torch.tensor([[1.0]]))


def test_corrupt_checkpoint_gives_clear_error(tmp_path):
    bad = tmp_path / "step_00000001.safetensors"
    bad.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ckpt.CheckpointError, match="corrupt"):
        ckpt.load_weights(bad)
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint"):
        ckpt.load_weights(tmp_path / "missing.safetensors")


@pytest.mark.parametrize("change, says", [
    ({"n_experts": 8}, "unknown model config fields"),
    ({"max_positions": 10**9}, "max_positions must lie in"),  # a 10^9 x d_model sinusoid table is never built
    ({"vocab_size": 10**12}, "vocab_size must lie in"),
    ({"n_heads": "4"}, "n_heads must be an integer"),
    ({"dropout": float("nan")}, "dropout must lie in"),
    ({"d_model": 64}, r"does not match the model its config describes: \d+ tensors of another shape"),
    ({"n_dec_layers": 1}, "unexpected"),
    ({"n_dec_layers": 3}, "missing"),
])
def test_checkpoint_config_is_untrusted_input(copy_data, tmp_path, change, says):
    run = save_run(tiny_model(120), copy_data / "vocab.model", tmp_path / "run")
    path = RunDir(run).checkpoints[-1]
    state = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    bad = tmp_path / "bad" / "model.safetensors"
    bad.parent.mkdir()
    shutil.copyfile(copy_data / "vocab.model", bad.parent / "vocab.model")
    save_file(state, str(bad), metadata={**meta, "config": json.dumps({**json.loads(meta["config"]), **change})})
    with pytest.raises(ckpt.CheckpointError, match=says):
        rundir.load_for_inference(bad)
    model, _, _ = rundir.load_for_inference(path)  # the untouched file loads
    assert torch.equal(model.state_dict()["embedding.weight"], state["embedding.weight"])


def test_loading_for_inference_leaves_torch_compile_unimported(copy_data, tmp_path):
    """`aiayn translate`'s start: importing aiayn and loading a run (its shapes checked on the meta device) must not
    import torch.compile's machinery (torch._dynamo: about a second of every command's start)."""
    import subprocess
    import sys

    from helpers import REPO, save_run, tiny_model

    from aiayn.data import Vocab

    run = save_run(tiny_model(len(Vocab.load(copy_data / "vocab.model"))), copy_data / "vocab.model", tmp_path / "run")
    code = ("import sys\nfrom aiayn.decoding.translator import Translator\n"
            f"Translator.load({str(run)!r}, precision='fp32')\nprint('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("entry", ckpt.PRE_RELEASE_ENTRIES)
def test_a_pre_release_trainer_state_is_refused_naming_the_version_that_reads_it(tmp_path, entry):
    model = tiny_model(40)
    trainer = {"optimizer": {}, "sampler": {"epoch": 0, "position": 3}, "step": 3, "best_dev_loss": 1.0,
               "train_seconds": 2.0, "scaler": {}, "overflow_skips": 0,
               "early_stopping": {"best": 1.0, "best_step": 3, "evals_since_best": 0}}
    path = tmp_path / "step_00000003.safetensors"
    ckpt.save_checkpoint(path, model.state_dict(), model.cfg, 3, trainer)
    assert ckpt.load_trainer_state(path) == trainer
    ckpt.save_checkpoint(path, model.state_dict(), model.cfg, 3, {k: v for k, v in trainer.items() if k != entry})
    with pytest.raises(ckpt.CheckpointError, match=f"written by a pre-release aiayn \\(it has no {entry} entry\\).*"
                                                   "aiayn 0.1.0 at commit 6fa8d35"):
        ckpt.load_trainer_state(path)
    ckpt.save_checkpoint(path, model.state_dict(), model.cfg, 3, {**trainer, entry: "damaged"})
    with pytest.raises(ckpt.CheckpointError, match="lacks one of the optimizer"):
        ckpt.load_trainer_state(path)
