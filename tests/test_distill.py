"""aiayn distill on tiny models: each stage's output checked against what it must be (the data's sources in order, the
teacher's own beam translations as targets, dev/test/vocabulary unchanged, a 6+1 student that translate loads, the
shortlist and the int8 record), a rerun after a kill or lost files continues to the same result, bad inputs are one
line each, and two torchrun processes give the translations one process gives, merged in input order."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import write_copy_corpus
from helpers import REPO, labelled_run, save_run, tiny_model

from aiayn import rundir
from aiayn.cli import main
from aiayn.config import EOS_ID, SearchConfig
from aiayn.data import load_split, open_prepared, prepare
from aiayn.decoding.translator import Translator
from aiayn.files import sha256_file
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt
from aiayn.training.distill import shard_path
from aiayn.training.run import trained_so_far

STUDENT = ["--student", "student-6-1", "--set", "d_model=32", "--set", "d_ff=64", "--set", "d_k=8", "--set", "d_v=8",
           "--max-steps", "4", "--max-tokens", "200", "--shard-size", "20", "--threads", "1", "--int8-lines", "10",
           "--no-progress"]


@pytest.fixture(scope="module")
def setup(copy_data, tmp_path_factory):
    """120 copy-task pairs (dev 10) prepared with copy_data's vocabulary and labelled en -> de, and a random tiny
    teacher run of that vocabulary (also labelled en -> de)."""
    root = tmp_path_factory.mktemp("distill")
    train, valid = write_copy_corpus(root / "raw", 120, seed=7), write_copy_corpus(root / "raw", 10, seed=8)
    data = root / "data"
    prepare(*train, data, vocab=copy_data / "vocab.model", valid=valid, languages=("en", "de"))
    teacher = labelled_run(tiny_model(120, seed=3, eos_bias=6.0), copy_data, root / "teacher", ("en", "de"))
    return data, teacher


def distill(data, teacher, out, *extra):
    return main(["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out), *STUDENT, *extra])


@pytest.fixture(scope="module")
def done(setup, tmp_path_factory):
    data, teacher = setup
    out = tmp_path_factory.mktemp("done") / "student"
    assert distill(data, teacher, out) == 0
    return out


def test_each_stage(setup, done, capsys):
    data, teacher = setup
    split, distilled = load_split(data, "train"), open_prepared(done / "distill" / "data", full_check=True)
    sources = [list(split[i][0]) + [EOS_ID] for i in range(len(split))]
    beams = Translator.load(teacher, SearchConfig(beam=4, alpha=0.6)).search_ids(sources)
    expected = [(s[:-1], h[0].tokens) for s, h in zip(sources, beams) if h[0].tokens]
    got = distilled["train"]
    assert len(got) == len(expected) > 60  # pairs the teacher left empty are dropped, nothing else
    assert all(list(got[i][0]) == s and list(got[i][1]) == t for i, (s, t) in enumerate(expected))
    for name in ("vocab.model", "valid.src.txt", "valid.tgt.txt", "valid.tgt.bin", "valid.idx.npy"):
        assert (done / "distill" / "data" / name).read_bytes() == (data / name).read_bytes(), name

    cfg = RunDir(done).config  # the student: a run like any other, on the distilled data
    assert (cfg["model"]["n_enc_layers"], cfg["model"]["n_dec_layers"], cfg["model"]["d_model"]) == (6, 1, 32)
    assert Path(cfg["data"]) == (done / "distill" / "data").resolve() and cfg["languages"] == {"source": "en",
                                                                                               "target": "de"}
    recipe = json.loads((done / "distill" / "recipe.json").read_text())
    assert recipe["student"]["preset"] == "student-6-1" and recipe["search"] == {"beam": 4, "alpha": 0.6}
    assert recipe["teachers"][0]["sha256"] == sha256_file(rundir.inference_checkpoint(teacher))
    assert recipe["stages"]["teacher"]["sentences"] == 120 and recipe["stages"]["student"]["steps"] == 4
    assert recipe["stages"]["data"]["kept"] == len(expected)
    int8 = recipe["stages"]["int8"]
    assert int8["sentences"] == 10 and 0 <= int8["identical"] <= 1 and {"fp32", "int8"} <= set(int8)
    assert (done / rundir.SHORTLIST).is_file()
    # translate loads the end of the annealed schedule, not checkpoint_best (the dev loss against human references)
    assert RunDir(done).for_inference == done / rundir.AVERAGED
    averaged, last = ckpt.load_weights(done / rundir.AVERAGED)[0], ckpt.load_weights(RunDir(done).latest())[0]
    assert averaged.keys() == last.keys() and all((averaged[k] == last[k]).all() for k in last)
    assert recipe["stages"]["student"]["checkpoint"] == f"averaged.safetensors: {RunDir(done).latest().name}"

    (done.parent / "in.txt").write_text("alpha bravo\ncharlie\n")
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(done), "--input", str(done.parent / "in.txt"), "--shortlist"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_a_rerun_redoes_only_what_is_missing(setup, done, tmp_path):
    """As after kills at each stage: a shard, the data, the student's checkpoints and the shortlist lost, a
    half-written data folder and a temp file left behind. The same command gives back the same files."""
    data, teacher = setup
    out = tmp_path / "student"
    shutil.copytree(done, out)
    shard = shard_path(out, 1)
    shard.unlink()
    (shard.parent / ".shard_00002.npz.abcdefgh.tmp").write_bytes(b"torn")
    shutil.rmtree(out / "distill" / "data")
    (out / "distill" / "data.partial").mkdir()
    for path in [*RunDir(out).checkpoints, out / rundir.BEST]:  # killed before its first checkpoint
        path.unlink()
    for path in RunDir(out).checkpoints:
        ckpt.state_path(path).unlink(missing_ok=True)
    (out / rundir.SHORTLIST).unlink()
    assert distill(data, teacher, out) == 0
    assert shard.read_bytes() == shard_path(done, 1).read_bytes()
    meta = lambda run: json.loads((run / "distill" / "data" / "meta.json").read_text())  # noqa: E731
    assert meta(out)["content_sha256"] == meta(done)["content_sha256"]
    last, ref = RunDir(out).latest(), RunDir(done).latest()
    assert last.name == ref.name and ckpt.load_weights(last)[0].keys() == ckpt.load_weights(ref)[0].keys()
    assert all((a == b).all() for a, b in zip(ckpt.load_weights(last)[0].values(), ckpt.load_weights(ref)[0].values()))
    assert (out / rundir.SHORTLIST).read_bytes() == (done / rundir.SHORTLIST).read_bytes()


def _env():
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _command(data, teacher, out):
    return ["-m", "aiayn", "distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out), *STUDENT]


def test_killed_while_the_teacher_translates_and_run_again(setup, done, tmp_path):
    data, teacher = setup
    out = tmp_path / "student"
    proc = subprocess.Popen([sys.executable, *_command(data, teacher, out)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not shard_path(out, 0).exists():
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "distill" / "data").exists(), "the command finished the teacher's stage before it was killed"
    assert distill(data, teacher, out) == 0
    for k in range(6):
        assert shard_path(out, k).read_bytes() == shard_path(done, k).read_bytes()


def _kill_once_the_student_has_saved(cmd, out, sig):
    """Start the command, send `sig` once the student's first resumable checkpoint is on disk (its training under
    way); the process's exit code and output."""
    proc = subprocess.Popen([sys.executable, *cmd], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and RunDir(out).latest(resumable=True) is None:
        time.sleep(0.005)
    proc.send_signal(sig)
    output, _ = proc.communicate()
    return proc.returncode, output


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_while_the_student_trains_and_run_again(setup, tmp_path, sig):
    """Killed (SIGKILL), or stopped (SIGTERM: exit 143 with a checkpoint and the line that says to run it again),
    during the student's training: the same command trains on to the budget without translating again."""
    data, teacher = setup
    out = tmp_path / "student"
    cmd = [*_command(data, teacher, out), "--max-steps", "120"]
    code, output = _kill_once_the_student_has_saved(cmd, out, sig)
    steps = trained_so_far(out)[0]
    assert 0 < steps < 120, f"the student had not started or had finished when killed ({steps} steps)"
    if sig == signal.SIGTERM:
        assert code == 143 and "stopped: the student's training was interrupted" in output, output[-2000:]
    else:
        assert code == -signal.SIGKILL
    shards = {p: p.stat().st_mtime_ns for p in (out / "distill" / "teacher").glob("shard_*.npz")}
    assert len(shards) == 6
    assert distill(data, teacher, out, "--max-steps", "120") == 0
    assert trained_so_far(out)[0] == 120
    logged = [e["step"] for e in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if e["kind"] == "train"]
    assert logged.count(10) == 1 and logged[-1] == 120  # continued from its checkpoint, not started again
    assert {p: p.stat().st_mtime_ns for p in shards} == shards  # the teacher's stage was not run again
    recipe = json.loads((out / "distill" / "recipe.json").read_text())
    assert recipe["stages"]["student"]["steps"] == 120 and (out / rundir.SHORTLIST).is_file()
    assert recipe["budget"] == {"max_steps": 120}  # the budget that decides, alone


def test_two_processes_translate_their_shards_merged_in_order(setup, done, tmp_path):
    data, teacher = setup
    out = tmp_path / "student"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           *_command(data, teacher, out)[1:]]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    recipe = json.loads((out / "distill" / "recipe.json").read_text())
    assert recipe["stages"]["teacher"]["processes"] == 2
    for name in ("train.src.bin", "train.tgt.bin", "train.idx.npy"):
        assert (out / "distill" / "data" / name).read_bytes() == (done / "distill" / "data" / name).read_bytes()


