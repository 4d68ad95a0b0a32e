"""Dev metrics during training and what they decide: BLEU and chrF of the dev translations (equal to sacreBLEU's on
the checkpoint's own translations), checkpoint_best by --best-metric, --patience stopping at the evaluation worked out
by hand, a run resumed mid-patience deciding as the uninterrupted one, evaluation time counted in --max-minutes, and
the bad inputs as one line each."""

import dataclasses
import time
from pathlib import Path

import pytest
import sacrebleu
import torch
from conftest import write_copy_corpus

from aiayn import rundir
from aiayn.cli import main
from aiayn.config import ModelConfig
from aiayn.errors import UsageError
from aiayn.rundir import RunDir
from aiayn.training import checkpoint as ckpt
from aiayn.training.selection import EarlyStopping
from aiayn.training.train import TrainConfig, resume, train

TINY = ModelConfig.preset("tiny")


def _valid_records(run: Path) -> list[dict]:
    """The dev evaluations of a run's log, without what differs from run to run (wall-clock times)."""
    drop = ("time", "eval_seconds")
    return [{k: v for k, v in r.items() if k not in drop} for r in RunDir(run).log if r["kind"] == "valid"]


def test_early_stopping_by_hand():
    bleu = EarlyStopping("bleu", patience=2)
    # 10 best; 12 better; 11 worse (1); 12 only equal, not better (2): stop
    assert [bleu.update(v, step) for step, v in ((2, 10.0), (4, 12.0), (6, 11.0), (8, 12.0))] == [
        True, True, False, False]
    assert bleu.stop and (bleu.best, bleu.best_step, bleu.evals_since_best) == (12.0, 4, 2)
    loss = EarlyStopping("loss", patience=0)  # lower is better; patience 0 never stops
    assert [loss.update(v, s) for s, v in enumerate([3.0, 2.0, 2.5, 2.5, 2.5, 1.0])] == [
        True, True, False, False, False, True]
    assert not loss.stop and loss.best == 1.0
    loss.load_state_dict(bleu.state_dict())
    assert loss.state_dict() == {"best": 12.0, "best_step": 4, "evals_since_best": 2}


@pytest.fixture
def scripted(monkeypatch):
    """Dev BLEU by step from a table (chrF = BLEU + 1), instead of translating; the table is set by the test."""
    import aiayn.training.selection

    table: dict[int, float] = {}
    judge = aiayn.training.train.judge

    def judge_at(state, *a, **k):
        table["now"] = state.step
        return judge(state, *a, **k)

    def scores(model, valid, tc):
        time.sleep(table.get("sleep", 0.0))
        return {"bleu": table[table["now"]], "chrf": table[table["now"]] + 1}

    monkeypatch.setattr(aiayn.training.train, "judge", judge_at)
    monkeypatch.setattr(aiayn.training.selection, "dev_translation_scores", scores)
    return table


SELECT = TrainConfig(max_steps=40, max_tokens=400, warmup=40, save_every_steps=2, save_every_minutes=0, log_every=2,
                     keep_last=50, threads=1, eval_bleu_lines=5, best_metric="bleu", patience=2)
# By hand: best 12 at step 4; step 6 worse (1), step 8 only equal (2): patience 2 stops at step 8.
TABLE = {2: 10.0, 4: 12.0, 6: 11.0, 8: 12.0, 10: 30.0, 12: 31.0}


def test_patience_stops_at_the_predicted_evaluation_and_best_is_its_checkpoint(copy_data, tmp_path, scripted):
    scripted.update(TABLE)
    summary = train(copy_data, tmp_path / "run", TINY, SELECT, progress=False)
    assert summary["stopped_early"] and summary["step"] == 8
    assert summary["best"] == {"metric": "bleu", "value": 12.0, "step": 4}
    recs = _valid_records(tmp_path / "run")
    assert [(r["step"], r["bleu"], r["chrf"], r["improved"], r["evals_since_best"]) for r in recs] == [
        (2, 10.0, 11.0, True, 0), (4, 12.0, 13.0, True, 0), (6, 11.0, 12.0, False, 1), (8, 12.0, 13.0, False, 2)]
    assert [p.name for p in RunDir(tmp_path / "run").checkpoints][-1] == "step_00000008.safetensors"
    best, _, meta = ckpt.load_weights(tmp_path / "run" / rundir.BEST)
    at_4 = ckpt.load_weights(RunDir(tmp_path / "run").step(4))[0]
    assert meta["step"] == "4" and all(torch.equal(best[k], at_4[k]) for k in best)
    # Resuming a run that stopped early trains no further: the decision is in its checkpoint.
    assert resume(tmp_path / "run", progress=False, max_steps=80)["step"] == 8


def test_best_metric_loss_without_patience_runs_to_the_end_keeping_the_lowest_dev_loss(copy_data, tmp_path,
                                                                                          scripted):
    scripted.update(TABLE)
    tc = dataclasses.replace(SELECT, max_steps=12, best_metric="loss", patience=0)
    summary = train(copy_data, tmp_path / "run", TINY, tc, progress=False)
    assert summary["step"] == 12 and not summary["stopped_early"]
    recs = _valid_records(tmp_path / "run")
    lowest = min(recs, key=lambda r: r["loss"])
    assert summary["best"] == {"metric": "loss", "value": lowest["loss"], "step": lowest["step"]}
    assert [r["improved"] for r in recs] == [r["loss"] == min(x["loss"] for x in recs[: i + 1])
                                             for i, r in enumerate(recs)]
    assert ckpt.read_header(tmp_path / "run" / rundir.BEST)[0]["step"] == str(lowest["step"])


