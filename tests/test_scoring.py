"""Forced decoding (aiayn.scoring, `aiayn score`) against the training objective, and translate's --print-scores,
--buffer-size and streaming from a pipe."""

from __future__ import annotations

import math
import os
import select
import subprocess
import sys
import time

import pytest
import torch
from helpers import REPO, save_run, tiny_model

from aiayn.config import BOS_ID, EOS_ID
from aiayn.data import Vocab
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.scoring import score_ids, score_pairs
from aiayn.training.losses import batch_loss


@pytest.fixture(scope="module")
def setup(copy_data):
    vocab = Vocab.load(copy_data / "vocab.model")
    src = (copy_data / "test.src.txt").read_text().splitlines()[:6]
    tgt = (copy_data / "test.tgt.txt").read_text().splitlines()[:6]
    return tiny_model(len(vocab), eos_bias=1.0), vocab, src, tgt


def test_score_is_minus_the_training_nll_of_each_pair(setup):
    """Batched and padded, each pair's score equals -NLL of aiayn.training.losses (eps 0) on that pair alone, and its
    mean divides by words + 1."""
    model, vocab, src, tgt = setup
    tgt = tgt[:5] + [""]  # an empty target: only EOS is scored
    scores = score_pairs(model, vocab, src, tgt, batch_size=4)
    for s, t, got in zip(src, tgt, scores):
        words = vocab.encode(t)
        source = torch.tensor([vocab.encode(s) + [EOS_ID]])
        with torch.no_grad():
            _, nll, n = batch_loss(model, source, torch.tensor([[BOS_ID] + words]), torch.tensor([words + [EOS_ID]]),
                                   eps=0.0, kernel="formula")
        assert got.tokens == n == len(words) + 1
        assert got.total == pytest.approx(-float(nll), abs=1e-4)
        assert got.mean == pytest.approx(got.total / n)


def test_score_of_the_search_own_output_equals_its_token_log_probs(setup):
    """The forced score of each n-best hypothesis is the sum of the search's own per-token log-probs."""
    model, vocab, src, _ = setup
    translator = Translator(model, vocab, SearchConfig(beam=3, nbest=3, max_len_b=10))
    hyps = [h for hs in translator.translate_nbest(src) for h in hs]
    sources = [ids for ids, hs in zip(translator.encode(src), translator.translate_nbest(src)) for _ in hs]
    scores = score_ids(model, sources, [h.tokens + [EOS_ID] for h in hyps], batch_size=5)
    for h, s in zip(hyps, scores):
        assert len(h.positional_scores) == len(h.tokens) + 1 == s.tokens
        assert s.total == pytest.approx(sum(h.positional_scores), abs=1e-4)


def _run(copy_data, tmp_path, setup):
    model, vocab, _, _ = setup
    return save_run(model, copy_data / "vocab.model", tmp_path / "run")


