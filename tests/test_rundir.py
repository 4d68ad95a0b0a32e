"""aiayn.rundir and aiayn.training.run: the run directory's layout, read through RunDir (a run and a prepared-data
folder each say so when given for the other; which checkpoint decodes); a run is created once and held by one writer,
its step checkpoints kept, pruned and restored by its Run alone (exact resumption end to end: test_train.py,
test_reliability.py); averaging writes the mean of the checkpoints."""

import json

import pytest
import torch
from helpers import labelled_run, save_run, tiny_model

from aiayn import rundir
from aiayn.errors import CheckpointError, DataError, UsageError
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt
from aiayn.training import run as training_run
from aiayn.training.run import Run


def _record(tmp_path):
    return {"model": {}, "train": {}, "data": str(tmp_path), "data_sha256": "0" * 64, "vocab_sha256": "1" * 64}


def test_read_config_says_what_a_folder_is_instead(tmp_path, copy_data):
    with pytest.raises(CheckpointError, match="is a prepared-data directory, not a run directory; train on it"):
        _ = RunDir(copy_data).config
    with pytest.raises(CheckpointError, match="not a run directory"):
        _ = RunDir(tmp_path).config
    (tmp_path / "vocab.model").write_text("x")
    with pytest.raises(CheckpointError, match="interrupted before its config was written"):
        _ = RunDir(tmp_path).config
    (tmp_path / "config.json").write_text(json.dumps({"model": {}, "train": {}, "data": "x"}))
    with pytest.raises(CheckpointError, match="lacks one of"):
        _ = RunDir(tmp_path).config
    (tmp_path / "config.json").write_text(json.dumps(_record(tmp_path)))
    assert RunDir(tmp_path).config == _record(tmp_path)


