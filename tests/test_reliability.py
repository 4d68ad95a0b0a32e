"""Reliability: one test per principle, each over the whole class of cases it covers.

Nothing silently wrong: prepared data are verified when opened; a run refuses data prepared again since it started;
resume refuses every flag it cannot honour; every numeric flag has its range checked at parse time.
Nothing half-written: one writer per run directory; a start checks everything before it writes; kill -9 during the
config write; a run with a config but no checkpoint resumes from step 0; stale temp files are removed; an over-long
dev pair; outputs written atomically; interrupted training saves quickly and exits 130/143; the quickstart stops on
a signal and later resumes to its budget.
Clear errors: a table of bad inputs drives every command (exit 1 or 2, one "error:" line, no traceback, no file left
behind). Other commands add their rows to BAD_INPUTS.
"""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import write_copy_corpus
from helpers import REPO, tiny_model
from safetensors.torch import load_file, safe_open, save_file

import aiayn.training.selection as selection_mod
import aiayn.training.train as train_mod
from aiayn import files, rundir
from aiayn.cli import build_parser, main
from aiayn.config import ModelConfig
from aiayn.data import folder as folder_mod
from aiayn.data import load_split, open_prepared, prepare
from aiayn.decoding.translator import Translation, Translator
from aiayn.errors import CheckpointError, DataError, UsageError
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt
from aiayn.training.train import RESUMABLE_OPTIONS, TrainConfig, resume, train

TINY = ["--preset", "tiny", "--max-tokens", "160", "--save-every-minutes", "0", "--no-progress", "--threads", "1",
        "--warmup", "50"]