def test_resume_mid_patience_decides_as_the_uninterrupted_run(copy_data, tmp_path, scripted):
    scripted.update({**TABLE, 8: 11.5, 10: 11.0})  # best 12 at step 4; 6, 8, 10 worse: patience 3 stops at 10
    tc = dataclasses.replace(SELECT, patience=3)
    ref = train(copy_data, tmp_path / "ref", TINY, tc, progress=False)
    assert ref["stopped_early"] and ref["step"] == 10
    # Stopped at step 6, one evaluation without improvement counted, then resumed to the same budget.
    cut = train(copy_data, tmp_path / "run", TINY, dataclasses.replace(tc, max_steps=6), progress=False)
    assert not cut["stopped_early"] and _valid_records(tmp_path / "run")[-1]["evals_since_best"] == 1
    assert ckpt.load_trainer_state(RunDir(tmp_path / "run").step(6))["early_stopping"] == {
        "best": 12.0, "best_step": 4, "evals_since_best": 1}
    again = resume(tmp_path / "run", progress=False, max_steps=40)
    assert again["stopped_early"] and again["step"] == 10 and again["best"] == ref["best"]
    assert _valid_records(tmp_path / "run") == _valid_records(tmp_path / "ref")
    for name in ("checkpoints/step_00000010.safetensors", rundir.BEST):
        a, b = ckpt.load_weights(tmp_path / "ref" / name)[0], ckpt.load_weights(tmp_path / "run" / name)[0]
        assert all(torch.equal(a[k], b[k]) for k in a), name


def test_evaluation_time_counts_against_max_minutes(copy_data, tmp_path, scripted):
    scripted.update({step: 1.0 for step in range(1, 100)} | {"sleep": 1.0})
    # 2.5 s of wall time, an evaluation of >= 1 s after every step: the budget is checked after each step, before
    # its evaluation, so at most 3 evaluations start within it and the step that finds it spent is the 4th at most.
    # Were evaluation time left out of the budget, 2.5 s of tiny steps would be dozens.
    tc = dataclasses.replace(SELECT, max_steps=1000, max_minutes=2.5 / 60, save_every_steps=1, patience=0)
    summary = train(copy_data, tmp_path / "run", TINY, tc, progress=False)
    recs = [r for r in RunDir(tmp_path / "run").log if r["kind"] == "valid"]
    assert 1 <= summary["step"] <= 4 and len(recs) == summary["step"]
    assert all(r["eval_seconds"] >= 1.0 for r in recs)


def test_dev_bleu_and_chrf_are_sacrebleu_on_the_checkpoints_own_translations(copy_data, tmp_path):
    from aiayn.decoding.search import SearchConfig
    from aiayn.decoding.translator import Translator

    tc = dataclasses.replace(SELECT, max_steps=60, save_every_steps=60, eval_bleu_lines=12, eval_beam=2,
                             best_metric="chrf", patience=0, lr_factor=2.0)
    train(copy_data, tmp_path / "run", TINY, tc, progress=False)
    (rec,) = [r for r in RunDir(tmp_path / "run").log if r["kind"] == "valid"]
    src = (copy_data / "valid.src.txt").read_text().splitlines()[:12]
    refs = (copy_data / "valid.tgt.txt").read_text().splitlines()[:12]
    translator = Translator.load(RunDir(tmp_path / "run").step(60), SearchConfig(beam=2))
    hyps = translator.translate(src)
    assert any(hyps)  # something to score
    assert rec["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-9)
    assert rec["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=1e-9)
    assert rec["chrf"] > 0 and rec["eval_seconds"] > 0 and "loss" in rec


@pytest.fixture(scope="module")
def no_dev_data(tmp_path_factory) -> Path:
    from aiayn.data import prepare

    root = tmp_path_factory.mktemp("nodev")
    prepare(*write_copy_corpus(root / "raw", 100, seed=5), root / "data", vocab_size=60)
    return root / "data"


@pytest.mark.parametrize("flags, says", [
    (["--patience", "2"], "--patience need(s) a dev set"),
    (["--best-metric", "bleu", "--eval-bleu-lines", "5"], "--eval-bleu-lines and --best-metric bleu need(s) a dev set"),
])
def test_dev_options_without_dev_data_are_one_line(no_dev_data, tmp_path, capsys, flags, says):
    assert main(["train", "--data", str(no_dev_data), "--out", str(tmp_path / "run"), "--preset", "tiny",
                 "--threads", "1", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_best_metric_bleu_needs_eval_lines_and_a_known_metric_only(capsys):
    with pytest.raises(UsageError, match="--best-metric chrf needs --eval-bleu-lines N"):
        TrainConfig(best_metric="chrf")
    with pytest.raises(UsageError, match="best_metric must be one of loss, bleu, chrf"):
        TrainConfig(best_metric="ter")
    assert main(["train", "--data", "x", "--out", "y", "--best-metric", "ter"]) == 2
    assert "invalid choice: 'ter'" in capsys.readouterr().err