def test_score_cli(setup, copy_data, tmp_path, capsys):
    from aiayn.cli import main

    model, vocab, src, tgt = setup
    run = _run(copy_data, tmp_path, setup)
    (tmp_path / "s").write_text("\n".join(src) + "\n")
    (tmp_path / "t").write_text("\n".join(tgt) + "\n")
    assert main(["score", "--checkpoint", str(run), "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t"),
                 "--output", str(tmp_path / "out")]) == 0
    rows = [line.split("\t") for line in (tmp_path / "out").read_text().splitlines()]
    want = score_pairs(model, vocab, src, tgt)
    assert [(float(a), float(b)) for a, b in rows] == [pytest.approx((w.total, w.mean), abs=1e-3) for w in want]
    (tmp_path / "t").write_text("\n".join(tgt[:4]) + "\n")
    assert main(["score", "--checkpoint", str(run), "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has 6 lines" in err and "has 4" in err


def test_print_scores(setup, copy_data, tmp_path, capsys, monkeypatch):
    """translate --print-scores: TAB sentence score; 'tokens': TAB token log-probs whose sum / lp is that score."""
    from aiayn.cli import main
    from aiayn.decoding.search import length_penalty

    model, vocab, src, _ = setup
    run = _run(copy_data, tmp_path, setup)
    (tmp_path / "s").write_text("\n".join(src) + "\n")
    flags = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "s"), "--no-progress", "--max-len-b",
             "10"]
    assert main(flags) == 0
    plain = capsys.readouterr().out.splitlines()
    assert main([*flags, "--print-scores"]) == 0
    sentence = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row[0] for row in sentence] == plain and all(len(row) == 2 for row in sentence)
    assert main([*flags, "--print-scores", "tokens"]) == 0
    for line, (_, score) in zip(capsys.readouterr().out.splitlines(), sentence):
        text, score2, tokens = line.split("\t")
        logps = [float(p) for p in tokens.split()]
        assert score2 == score
        assert sum(logps) / length_penalty(len(logps), 0.6) == pytest.approx(float(score), abs=1e-3)
    assert main([*flags, "--nbest", "2", "--print-scores", "tokens"]) == 0
    first = capsys.readouterr().out.splitlines()[0].split(" ||| ")
    assert first[0] == "0" and len(first) == 4 and len(first[3].split()) >= 1
    assert main([*flags, "--buffer-size", "0"]) == 2
    assert "--buffer-size: must be an integer >= 1, got 0" in capsys.readouterr().err


def test_greedy_translate_computes_log_probs_only_for_printed_scores(setup, copy_data, tmp_path, capsys, monkeypatch):
    """translate --beam 1 without --print-scores takes each step's argmax of the logits, no log-softmax (what
    CTranslate2 does unless asked for scores): the same lines as with --print-scores, which computes them."""
    import aiayn.decoding.search as search
    from aiayn.cli import main

    _, _, src, _ = setup
    run = _run(copy_data, tmp_path, setup)
    (tmp_path / "s").write_text("\n".join(src) + "\n")
    flags = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "s"), "--no-progress", "--max-len-b",
             "10", "--beam", "1"]
    calls = []
    log_probs = search._log_probs
    monkeypatch.setattr(search, "_log_probs", lambda logits: calls.append(1) or log_probs(logits))
    assert main(flags) == 0
    plain = capsys.readouterr().out.splitlines()
    assert not calls
    assert main([*flags, "--print-scores"]) == 0
    scored = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert calls and [text for text, _ in scored] == plain and all(math.isfinite(float(s)) for _, s in scored)


def test_buffer_size_keeps_order_and_numbering(setup, copy_data, tmp_path, capsys):
    from aiayn.cli import main

    _, _, src, _ = setup
    run = _run(copy_data, tmp_path, setup)
    (tmp_path / "s").write_text("\n".join(src) + "\n")
    flags = ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "s"), "--no-progress", "--max-len-b",
             "10", "--nbest", "2"]
    assert main(flags) == 0
    whole = capsys.readouterr().out
    assert main([*flags, "--buffer-size", "4"]) == 0
    assert capsys.readouterr().out == whole  # n-best line numbers count across buffers


def _readline(stream, timeout: float) -> str:
    """One line from a pipe, or fail after `timeout` seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"no line within {timeout} s"
    return stream.readline()


def test_stdin_pipe_is_answered_line_by_line(setup, copy_data, tmp_path):
    """A line written into translate's stdin comes back before stdin is closed; then the next one."""
    _, _, src, _ = setup
    run = _run(copy_data, tmp_path, setup)
    want = Translator.load(run, SearchConfig(max_len_b=10)).translate(src[:2])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "translate", "--checkpoint", str(run), "--max-len-b",
                             "10"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
    try:
        for line, expected in zip(src[:2], want):
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            start = time.monotonic()
            assert _readline(proc.stdout, 60) == expected + "\n"
            assert time.monotonic() - start < 60
        assert proc.poll() is None  # still waiting for more input
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