def _error(capsys, code, argv):
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_bad_inputs_are_one_line_each_and_write_nothing(setup, copy_data, tmp_path, capsys):
    data, teacher = setup
    out = tmp_path / "student"
    base = ["distill", "--data", str(data), "--out", str(out), *STUDENT]
    other_vocab = tmp_path / "other"
    prepare(copy_data / "valid.src.txt", copy_data / "valid.tgt.txt", other_vocab, vocab_size=60)
    stranger = save_run(tiny_model(60), other_vocab / "vocab.model", tmp_path / "stranger")
    assert "another vocabulary" in _error(capsys, 1, [*base, "--teacher", str(stranger)])
    french = labelled_run(tiny_model(120), copy_data, tmp_path / "fr", ("fr", "de"))
    assert "translates fr -> de but the data" in _error(capsys, 1, [*base, "--teacher", str(french)])
    assert "unknown student preset 'student-9-9'" in _error(capsys, 2, [*base, "--teacher", str(teacher),
                                                                        "--student", "student-9-9"])
    assert "is neither a checkpoint file nor a run directory" in _error(capsys, 1, [*base, "--teacher",
                                                                                   str(tmp_path / "nothing")])
    assert "not a prepared-data directory" in _error(capsys, 1, ["distill", "--data", str(tmp_path / "raw"), "--out",
                                                                 str(out), *STUDENT, "--teacher", str(teacher)])
    assert "is a prepared-data directory, not a run" in _error(capsys, 1, [*base, "--teacher", str(data)])
    assert not out.exists()
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert "holds no distillation" in _error(capsys, 2, [*base, "--teacher", str(teacher)])