def test_a_new_run_needs_a_free_folder(tmp_path):
    run = tmp_path / "run"
    training_run.check_new(run)  # missing: fine
    run.mkdir()
    (run / rundir.LOCK_FILE).write_text("")
    (run / ".config.json.abcd1234.tmp").write_text("")  # what an interrupted start leaves
    assert RunDir(run).unstarted
    training_run.check_new(run)
    (run / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty and is not a run directory"):
        training_run.check_new(run)
    (run / "config.json").write_text("{}")
    with pytest.raises(UsageError, match="it is a run already; continue it with --resume"):
        training_run.check_new(run)


def test_checkpoints_in_step_order_and_which_one_translates(tmp_path, copy_data):
    model = tiny_model(40)
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run", step=9)
    for step in (10, 100):
        save_run(model, copy_data / "vocab.model", run, step=step)
    paths = RunDir(run).checkpoints
    assert [p.name for p in paths] == [f"step_{s:08d}.safetensors" for s in (9, 10, 100)]
    assert RunDir(run).latest() == paths[-1] and RunDir(run).latest(resumable=True) is None
    ckpt.state_path(paths[1]).write_bytes(b"")
    assert RunDir(run).latest(resumable=True) == paths[1]
    assert rundir.inference_checkpoint(run) == paths[-1]
    assert RunDir(run).for_inference == paths[-1] and RunDir(run).trained
    for name in (rundir.BEST, rundir.AVERAGED):  # averaged beats best beats the newest step
        (run / name).write_bytes(b"")
        assert rundir.inference_checkpoint(run) == RunDir(run).for_inference == run / name
    assert rundir.inference_checkpoint(paths[0]) == paths[0]  # a file is taken as given
    assert RunDir.of(paths[0]).vocab == RunDir.of(run).vocab == run / "vocab.model"
    assert RunDir.of(paths[0]).shortlist == run / rundir.SHORTLIST
    with pytest.raises(CheckpointError, match="no vocab.model found beside"):
        RunDir.of(tmp_path / "elsewhere.safetensors")
    with pytest.raises(CheckpointError, match="is a prepared-data directory, not a run directory"):
        rundir.inference_checkpoint(copy_data)


def test_a_run_with_no_checkpoint_yet_says_so(tmp_path, copy_data):
    (tmp_path / "run").mkdir()
    empty = RunDir(tmp_path / "run")
    assert not empty.trained and empty.latest() is None and empty.checkpoints == []
    with pytest.raises(CheckpointError, match="has no checkpoint yet; train it first"):
        _ = empty.for_inference
    with pytest.raises(CheckpointError, match="is neither a checkpoint file nor a run directory"):
        rundir.inference_checkpoint(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="has no log.jsonl"):
        _ = empty.log
    assert not RunDir(copy_data).trained


def test_what_a_run_was_trained_on(tmp_path, copy_data):
    run = RunDir(labelled_run(tiny_model(120), copy_data, tmp_path, ("en", "de")))
    assert run.is_run and not run.unstarted
    assert run.data == tmp_path / "data" and run.config["data"] == str(run.data.resolve())
    assert run.languages == ("en", "de")
    assert run.same_data(run.config) == run.data and run.parent(run.config) is None
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    (tmp_path / "data" / "meta.json").write_text(json.dumps({**meta, "content_sha256": "0" * 64}))  # prepared again
    with pytest.raises(DataError, match="holds other data than"):
        run.same_data(run.config)


def test_average_is_the_mean_of_the_checkpoints(tmp_path, copy_data):
    a, b = tiny_model(120, seed=1), tiny_model(120, seed=2)
    run = save_run(a, copy_data / "vocab.model", tmp_path / "run", step=1)
    save_run(b, copy_data / "vocab.model", run, step=2)
    out = training_run.average(RunDir(run).checkpoints, RunDir(run).averaged)
    assert out == run / rundir.AVERAGED and rundir.inference_checkpoint(run) == out
    state = ckpt.load_weights(out)[0]
    assert all(torch.allclose(v, (a.state_dict()[k] + b.state_dict()[k]) / 2) for k, v in state.items())


def test_log_lines_survive_a_torn_last_line(tmp_path):
    logger = training_run.Logger(tmp_path, enabled=True)
    logger.log("train", 1, loss=2.5)
    logger.close()
    with open(tmp_path / rundir.LOG, "a") as f:
        f.write('{"kind": "train", "step": 2, "lo')  # a kill in mid-line
    logger = training_run.Logger(tmp_path, enabled=True)  # a resumed run cuts the torn line before appending
    logger.log("valid", 2, loss=2.0)
    logger.close()
    assert [(r["kind"], r["step"], r["loss"]) for r in RunDir(tmp_path).log] == [("train", 1, 2.5),
                                                                                     ("valid", 2, 2.0)]


# ---------------------------------------------------------------------------------------------------------
# Run: the trainer's one handle on its run.


def _trainer_state(step):
    return {"optimizer": {}, "sampler": {"epoch": 0, "position": step}, "step": step, "best_dev_loss": 1.0,
            "train_seconds": 2.0, "scaler": {}, "overflow_skips": 0,
            "early_stopping": {"best": None, "best_step": 0, "evals_since_best": 0}}


def _created(copy_data, folder, run=None):
    record = training_run.run_record(tiny_model(120).cfg.to_dict(), {}, copy_data, copy_data / "vocab.model")
    return (run or Run.new(folder)).create(record, copy_data / "vocab.model")


def test_a_run_is_created_once_and_held_by_one_writer(copy_data, tmp_path):
    folder = tmp_path / "run"
    run = Run.new(folder)
    assert not folder.exists()  # nothing is written before create(): a start that fails leaves nothing
    with _created(copy_data, folder, run):
        assert RunDir(folder).config["data"] == str(copy_data.resolve())
        assert (folder / rundir.VOCAB).read_bytes() == (copy_data / "vocab.model").read_bytes()
        with pytest.raises(CheckpointError, match="is in use by another training process"):
            Run.resume(folder, RunDir(folder).config)
        with Run.resume(folder, RunDir(folder).config, main=False) as other:  # torchrun's others: no lock
            assert other.data_dir == copy_data.resolve() and other.parent is None and other.latest is None
        with pytest.raises(UsageError, match="it is a run already"):
            Run.new(folder)
    with Run.resume(folder, RunDir(folder).config) as run:  # the lock went with the `with` block
        assert run.data_dir == copy_data.resolve()
    (folder / rundir.VOCAB).unlink()
    with pytest.raises(CheckpointError, match="is missing"):
        Run.resume(folder, RunDir(folder).config)
    (folder / rundir.VOCAB).write_bytes((copy_data / "vocab.model").read_bytes())
    with Run.resume(folder, RunDir(folder).config):  # a failed resume let the lock go too
        pass


def test_save_keeps_the_newest_and_restore_loads_the_latest(copy_data, tmp_path, capsys):
    model = tiny_model(120, seed=1)
    with _created(copy_data, tmp_path / "run") as run:
        assert run.restore(tiny_model(120)) is None  # step 0: nothing to restore
        for step in (1, 2, 3, 4):
            assert run.save(step, model, _trainer_state(step), keep_last=2).name == f"step_{step:08d}.safetensors"
        run.save_best(2, model)
        run.open_log()
        run.log("valid", 4, loss=1.5)
    names = sorted(p.name for p in (tmp_path / "run" / rundir.CHECKPOINT_DIR).iterdir())
    assert names == ["step_00000003.safetensors", "step_00000003.state.pt", "step_00000004.safetensors",
                     "step_00000004.state.pt"]
    assert ckpt.read_header(tmp_path / "run" / rundir.BEST)[0]["step"] == "2"
    assert RunDir(tmp_path / "run").log[0]["loss"] == 1.5
    stale = tmp_path / "run" / rundir.CHECKPOINT_DIR / ".step_00000005.safetensors.abcd1234.tmp"
    stale.write_bytes(b"")  # what a kill in mid-write leaves

    fresh = tiny_model(120, seed=2)
    with Run.resume(tmp_path / "run", RunDir(tmp_path / "run").config) as run:
        trainer, path = run.restore(fresh)
    assert not stale.exists() and "removed 1 temp file(s)" in capsys.readouterr().out
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in fresh.state_dict().items())
    assert trainer == _trainer_state(4) and path == RunDir(tmp_path / "run").step(4)


def test_restore_refuses_a_checkpoint_of_another_model_or_step(copy_data, tmp_path):
    with _created(copy_data, tmp_path / "run") as run:
        path = run.save(5, tiny_model(120), _trainer_state(5), keep_last=1)
        with pytest.raises(CheckpointError, match=r"holds another model \(differs in dropout\)"):
            run.restore(tiny_model(120, dropout=0.3))
        ckpt.save_checkpoint(path, tiny_model(120).state_dict(), tiny_model(120).cfg, 5, _trainer_state(4))
        with pytest.raises(CheckpointError, match="is step 5 but its trainer state is step 4"):
            run.restore(tiny_model(120))


def test_load_for_inference_reads_the_run_translate_picks(copy_data, tmp_path):
    model = tiny_model(120, seed=3)
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run", step=7)
    random = torch.get_rng_state()
    loaded, vocab, cfg = rundir.load_for_inference(run)
    assert torch.equal(torch.get_rng_state(), random)  # no random initialization before the weights are read
    assert cfg == model.cfg and len(vocab) == 120 and not loaded.training
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())
    other = save_run(tiny_model(40), copy_data / "vocab.model", tmp_path / "other")  # a 40-piece model, 120 pieces
    with pytest.raises(CheckpointError, match="has 120 entries but the model of .* expects 40"):
        rundir.load_for_inference(other)
