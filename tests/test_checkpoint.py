"""Checkpoints: averaging is the mean, a corrupt or missing file is a clear error."""

import pytest
import torch

from aiayn import checkpoint as ckpt
from aiayn.config import ModelConfig


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