def test_a_rerun_with_another_recipe_is_refused(setup, done, capsys):
    data, teacher = setup
    err = _error(capsys, 2, ["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(done),
                             *STUDENT, "--beam", "2"])
    assert "another search" in err



def test_epochs_are_passes_over_the_distilled_data_made_steps(setup, done, tmp_path, capsys):
    """--epochs E: E passes over the distilled data in the student's batches (train's sampler at --max-tokens), made
    steps once the data exist and said; the run trains that many steps, and the same command again trains none; with
    --max-steps too it is one error line."""
    import math

    from aiayn.data.batching import TokenBatchSampler

    data, teacher = setup
    out = tmp_path / "student"
    shutil.copytree(done / "distill" / "teacher", out / "distill" / "teacher")  # the teacher's shards, not again
    by_epochs = [a for a in STUDENT if a not in ("--max-steps", "4")] + ["--epochs", "1.7"]
    command = ["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out), *by_epochs]
    capsys.readouterr()
    assert main(command) == 0
    said = "".join(capsys.readouterr())
    split = load_split(out / "distill" / "data", "train")
    per_epoch = len(TokenBatchSampler(split.src_lengths, split.tgt_lengths, max_tokens=200, seed=1))
    steps = math.ceil(1.7 * per_epoch)  # rounded up: 1.7 epochs are no whole number of steps here
    assert f"{per_epoch} batches/epoch/process" in said  # train's own count of an epoch's batches
    assert f"for 1.7 epochs ({steps} steps)" in said and steps > 4 and steps != 1.7 * per_epoch
    recipe = json.loads((out / "distill" / "recipe.json").read_text())
    assert recipe["budget"] == {"epochs": 1.7} and recipe["stages"]["student"]["steps"] == steps
    assert main(command) == 0 and trained_so_far(out)[0] == steps
    assert "one budget" in _error(capsys, 2, [*command, "--max-steps", "3"])
    assert "one budget" in _error(capsys, 2, [*command, "--minutes", "5"])
    assert "one budget" in _error(capsys, 2, ["distill", "--teacher", str(teacher), "--data", str(data), "--out",
                                              str(tmp_path / "other"), *STUDENT, "--minutes", "5"])  # with --max-steps

def test_student_presets_are_deep_encoders_and_shallow_decoders():
    from aiayn.config import ModelConfig

    shapes = {name: (c.n_enc_layers, c.n_dec_layers) for name in ("student-6-1", "student-6-2", "student-6-1-tiny")
              for c in [ModelConfig.preset(name)]}
    assert shapes == {"student-6-1": (6, 1), "student-6-2": (6, 2), "student-6-1-tiny": (6, 1)}
    assert np.all([ModelConfig.preset(n).d_model < ModelConfig.preset("base").d_model for n in shapes])


def test_a_student_cut_from_its_teacher(setup, copy_data, tmp_path, capsys):
    """--student teacher-E-D: the teacher's model with E+D layers, starting from the teacher's own layers (the run's
    parent is the cut, which holds them), then fine-tuned on the distilled data."""
    import torch

    from aiayn.config import ModelConfig

    data, _ = setup
    teacher = labelled_run(tiny_model(120, seed=3, eos_bias=6.0, n_dec_layers=3), copy_data, tmp_path / "teacher",
                           ("en", "de"))  # 2 + 3 layers: the default student keeps 2 + 2
    out = tmp_path / "student"
    base = ["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out), "--max-steps", "2",
            "--max-tokens", "200", "--shard-size", "20", "--threads", "1", "--int8-lines", "0", "--no-progress"]
    assert "teacher's encoder has 2 layers" in _error(capsys, 2, [*base, "--student", "teacher-3-1"])
    assert "not 4 (at most --student teacher-all-3)" in _error(capsys, 2, [*base, "--student", "teacher-all-4"])
    assert "may change only dropout" in _error(capsys, 2, [*base, "--student", "teacher-1-1", "--set", "d_model=64"])
    assert "teacher-E-D" in _error(capsys, 2, [*base, "--student", "teacher-1"])
    assert not out.exists()
    assert main([*base, "--set", "dropout=0.2"]) == 0  # the default student: teacher-all-2
    teacher_path = rundir.inference_checkpoint(teacher)
    teacher_cfg = ckpt.read_header(teacher_path)[1]
    cfg = RunDir(out).config
    assert teacher_cfg.n_dec_layers == 3
    assert ModelConfig.from_dict(cfg["model"]) == teacher_cfg.replace(n_dec_layers=2, dropout=0.2)
    init = out / "distill" / "init" / "student.safetensors"
    assert cfg["parent"]["sha256"] == sha256_file(init)
    cut, theirs = ckpt.load_weights(init)[0], ckpt.load_weights(teacher_path)[0]
    kept = {k.replace("decoder.layers.1.", "decoder.layers.2."): v for k, v in cut.items()}  # decoder 0 and 2 of 3
    assert len(cut) < len(theirs) and all(torch.equal(v, theirs[k]) for k, v in kept.items())  # every encoder layer
    trained = ckpt.load_weights(out / rundir.AVERAGED)[0]
    assert trained.keys() == cut.keys() and not all(torch.equal(trained[k], cut[k]) for k in cut)
    recipe = json.loads((out / "distill" / "recipe.json").read_text())
    assert recipe["student"]["preset"] == "teacher-all-2" and recipe["stages"]["student"]["steps"] == 2



def test_a_cut_student_of_a_teacher_without_dropout_gets_some():
    """A teacher-E-D student keeps its teacher's dropout, except where the teacher had none: then STUDENT_DROPOUT
    (0.1), unless --set dropout says otherwise; a preset student has its preset's."""
    from aiayn.config import ModelConfig
    from aiayn.training.distill import STUDENT_DROPOUT, Recipe

    teacher = ModelConfig.preset("tiny", vocab_size=120, dropout=0.0)
    cut = Recipe(teachers=("t",), data="d")  # the default student, teacher-all-2
    assert STUDENT_DROPOUT == 0.1 and cut.model(120, teacher) == teacher.replace(dropout=0.1)
    assert cut.model(120, teacher.replace(dropout=0.3)).dropout == 0.3
    kept = Recipe(teachers=("t",), data="d", student_overrides={"dropout": 0.0})
    assert kept.model(120, teacher).dropout == 0.0
    preset = Recipe(teachers=("t",), data="d", student="student-6-1")
    assert preset.model(120, teacher).dropout == ModelConfig.preset("student-6-1").dropout

def _teacher_targets(teachers, data):
    """The best beam-4 translation of each training source of `data` by `teachers` (an ensemble if several)."""
    split = load_split(data, "train")
    sources = [list(split[i][0]) + [EOS_ID] for i in range(len(split))]
    return [h[0].tokens for h in Translator.load(teachers, SearchConfig(beam=4, alpha=0.6)).search_ids(sources)]


def test_an_ensemble_teaches(setup, copy_data, tmp_path):
    data, teacher = setup
    second = labelled_run(tiny_model(120, seed=5, eos_bias=6.0), copy_data, tmp_path / "second", ("en", "de"))
    out = tmp_path / "student"
    assert main(["distill", "--teacher", str(teacher), "--teacher", str(second), "--data", str(data), "--out",
                 str(out), *STUDENT, "--max-steps", "1", "--int8-lines", "0"]) == 0
    got = open_prepared(out / "distill" / "data")["train"]
    expected = [t for t in _teacher_targets([teacher, second], data) if t]
    assert [list(got[i][1]) for i in range(len(got))] == expected
    assert len(json.loads((out / "distill" / "recipe.json").read_text())["teachers"]) == 2


def test_an_imported_opus_mt_teacher_gives_the_student_its_vocabularies(tmp_path, capsys):
    """A random OPUS-MT model built as test_import_marian builds one, imported: the data prepared with its paired
    vocabulary, the student's run holds that same vocabulary and translates with it."""
    marian = pytest.importorskip("test_import_marian")
    from aiayn.export.marian import import_run

    if not (marian.MULTI30K / "train.en").is_file():
        pytest.skip("needs ../shared/data/multi30k")
    models = marian.train_spm(marian.MULTI30K / "train.en", 300), marian.train_spm(marian.MULTI30K / "train.de", 320)
    teacher = tmp_path / "teacher"
    import_run(marian.opus_folder(tmp_path / "opus", models, "deep-encoder"), teacher)
    lines = {side: (marian.MULTI30K / f"train.{side}").read_text(encoding="utf-8").splitlines()[:40]
             for side in ("en", "de")}
    for side, text in lines.items():
        (tmp_path / f"train.{side}").write_text("\n".join(text) + "\n", encoding="utf-8")
    data = tmp_path / "data"
    prepare(tmp_path / "train.en", tmp_path / "train.de", data, vocab=teacher / "vocab.model")
    out = tmp_path / "student"
    assert main(["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out), *STUDENT,
                 "--max-steps", "1", "--int8-lines", "0"]) == 0
    assert (out / "vocab.model").read_bytes() == (teacher / "vocab.model").read_bytes()
    got = open_prepared(out / "distill" / "data")["train"]
    assert [list(got[i][1]) for i in range(len(got))] == [t for t in _teacher_targets([teacher], data) if t]
    capsys.readouterr()
    (tmp_path / "in.txt").write_text("A man is sleeping.\n")
    assert main(["translate", "--checkpoint", str(out), "--input", str(tmp_path / "in.txt")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
