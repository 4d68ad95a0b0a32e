"""aiayn.rundir: the run directory's layout; a run and a prepared-data folder each say so when given for the other."""

import json

import pytest
from helpers import save_run, tiny_model

from aiayn import rundir
from aiayn.errors import CheckpointError, UsageError


def _record(tmp_path):
    return {"model": {}, "train": {}, "data": str(tmp_path), "data_sha256": "0" * 64, "vocab_sha256": "1" * 64}


def test_read_config_says_what_a_folder_is_instead(tmp_path, copy_data):
    with pytest.raises(CheckpointError, match="is a prepared-data directory, not a run directory; train on it"):
        rundir.read_config(copy_data)
    with pytest.raises(CheckpointError, match="not a run directory"):
        rundir.read_config(tmp_path)
    (tmp_path / "vocab.model").write_text("x")
    with pytest.raises(CheckpointError, match="interrupted before its config was written"):
        rundir.read_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model": {}, "train": {}, "data": "x"}))
    with pytest.raises(CheckpointError, match="lacks one of"):
        rundir.read_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(_record(tmp_path)))
    assert rundir.read_config(tmp_path) == _record(tmp_path)


def test_a_new_run_needs_a_free_folder(tmp_path):
    run = tmp_path / "run"
    rundir.check_new(run)  # missing: fine
    run.mkdir()
    (run / rundir.LOCK_FILE).write_text("")
    (run / ".config.json.abcd1234.tmp").write_text("")  # what an interrupted start leaves
    assert rundir.unstarted(run)
    rundir.check_new(run)
    (run / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty and is not a run directory"):
        rundir.check_new(run)
    (run / "config.json").write_text("{}")
    with pytest.raises(UsageError, match="it is a run already; continue it with --resume"):
        rundir.check_new(run)


def test_checkpoints_in_step_order_and_which_one_translates(tmp_path, copy_data):
    model = tiny_model(40)
    run = save_run(model, copy_data / "vocab.model", tmp_path / "run", step=9)
    for step in (10, 100):
        save_run(model, copy_data / "vocab.model", run, step=step)
    paths = rundir.checkpoint_paths(run)
    assert [p.name for p in paths] == [f"step_{s:08d}.safetensors" for s in (9, 10, 100)]
    assert rundir.latest_checkpoint(run) == paths[-1] and rundir.latest_checkpoint(run, resumable=True) is None
    rundir.state_path(paths[1]).write_bytes(b"")
    assert rundir.latest_checkpoint(run, resumable=True) == paths[1]
    assert rundir.inference_checkpoint(run) == paths[-1]
    for name in (rundir.BEST, rundir.AVERAGED):  # averaged beats best beats the newest step
        (run / name).write_bytes(b"")
        assert rundir.inference_checkpoint(run) == run / name
    assert rundir.find_vocab(paths[0]) == run / "vocab.model"
    assert rundir.shortlist_path(paths[0]) == rundir.shortlist_path(run) == run / rundir.SHORTLIST
    with pytest.raises(CheckpointError, match="is a prepared-data directory, not a run directory"):
        rundir.inference_checkpoint(copy_data)


def test_log_lines_survive_a_torn_last_line(tmp_path):
    logger = rundir.Logger(tmp_path, enabled=True)
    logger.log("train", 1, loss=2.5)
    logger.close()
    with open(tmp_path / rundir.LOG, "a") as f:
        f.write('{"kind": "train", "step": 2, "lo')  # a kill in mid-line
    logger = rundir.Logger(tmp_path, enabled=True)  # a resumed run cuts the torn line before appending
    logger.log("valid", 2, loss=2.0)
    logger.close()
    assert [(r["kind"], r["step"], r["loss"]) for r in rundir.read_log(tmp_path)] == [("train", 1, 2.5),
                                                                                     ("valid", 2, 2.0)]
