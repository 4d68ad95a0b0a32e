"""aiayn.run: a run is created once and held by one writer; its step checkpoints are kept, pruned and restored by
the Run alone (exact resumption end to end: test_train.py, test_reliability.py)."""

import pytest
import torch
from helpers import tiny_model

from aiayn import rundir
from aiayn.errors import CheckpointError, UsageError
from aiayn.run import Run


class _State:
    """What a Run reads of a train.TrainState: the model, the step, the trainer state's dict and loading it back."""

    def __init__(self, model, step=0):
        self.model, self.step, self.loaded = model, step, None

    def state_dict(self):
        return {"optimizer": {}, "sampler": {"epoch": 0, "position": self.step}, "step": self.step,
                "best_dev_loss": 1.0, "train_seconds": 2.0}

    def load_state_dict(self, trainer, path):
        self.loaded = trainer, path


def _created(copy_data, folder, run=None):
    record = rundir.run_record(tiny_model(120).cfg.to_dict(), {}, copy_data, copy_data / "vocab.model")
    return (run or Run.new(folder)).create(record, copy_data / "vocab.model")


def test_a_run_is_created_once_and_held_by_one_writer(copy_data, tmp_path):
    folder = tmp_path / "run"
    run = Run.new(folder)
    assert not folder.exists()  # nothing is written before create(): a start that fails leaves nothing
    with _created(copy_data, folder, run):
        assert rundir.read_config(folder)["data"] == str(copy_data.resolve())
        assert (folder / rundir.VOCAB).read_bytes() == (copy_data / "vocab.model").read_bytes()
        with pytest.raises(CheckpointError, match="is in use by another training process"):
            Run.resume(folder, rundir.read_config(folder))
        with Run.resume(folder, rundir.read_config(folder), main=False) as other:  # torchrun's others: no lock
            assert other.data_dir == copy_data.resolve() and other.parent is None and other.latest is None
        with pytest.raises(UsageError, match="it is a run already"):
            Run.new(folder)
    with Run.resume(folder, rundir.read_config(folder)) as run:  # the lock went with the `with` block
        assert run.data_dir == copy_data.resolve()
    (folder / rundir.VOCAB).unlink()
    with pytest.raises(CheckpointError, match="is missing"):
        Run.resume(folder, rundir.read_config(folder))
    (folder / rundir.VOCAB).write_bytes((copy_data / "vocab.model").read_bytes())
    with Run.resume(folder, rundir.read_config(folder)):  # a failed resume let the lock go too
        pass


def test_save_keeps_the_newest_and_restore_loads_the_latest(copy_data, tmp_path, capsys):
    model = tiny_model(120, seed=1)
    with _created(copy_data, tmp_path / "run") as run:
        for step in (1, 2, 3, 4):
            assert run.save(_State(model, step), keep_last=2).name == f"step_{step:08d}.safetensors"
        run.save_best(_State(model, 2))
        run.open_log()
        run.log("valid", 4, loss=1.5)
    names = sorted(p.name for p in (tmp_path / "run" / rundir.CHECKPOINT_DIR).iterdir())
    assert names == ["step_00000003.safetensors", "step_00000003.state.pt", "step_00000004.safetensors",
                     "step_00000004.state.pt"]
    assert (tmp_path / "run" / rundir.BEST).is_file() and rundir.read_log(tmp_path / "run")[0]["loss"] == 1.5
    stale = tmp_path / "run" / rundir.CHECKPOINT_DIR / ".step_00000005.safetensors.abcd1234.tmp"
    stale.write_bytes(b"")  # what a kill in mid-write leaves

    fresh = _State(tiny_model(120, seed=2))
    with Run.resume(tmp_path / "run", rundir.read_config(tmp_path / "run")) as run:
        run.restore(fresh)
    assert not stale.exists() and "removed 1 temp file(s)" in capsys.readouterr().out
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in fresh.model.state_dict().items())
    trainer, path = fresh.loaded
    assert trainer["step"] == 4 and path == rundir.step_checkpoint_path(tmp_path / "run", 4)


def test_restore_refuses_a_checkpoint_of_another_model(copy_data, tmp_path):
    with _created(copy_data, tmp_path / "run") as run:
        run.save(_State(tiny_model(120), 5), keep_last=1)
        with pytest.raises(CheckpointError, match=r"holds another model \(differs in dropout\)"):
            run.restore(_State(tiny_model(120, dropout=0.3)))