def tiny_tc(**kw) -> TrainConfig:
    return TrainConfig(**{"max_steps": 2, "max_tokens": 160, "save_every_steps": 2, "save_every_minutes": 0,
                          "threads": 1, "warmup": 50, "log_every": 1, **kw})


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "aiayn", *map(str, args)]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the process ended ({proc.returncode}) before {path.name} appeared"
        assert time.time() < deadline, f"{path} did not appear"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def lab(copy_data, tmp_path_factory) -> SimpleNamespace:
    """A folder of good and bad inputs: prepared data, a 2-step run, and damaged copies of each."""
    root = tmp_path_factory.mktemp("lab")
    data, run = root / "data", root / "run"
    shutil.copytree(copy_data, data)
    train(data, run, ModelConfig.preset("tiny"), tiny_tc(), progress=False)
    (root / "good.txt").write_text("alpha bravo\ncharlie\n")
    (root / "bad.txt").write_bytes(b"alpha bravo\n\xff\xfe charlie\n")
    shutil.copytree(data, root / "trunc")
    size = (root / "trunc/train.src.bin").stat().st_size
    os.truncate(root / "trunc/train.src.bin", size // 4 * 2)  # whole uint16 ids: readable, but short
    shutil.copytree(data, root / "brokenmeta")
    (root / "brokenmeta/meta.json").write_text('{"splits": {"tra')
    shutil.copytree(run, root / "brokenrun")
    (root / "brokenrun/config.json").write_text('{"model": {"d_model": 32,')
    src, tgt = write_copy_corpus(root / "raw", 200, seed=11)
    prepare(src, tgt, root / "othervocab", vocab_size=90)
    (root / "broken.yaml").write_text("preset: tiny\nmodel: [d_model: 32\n")
    (root / "types.yaml").write_text(f"preset: tiny\ndata: {data}\ntrain:\n  max_steps: many\n")
    (root / "latin1.yaml").write_bytes("preset: tiny  # Tama\xf1o\n".encode("latin-1"))
    weights = RunDir(run).checkpoints[-1]
    state = load_file(str(weights))
    with safe_open(str(weights), "pt") as f:
        meta = f.metadata()
    config = json.loads(meta["config"])
    save_file(state, str(root / "bad_config.safetensors"),
              metadata={**meta, "config": json.dumps({**config, "vocab_size": 10**12})})
    save_file(state, str(root / "bad_shape.safetensors"),
              metadata={**meta, "config": json.dumps({**config, "d_ff": 2 * config["d_ff"]})})
    shutil.copyfile(run / "vocab.model", root / "vocab.model")  # beside the damaged checkpoints
    return SimpleNamespace(root=root, data=data, run=run)


# ---------------------------------------------------------------------------------------------------------
# Clear errors: every command, bad inputs -> exit 1 or 2, one "error:" line, no traceback, nothing left behind.

NO_CUDA = not torch.cuda.is_available()
OUT = "{root}/new"  # where a command would write: must not exist afterwards

# (id, argv ({root}, {data}, {run} are filled in), stdin bytes, exit code, what the error line must say[, why it is
# known to fail still: a strict xfail, so the row must be un-marked when its command is fixed])
BAD_INPUTS = [
    ("quickstart-minutes", ["quickstart", "--out", OUT, "--minutes", "0"], b"", 2, "--minutes: must be a number > 0"),
    ("quickstart-beam", ["quickstart", "--out", OUT, "--beam", "0"], b"", 2, "--beam: must be an integer >= 1"),
    ("prepare-no-file", ["prepare", "--src", "{root}/no.src", "--tgt", "{root}/no.tgt", "--out", OUT], b"", 1,
     "no such file"),
    ("prepare-vocab-size", ["prepare", "--tsv", "{root}/good.txt", "--out", OUT, "--vocab-size", "0"], b"", 2,
     "--vocab-size"),
    ("prepare-max-ratio", ["prepare", "--tsv", "{root}/good.txt", "--out", OUT, "--max-ratio", "0.5"], b"", 2,
     "--max-ratio"),
    ("prepare-bad-bytes", ["prepare", "--src", "{root}/bad.txt", "--tgt", "{root}/good.txt", "--out", OUT,
                           "--vocab-size", "30"], b"", 1, "bad.txt, line 2: not valid UTF-8"),
    ("train-no-data", ["train", "--data", "{root}/nothing", "--out", OUT, *TINY], b"", 1,
     "not a prepared-data directory"),
    ("train-truncated-data", ["train", "--data", "{root}/trunc", "--out", OUT, *TINY], b"", 1, "truncated"),
    ("train-broken-meta", ["train", "--data", "{root}/brokenmeta", "--out", OUT, *TINY], b"", 1,
     "meta.json is damaged"),
    ("train-batch-limit", ["train", "--data", "{data}", "--out", OUT, *TINY, "--max-tokens", "6"], b"", 1,
     "more than max_tokens=6"),
    ("train-out-is-a-run", ["train", "--data", "{data}", "--out", "{run}", *TINY], b"", 2, "--resume"),
    ("train-set-type", ["train", "--data", "{data}", "--out", OUT, *TINY, "--set", "d_model=wide"], b"", 2,
     "d_model must be an integer"),
    ("train-set-huge", ["train", "--data", "{data}", "--out", OUT, *TINY, "--set", "d_ff=10000000000"], b"", 2,
     "d_ff must lie in"),
    ("train-set-no-value", ["train", "--data", "{data}", "--out", OUT, *TINY, "--set", "dropout"], b"", 2,
     "FIELD=VALUE"),
    ("train-threads", ["train", "--data", "{data}", "--out", OUT, *TINY, "--threads", "-1"], b"", 2,
     "--threads: must be an integer >= 0"),
    ("train-yaml-broken", ["train", "--config", "{root}/broken.yaml", "--out", OUT], b"", 2, "broken.yaml"),
    ("train-yaml-types", ["train", "--config", "{root}/types.yaml", "--out", OUT], b"", 2,
     "types.yaml: max_steps must be an integer"),
    ("train-yaml-bytes", ["train", "--config", "{root}/latin1.yaml", "--out", OUT], b"", 2, "latin1.yaml: not UTF-8"),
    ("resume-flag", ["train", "--resume", "{run}", "--max-tokens", "200"], b"", 2, "cannot change max_tokens"),
    ("resume-and-data", ["train", "--resume", "{run}", "--data", "{data}"], b"", 2, "drop --data"),
    ("resume-no-run", ["train", "--resume", "{root}/nothing"], b"", 1, "not a run directory"),
    ("resume-a-data-folder", ["train", "--resume", "{data}"], b"", 1,
     "is a prepared-data directory, not a run directory; train on it with `aiayn train --data"),
    ("train-data-is-a-run", ["train", "--data", "{run}", "--out", OUT, *TINY], b"", 1,
     "is a run directory, not a prepared-data directory"),
    ("translate-a-data-folder", ["translate", "--checkpoint", "{data}"], b"a\n", 1,
     "is a prepared-data directory, not a run directory"),
    ("resume-broken-config", ["train", "--resume", "{root}/brokenrun"], b"", 1, "config.json is not valid JSON"),
    ("average-last", ["average", "--run", "{run}", "--last", "0"], b"", 2, "--last: must be an integer >= 1"),
    ("average-no-checkpoint", ["average", "--inputs", "{root}/no.safetensors", "--output", OUT], b"", 1,
     "no checkpoint"),
    ("translate-bad-stdin", ["translate", "--checkpoint", "{run}"], b"alpha\n\xff bravo\n", 1,
     "stdin, line 2: not valid UTF-8"),
    ("translate-bad-file", ["translate", "--checkpoint", "{run}", "--input", "{root}/bad.txt", "--output", OUT],
     b"", 1, "bad.txt, line 2: not valid UTF-8"),
    ("translate-batch-size", ["translate", "--checkpoint", "{run}", "--batch-size", "0"], b"", 2, "--batch-size"),
    ("translate-beam", ["translate", "--checkpoint", "{run}", "--beam", "0"], b"", 2, "--beam"),
    ("translate-nbest", ["translate", "--checkpoint", "{run}", "--beam", "2", "--nbest", "3"], b"", 2, "nbest"),
    ("translate-no-folder", ["translate", "--checkpoint", "{run}", "--input", "{root}/good.txt", "--output",
                             "{root}/nothing/out.txt"], b"", 1, "there is no folder"),
    ("translate-huge-config", ["translate", "--checkpoint", "{root}/bad_config.safetensors"], b"a\n", 1,
     "vocab_size must lie in"),
    ("translate-shapes", ["translate", "--checkpoint", "{root}/bad_shape.safetensors"], b"a\n", 1,
     "does not match the model its config describes"),
    *([("translate-cuda", ["translate", "--checkpoint", "{run}", "--device", "cuda"], b"a\n", 2, "sees no CUDA GPU"),
       ("train-cuda", ["train", "--data", "{data}", "--out", OUT, *TINY, "--device", "cuda"], b"", 2,
        "sees no CUDA GPU")] if NO_CUDA else []),
    ("translate-no-shortlist", ["translate", "--checkpoint", "{run}", "--shortlist"], b"a\n", 2,
     "has no shortlist"),
    ("shortlist-no-data", ["shortlist", "--output", OUT], b"", 2, "needs --data"),
    ("shortlist-not-a-run", ["shortlist", "--out", OUT], b"", 2, "is not a run directory"),
    ("shortlist-other-vocab", ["shortlist", "--data", "{root}/othervocab", "--out", "{run}"], b"", 1,
     "has another vocabulary"),
    ("serve-no-shortlist", ["serve", "--checkpoint", "{run}", "--shortlist"], b"", 2, "has no shortlist"),
    ("evaluate-bad-bytes", ["evaluate", "--hyp", "{root}/bad.txt", "--ref", "{root}/good.txt"], b"", 1,
     "bad.txt, line 2: not valid UTF-8"),
    ("evaluate-max-tokens", ["evaluate", "--checkpoint", "{run}", "--data", "{data}", "--max-tokens", "0"], b"", 2,
     "--max-tokens"),
    ("evaluate-other-vocab", ["evaluate", "--checkpoint", "{run}", "--data", "{root}/othervocab", "--split",
                              "train"], b"", 1, "another vocabulary"),
    ("evaluate-broken-meta", ["evaluate", "--checkpoint", "{run}", "--data", "{root}/brokenmeta"], b"", 1,
     "meta.json is damaged"),
    ("params-vocab-size", ["params", "--vocab-size", "0"], b"", 2, "--vocab-size"),
    ("plot-no-run", ["plot", "{root}/nothing"], b"", 1, "no log.jsonl"),
    ("export-no-checkpoint", ["export", "--checkpoint", "{root}/nothing", "--to", "hf", OUT], b"", 1, "nothing"),
    ("attention-no-checkpoint", ["attention", "--checkpoint", "{root}/nothing", "--src", "a", "--out", OUT], b"", 1,
     "nothing"),
    ("serve-no-checkpoint", ["serve", "--checkpoint", "{root}/nothing"], b"", 1, "nothing"),
    ("variations-no-data", ["variations", "--out", OUT], b"", 2, "--data"),
    ("parse-no-checkpoint", ["parse", "--checkpoint", "{root}/nothing"], b"a b\n", 1, "nothing"),
    ("parse-not-a-parser", ["parse", "--checkpoint", "{run}"], b"a b\n", 1, "not a parser"),
    ("prepare-parse-no-file", ["prepare-parse", "--train", "{root}/nothing", "--out", OUT], b"", 1, "nothing"),
    ("unknown-flag", ["translate", "--checkpoint", "{run}", "--bem", "3"], b"", 2, "unrecognized arguments"),
]


def _marks(case):
    """A strict xfail where the row says why it still fails; a skip where its command's extra is not installed (serve's
    on a machine with torch alone: the error would name the missing extra before the bad input)."""
    from aiayn.extras import OPTIONAL, installed

    marks = [pytest.mark.xfail(strict=True, reason=case[5])] if len(case) > 5 else []
    if case[1][0] == "serve" and not all(installed(m) for m in OPTIONAL["serve"][1] + ("lingua",)):
        marks.append(pytest.mark.skip(reason="the serve extra is not installed"))
    return marks


@pytest.mark.parametrize("argv, stdin, code, says", [
    pytest.param(*c[1:5], id=c[0], marks=_marks(c)) for c in BAD_INPUTS])
def test_bad_inputs_are_one_error_line_and_leave_nothing(lab, argv, stdin, code, says, capsys, monkeypatch):
    argv = [a.format(root=lab.root, data=lab.data, run=lab.run) for a in argv]
    monkeypatch.chdir(lab.root)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    before = tree(lab.root)
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert says in err, err
    assert tree(lab.root) == before, "a failed command left files behind"


def test_every_numeric_flag_has_its_range_checked_at_parse_time(capsys):
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    unranged, ranged = set(), []
    for name, p in sub.choices.items():
        for a in p._actions:
            if a.type in (int, float):
                unranged.add((name, a.option_strings[0]))
            elif hasattr(a.type, "low"):
                ranged.append((name, a))
    assert not unranged, f"numeric flags typed plain int/float (use aiayn.cli.common.number): {sorted(unranged)}"
    assert len(ranged) >= 40
    for name, a in ranged:
        t = a.type
        bad = str(t.low - 1 if t.low is not None else t.above if t.above is not None else t.below)
        flag = a.option_strings[0]
        assert main([name, flag, *[bad] * (a.nargs if isinstance(a.nargs, int) else 1)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: aiayn {name}: argument {flag}") and "must be" in err, err
        assert err.count("\n") == 1


# ---------------------------------------------------------------------------------------------------------
# Nothing silently wrong.

DAMAGE = {
    "truncated ids": ("train.src.bin", lambda p: os.truncate(p, p.stat().st_size // 4 * 2)),
    "truncated dev ids": ("valid.tgt.bin", lambda p: os.truncate(p, p.stat().st_size - 2)),
    "ids changed, same size": ("train.tgt.bin", lambda p: p.write_bytes(p.read_bytes()[::-1])),
    "another vocabulary": ("vocab.model", lambda p: shutil.copyfile(p.parent.parent / "othervocab/vocab.model", p)),
    "index of another split": ("train.idx.npy", lambda p: shutil.copyfile(p.with_name("valid.idx.npy"), p)),
    "index not .npy": ("test.idx.npy", lambda p: p.write_bytes(b"not numpy")),
    "ids missing": ("valid.src.bin", lambda p: p.unlink()),
    "meta.json damaged": ("meta.json", lambda p: p.write_text(p.read_text()[:50])),
}


@pytest.mark.parametrize("name", DAMAGE)
def test_prepared_data_are_verified_when_opened(lab, tmp_path, name):
    data = tmp_path / "data"
    shutil.copytree(lab.data, data)
    shutil.copytree(lab.root / "othervocab", tmp_path / "othervocab")
    file, damage = DAMAGE[name]
    damage(data / file)
    with pytest.raises(DataError, match=file.replace(".", r"\.")):
        open_prepared(data)
    with pytest.raises(DataError):
        train(data, tmp_path / "run", ModelConfig.preset("tiny"), tiny_tc(), progress=False)
    assert not (tmp_path / "run").exists()


def test_big_files_have_their_sizes_checked_and_their_hashes_on_demand(lab, tmp_path, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(lab.data, data)
    ids = data / "train.tgt.bin"
    ids.write_bytes(ids.read_bytes()[::-1])  # same size, other ids
    monkeypatch.setattr(folder_mod, "HASH_BELOW_BYTES", 0)  # as if every file were too big to hash each time
    assert len(load_split(data, "train")) == 600
    with pytest.raises(DataError, match="differs from what `aiayn prepare` wrote"):
        load_split(data, "train", full_check=True)
    os.truncate(ids, ids.stat().st_size - 2)  # a short id file is caught by its size alone
    with pytest.raises(DataError, match="train.tgt.bin has .* but train.idx.npy indexes"):
        load_split(data, "train")


def test_resume_refuses_data_prepared_again_with_other_text_or_vocabulary(tmp_path):
    a = write_copy_corpus(tmp_path / "raw", 300, seed=21)
    b = write_copy_corpus(tmp_path / "raw", 300, seed=22)
    data, run = tmp_path / "data", tmp_path / "run"
    prepare(*a, data, vocab_size=100)
    train(data, run, ModelConfig.preset("tiny"), tiny_tc(), progress=False)
    saved = RunDir(run).config
    assert len(saved["data_sha256"]) == len(saved["vocab_sha256"]) == 64

    shutil.rmtree(data)
    prepare(*a, data, vocab_size=100)  # the same text prepared again: the same data, so the run goes on
    assert resume(run, progress=False, max_steps=3)["step"] == 3

    shutil.rmtree(data)
    prepare(*b, data, vocab_size=100)  # another corpus, and so another vocabulary
    with pytest.raises(DataError, match="another vocabulary than the one .* was trained with"):
        resume(run, progress=False, max_steps=4)

    shutil.rmtree(data)
    prepare(*b, data, vocab=run / "vocab.model")  # another corpus with the run's own vocabulary
    with pytest.raises(DataError, match="holds other data than .* was trained on"):
        resume(run, progress=False, max_steps=4)
    assert [p.name for p in RunDir(run).checkpoints] == ["step_00000002.safetensors", "step_00000003.safetensors"]


def test_resume_refuses_every_flag_it_cannot_honour(lab, capsys):
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    flags = {a.dest: a for a in sub.choices["train"]._actions}
    for f in TrainConfig.__dataclass_fields__.values():
        if f.name in RESUMABLE_OPTIONS:
            continue
        default = f.default
        value = [] if isinstance(default, bool) else [str(v) for v in default] if isinstance(default, tuple) else \
            [str(default)]
        assert main(["train", "--resume", str(lab.run), flags[f.name].option_strings[0], *value]) == 2
        assert f"cannot change {f.name} when resuming" in capsys.readouterr().err
    assert main(["train", "--resume", str(lab.run), "--max-steps", "2", "--max-minutes", "5", "--no-progress"]) == 0


def test_trainer_state_is_checked_before_resuming_from_it(lab, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(lab.run, copy)
    last = RunDir(copy).checkpoints[-1]
    trainer = ckpt.load_trainer_state(last)
    torch.save({k: v for k, v in trainer.items() if k != "sampler"}, ckpt.state_path(last))
    with pytest.raises(CheckpointError, match="lacks one of the optimizer, sampler"):
        resume(copy, progress=False, max_steps=3)
    torch.save(trainer, ckpt.state_path(last))
    other = tiny_model(120, d_ff=128)  # weights of another model in the run's place
    ckpt.save_weights(last, other.state_dict(), other.cfg, 2)
    with pytest.raises(CheckpointError, match="holds another model \\(differs in d_ff\\)"):
        resume(copy, progress=False, max_steps=3)


# ---------------------------------------------------------------------------------------------------------
# Nothing half-written.


def test_one_writer_per_run_directory(copy_data, tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(_cli("train", "--data", copy_data, "--out", run, "--max-steps", "100000",
                                 "--save-every-steps", "5", *TINY), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(RunDir(run).step(5), proc)
        with pytest.raises(CheckpointError, match=f"in use by another training process \\(PID {proc.pid}\\)"):
            resume(run, progress=False)
        assert main(["train", "--data", str(copy_data), "--out", str(run), *TINY]) == 2  # a run already
    finally:
        proc.kill()  # SIGKILL: the OS releases the lock
        proc.wait()
    step = int(RunDir(run).latest(resumable=True).stem.split("_")[1])
    assert resume(run, progress=False, max_steps=step + 1)["step"] == step + 1


STALL_IN_CONFIG_WRITE = r"""
import pathlib, sys, time
import aiayn.files as files

marker, argv = pathlib.Path(sys.argv[1]), sys.argv[2:]
write_json = files.write_json

def stall(path, obj):
    if pathlib.Path(path).name != "config.json":
        return write_json(path, obj)
    def write(tmp):
        tmp.write_text('{"model": {"d_mo')  # half written when the kill comes
        marker.touch()
        time.sleep(600)
    files.atomic_write(path, write)

files.write_json = stall
from aiayn.cli import main
sys.exit(main(argv))
"""


def test_kill_during_the_config_write_leaves_a_run_that_starts_again(copy_data, tmp_path, capsys):
    run, marker = tmp_path / "run", tmp_path / "writing-config"
    proc = subprocess.Popen([sys.executable, "-c", STALL_IN_CONFIG_WRITE, str(marker), "train", "--data",
                             str(copy_data), "--out", str(run), "--max-steps", "2", *TINY], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(marker, proc)
    finally:
        proc.kill()
        proc.wait()
    assert not (run / "config.json").exists() and any(p.name.startswith(".config.json.") for p in run.iterdir())
    assert main(["train", "--resume", str(run)]) == 1
    assert "interrupted before its config was written" in capsys.readouterr().err
    assert main(["train", "--data", str(copy_data), "--out", str(run), "--max-steps", "2", *TINY]) == 0
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []  # its temp file is gone
    assert RunDir(run).latest(resumable=True).name == "step_00000002.safetensors"


def test_a_run_with_a_config_but_no_checkpoint_resumes_from_step_0(copy_data, tmp_path, monkeypatch):
    run = tmp_path / "run"

    def killed(*args, **kw):
        raise KeyboardInterrupt  # the start died after config.json, before the first checkpoint

    monkeypatch.setattr(train_mod, "_loop", killed)
    with pytest.raises(KeyboardInterrupt):
        train(copy_data, run, ModelConfig.preset("tiny"), tiny_tc(), progress=False)
    monkeypatch.undo()
    assert (run / "config.json").is_file() and not RunDir(run).checkpoints
    with pytest.raises(UsageError, match="it is a run already"):
        train(copy_data, run, ModelConfig.preset("tiny"), tiny_tc(), progress=False)
    assert resume(run, progress=False)["step"] == 2


def test_what_a_kill_leaves_is_cleaned_when_training_starts(lab, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(lab.run, run)
    stale = [run / ".config.json.k2j4h1_x.tmp", run / rundir.CHECKPOINT_DIR / ".step_00000004.safetensors.abcd1234.tmp"]
    kept = [run / "notes.tmp", run / "notes.txt"]  # not the temp files of an atomic write
    for p in stale + kept:
        p.write_bytes(b"x" * 1000)
    with open(run / "log.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 3, "lo')  # a log line torn by the kill
    assert resume(run, progress=False, max_steps=3)["step"] == 3
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)
    assert "removed 2 temp file(s)" in capsys.readouterr().out
    logs = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]  # every line JSON again
    assert [r["step"] for r in logs if r["kind"] == "train"] == [1, 2, 3]


def test_an_over_long_dev_pair_is_scored_with_its_own_batch_limit(tmp_path):
    src, tgt = write_copy_corpus(tmp_path / "raw", 200, seed=31)
    long_src, long_tgt = tmp_path / "long.src", tmp_path / "long.tgt"
    long_src.write_text("alpha bravo charlie delta echo fox golf hotel india juliet " * 8 + "\nalpha bravo\n")
    long_tgt.write_text("ALPHA BRAVO CHARLIE DELTA ECHO FOX GOLF HOTEL INDIA JULIET " * 8 + "\nBRAVO ALPHA\n")
    data = tmp_path / "data"
    prepare(src, tgt, data, vocab_size=100, valid=(long_src, long_tgt))
    valid = load_split(data, "valid")
    assert max(valid.src_lengths.max(), valid.tgt_lengths.max()) > 64  # longer than the training batch limit
    summary = train(data, tmp_path / "run", ModelConfig.preset("tiny"), tiny_tc(max_tokens=64, max_steps=4),
                    progress=False)
    logs = [json.loads(x) for x in (tmp_path / "run/log.jsonl").read_text().splitlines()]
    assert summary["step"] == 4 and [r["step"] for r in logs if r["kind"] == "valid"] == [2, 4]


def test_outputs_are_written_whole_or_not_at_all(lab, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out.txt"
    out.write_text("the previous translations\n")
    with pytest.raises(RuntimeError), files.atomic_text_output(out) as f:
        f.write("half of the new ones\n")
        raise RuntimeError("interrupted")
    assert out.read_text() == "the previous translations\n" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    umask = os.umask(0)
    os.umask(umask)
    with files.atomic_text_output(tmp_path / "new.txt") as f:
        f.write("done\n")
    assert (tmp_path / "new.txt").read_text() == "done\n"
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o666 & ~umask
    with files.atomic_text_output("/dev/null") as f:  # a device is written, never replaced
        f.write("x\n")

    class Interrupted(list):  # Ctrl-C while the translations are being written
        def __iter__(self):
            yield from self[:1]
            raise KeyboardInterrupt

    monkeypatch.setattr(Translator, "translate_nbest",
                        lambda self, lines, *_, **__: Interrupted(
                            [[Translation("x", 0.0, [])]] * len(lines)))
    assert main(["translate", "--checkpoint", str(lab.run), "--input", str(lab.root / "good.txt"), "--output",
                 str(out)]) == 130
    assert out.read_text() == "the previous translations\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.txt", "out.txt"]
    capsys.readouterr()


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_training_saves_at_once_and_exits_128_plus_the_signal(copy_data, tmp_path, monkeypatch, signum,
                                                                           code, capsys):
    noam_lr, perplexity, dev_evaluations = train_mod.noam_lr, selection_mod.perplexity, []

    def lr(step, *args, **kw):
        if step == 3:
            os.kill(os.getpid(), signum)  # arrives during update 3
        return noam_lr(step, *args, **kw)

    monkeypatch.setattr(train_mod, "noam_lr", lr)
    monkeypatch.setattr(selection_mod, "perplexity", lambda *a, **k: dev_evaluations.append(1) or perplexity(*a, **k))
    run = tmp_path / "run"
    assert main(["train", "--data", str(copy_data), "--out", str(run), *TINY, "--max-steps", "1000",
                 "--save-every-steps", "2"]) == code
    assert RunDir(run).latest(resumable=True).name == "step_00000003.safetensors"
    assert len(dev_evaluations) == 1  # at step 2; the save on the signal skips it
    logs = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logs if r["kind"] == "valid"] == [2]
    assert "interrupted at step 3" in capsys.readouterr().out


def test_quickstart_stops_on_a_signal_and_later_resumes_to_its_budget(tmp_path, monkeypatch, capsys):
    """train's clock is the test's: one second per update (the schedule is asked once per update), so the 9 s budget
    is 9 updates on an idle or a loaded machine alike; on the wall clock a loaded machine spent it before the signal
    at update 5 came."""
    out = tmp_path / "qs"
    budget_s, signal_at, clock = 9, [5], [0.0]
    argv = ["quickstart", "--out", str(out), "--minutes", str(budget_s / 60), "--preset", "tiny",
            "--vocab-size", "1000", "--beam", "1", "--no-progress"]
    noam_lr = train_mod.noam_lr

    def lr(step, *args, **kw):
        clock[0] += 1.0
        if step in signal_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return noam_lr(step, *args, **kw)

    monkeypatch.setattr(train_mod, "noam_lr", lr)
    monkeypatch.setattr(train_mod, "time", SimpleNamespace(time=lambda: clock[0]))
    assert main(argv) == 143
    run = out / "run"
    assert "quickstart stopped" in capsys.readouterr().out
    assert not (run / rundir.AVERAGED).exists() and not (run / "test.hyp").exists()  # it did not go on
    last = RunDir(run).latest(resumable=True)
    assert last.name == "step_00000005.safetensors" and ckpt.load_trainer_state(last)["train_seconds"] == 5

    signal_at.clear()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "was interrupted after" in printed and "test BLEU" in printed
    last = RunDir(run).latest(resumable=True)
    seconds = ckpt.load_trainer_state(last)["train_seconds"]
    # from step 5 and 5 s on, to the budget and no further
    assert budget_s - 1 <= seconds <= budget_s + 1 and int(last.stem.split("_")[1]) == seconds
    assert (run / rundir.AVERAGED).is_file() and (run / "test.hyp").is_file()
