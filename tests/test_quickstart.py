"""The README's main job, end to end, shrunk: the shipped corpus, a tiny model, seconds of training."""

import json

from aiayn import rundir
from aiayn.data.folder import run_languages
from aiayn.quickstart import quickstart
from aiayn.rundir import RunDir


def test_quickstart_end_to_end_and_rerun_reuses(tmp_path, capsys):
    out = tmp_path / "qs"
    result = quickstart(out, minutes=0.1, preset="tiny", vocab_size=1000, beam=1, progress=False)
    printed = capsys.readouterr().out
    assert "test BLEU" in printed and "nrefs:1|case:mixed" in printed and "aiayn translate" in printed
    assert 0.0 <= result["bleu"] <= 100.0
    run = out / "run"
    assert (run / rundir.AVERAGED).is_file() and (run / "test.hyp").is_file()
    model = json.loads((run / "config.json").read_text())["model"]  # the shape trained is the shape announced
    assert (f"{model['n_enc_layers']}+{model['n_dec_layers']} layers, d_model {model['d_model']}, d_ff "
            f"{model['d_ff']}, {model['n_heads']} heads, 1,000 pieces") in printed
    n_test = len((out / "data" / "test.tgt.txt").read_text(encoding="utf-8").splitlines())
    assert len((run / "test.hyp").read_text(encoding="utf-8").splitlines()) == n_test
    checkpoints = RunDir(run).checkpoints
    assert run_languages(run) == ("en", "es")  # serve and export answer for the Bible's pair
    # Running it again reuses the prepared data and the trained run.
    quickstart(out, minutes=0.1, preset="tiny", vocab_size=1000, beam=1, progress=False)
    again = capsys.readouterr().out
    assert "already trained; reusing it" in again and "reusing" in again.split("[2/5]")[0]
    assert RunDir(run).checkpoints == checkpoints


def test_quickstart_recipe_defaults_and_overrides(tmp_path):
    """The quickstart's measured recipe (RESULTS.md): no dropout, the rate annealed over the last 30 % of the time,
    the last checkpoint alone; --set and the flags override it, and the run's config.json records what ran."""
    quickstart(tmp_path / "a", minutes=0.05, preset="tiny", vocab_size=1000, beam=1, progress=False)
    saved = json.loads((tmp_path / "a" / "run" / "config.json").read_text())
    assert saved["model"]["dropout"] == 0.0 and saved["train"]["anneal"] == 0.3 and saved["train"]["keep_last"] == 1
    assert saved["model"]["init"] == "fairseq"
    quickstart(tmp_path / "b", minutes=0.05, preset="tiny", vocab_size=1000, beam=1, progress=False,
               model={"dropout": 0.1}, anneal=0.0, average_last=2)
    saved = json.loads((tmp_path / "b" / "run" / "config.json").read_text())
    assert saved["model"]["dropout"] == 0.1 and saved["train"]["anneal"] == 0.0 and saved["train"]["keep_last"] == 2


def test_quickstart_by_steps_trains_exactly_that_many_and_resumes_to_them(tmp_path, capsys):
    """--max-steps: the same model on any machine, however busy; an interrupted run resumes to its step budget."""
    import json

    out = tmp_path / "qs"
    quickstart(out, preset="tiny", vocab_size=1000, beam=1, progress=False, max_steps=6)
    saved = json.loads((out / "run" / "config.json").read_text())
    assert saved["train"]["max_steps"] == 6 and saved["train"]["max_minutes"] == 0
    steps = [r["step"] for r in RunDir(out / "run").log if r["kind"] == "train"]
    assert steps[-1] == 6
    # Asked again for more steps than were trained, it resumes the run up to them.
    capsys.readouterr()
    quickstart(out, preset="tiny", vocab_size=1000, beam=1, progress=False, max_steps=9)
    assert "was interrupted after 6 of its 9 steps; resuming it" in capsys.readouterr().out
    assert [r["step"] for r in RunDir(out / "run").log if r["kind"] == "train"][-1] == 9


def test_quickstart_on_a_missing_gpu_says_so_before_writing_anything(tmp_path):
    import pytest
    import torch

    from aiayn.errors import UsageError

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(UsageError, match="sees no CUDA GPU; use --device cpu"):
        quickstart(tmp_path / "qs", preset="tiny", vocab_size=1000, beam=1, progress=False, max_steps=2,
                   device="cuda")
    assert not (tmp_path / "qs").exists()


def test_the_recipe_follows_the_dtype_and_gives_way_to_what_is_asked():
    """fp32 (CPUs without native bf16) trains a cheaper step than bf16: 4,000 pieces, 2+2 layers at width 192 and
    1k-token batches against 8,000, 3+3 at 256 and 2k (benchmarks/results/quickstart-search-avx2)."""
    from aiayn.quickstart import recipe

    cfg, vocab, tokens = recipe("fp32")
    assert (cfg.n_enc_layers, cfg.n_dec_layers, cfg.d_model, cfg.d_ff, cfg.d_k, vocab, tokens) == (
        2, 2, 192, 768, 48, 4000, 1024)
    assert cfg.dropout == 0.0 and cfg.init == "fairseq"
    cfg, vocab, tokens = recipe("bf16")
    assert (cfg.n_enc_layers, cfg.n_dec_layers, cfg.d_model, vocab, tokens) == (3, 3, 256, 8000, 2048)
    cfg, vocab, tokens = recipe("fp32", model={"n_dec_layers": 3}, vocab_size=8000, max_tokens=1024)
    assert (cfg.n_enc_layers, cfg.n_dec_layers, vocab, tokens) == (2, 3, 8000, 1024)
    cfg, _, _ = recipe("fp32", preset="tiny")  # another preset keeps its own shape
    assert (cfg.n_enc_layers, cfg.d_model) == (2, 32)


def test_quickstart_on_a_prepared_folder_scores_the_first_n_test_sentences(tmp_path, copy_data):
    """data: a prepared-data folder instead of the built-in corpus (nothing prepared in OUT); test_sentences: the
    first N test sentences translated and scored, the rest left alone."""
    out = tmp_path / "qs"
    result = quickstart(out, preset="tiny", beam=1, progress=False, max_steps=3, data=copy_data, test_sentences=7)
    assert not (out / "data").exists() and not (out / "raw").exists()
    assert json.loads((out / "run" / "config.json").read_text())["data"] == str(copy_data.resolve())
    assert result["test_sentences"] == 7
    assert len((out / "run" / "test.hyp").read_text(encoding="utf-8").splitlines()) == 7
