"""The training step compiled (`aiayn train --compile`: Runtime.wrap(TrainingObjective, compile=True)) against the
eager one: the same losses at every step and the same weights after them, on the CPU (torch.compile's C++ backend;
on a GPU, benchmarks/gpu/peers.py --compile times the compiled step). Dropout is off: the compiled graph draws its
masks with its own generator, so with dropout the two would differ by design, not by a fault. One batch shape, so
that one compilation serves every step."""

import copy
import os
import shutil

import pytest
import torch

from aiayn.config import ModelConfig
from aiayn.data.batching import Batch, pack
from aiayn.model import Transformer
from aiayn.runtime import Runtime
from aiayn.training.losses import TrainingObjective
from aiayn.training.train import make_optimizer
from benchmarks.workloads import train_batch


def _steps(model: Transformer, inputs: tuple, n_tokens: int, compile_: bool, steps: int = 3) -> list[float]:
    """Losses of `steps` updates (forward, backward, Adam at lr 1e-3) as aiayn.training.train's _update takes them."""
    objective = Runtime(torch.device("cpu")).wrap(TrainingObjective(model), compile=compile_)
    opt = make_optimizer(model, (0.9, 0.98), 1e-9)
    for group in opt.param_groups:
        group["lr"] = 1e-3
    losses = []
    for _ in range(steps):
        loss, _ = objective(*inputs)
        (loss / n_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item() / n_tokens)
    return losses


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None,
                    reason="torch.compile on a CPU needs a C++ compiler (g++), and there is none here")
@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_compiled_training_steps_equal_eager_ones(layout):
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=64, dropout=0.0)).train()
    src, tgt_in, tgt_out, src_l, tgt_l = train_batch(64, 48, lo=5, hi=9)
    batch = Batch(src, tgt_in, tgt_out, sum(src_l), sum(tgt_l))
    inputs = (pack(batch) if layout == "packed" else batch).inputs()
    eager_model, compiled_model = model, copy.deepcopy(model)
    eager = _steps(eager_model, inputs, sum(tgt_l), compile_=False)
    try:
        compiled = _steps(compiled_model, inputs, sum(tgt_l), compile_=True)
    finally:
        torch._dynamo.reset()
    assert compiled == pytest.approx(eager, rel=1e-5)  # the same sums in another order: equal to float32 rounding
    assert eager[-1] < eager[0]  # the steps did train
    for (name, w), c in zip(eager_model.state_dict().items(), compiled_model.state_dict().values()):
        # A key's bias adds the same amount to every score of a query, which softmax ignores: its gradient is 0 in
        # exact arithmetic, rounding noise here, and Adam turns noise into full-size steps of either sign.
        if not name.endswith("w_k.bias"):
            torch.testing.assert_close(c, w, rtol=1e-4, atol=1e-5, msg=name)
