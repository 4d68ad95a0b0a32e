"""The GPU scripts in their CPU smoke mode: what a lent GPU runs must run in one go, so its parts are run here first
on tiny shapes (benchmarks/gpu/all.sh with SMOKE=1, benchmarks/gpu/decode.py --cpu)."""

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_decode_benchmark_cpu_smoke(tmp_path):
    """decode.py --cpu: every engine decodes the same forced-length batches; aiayn eager and graphed give the same
    words (HF where transformers is installed), and every cell has its speed."""
    pytest.importorskip("transformers")
    out = tmp_path / "decode.jsonl"
    subprocess.run([sys.executable, "-m", "benchmarks.gpu.decode", "--cpu", "--out", str(out)], cwd=REPO, check=True,
                   capture_output=True, text=True, timeout=300)
    cells = [r for r in records(out) if r["what"] == "decode"]
    assert {(r["engine"], r["beam"], r["sents"]) for r in cells} == {
        (e, b, n) for e in ("aiayn", "aiayn graphed", "hf") for b in (1, 4) for n in (2, 4)}
    assert all("error" not in r and r["sent_s"] > 0 and r["out_tokens"] == 5 for r in cells)
    graphed = [r for r in cells if r["engine"] == "aiayn graphed"]
    assert all(r["same_as_aiayn"] == r["sents"] for r in graphed)


def test_gpu_sitting_script_cpu_smoke(tmp_path):
    """all.sh's train part with SMOKE=1 (aiayn's cells alone, tiny, on the CPU): each of its commands runs with the
    flags the lease gives it and writes its records (a flag one of them does not know would leave no record)."""
    pytest.importorskip("transformers")
    env = {**os.environ, "SMOKE": "1", "OUT": str(tmp_path), "PY": sys.executable, "TRAIN_STEPS": "1"}
    subprocess.run(["bash", "benchmarks/gpu/all.sh", "train"], cwd=REPO, env=env, check=True,
                   capture_output=True, text=True, timeout=600)
    train = [r for r in records(tmp_path / "gpu_train.jsonl") if r["what"] == "train"]
    calls = [r for r in records(tmp_path / "gpu_train.jsonl") if r["what"] == "device"]
    assert len(calls) == 5 and len(train) == 5 and all("error" not in r and r["impl"] == "aiayn" for r in train)


def test_gpu_userpath_part_cpu_smoke(copy_data, tmp_path):
    """all.sh's userpath part with SMOKE=1 on a tiny run: `aiayn translate` with the fixed-shape and the eager search,
    fp32 and bf16, and HF generate on the exported model, each a whole process timed, and a BLEU line for each; the
    two searches give the same file."""
    pytest.importorskip("transformers")
    import shutil

    from helpers import save_run, tiny_model

    from aiayn.data import Vocab

    qs = tmp_path / "qs"
    vocab_model = copy_data / "vocab.model"
    save_run(tiny_model(len(Vocab.load(vocab_model)), eos_bias=4.0), vocab_model, qs / "run")
    (qs / "data").mkdir()
    for name in ("test.src.txt", "test.tgt.txt"):
        lines = (copy_data / name).read_text().splitlines()[:6]
        (qs / "data" / name).write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    env = {**os.environ, "SMOKE": "1", "OUT": str(out), "PY": sys.executable, "QS_DIR": str(qs)}
    subprocess.run(["bash", "benchmarks/gpu/all.sh", "userpath"], cwd=REPO, env=env, check=True, capture_output=True,
                   text=True, timeout=600)
    report = (out / "userpath.txt").read_text()
    assert "failed" not in report, report
    for label in ("aiayn translate --precision fp32 --search-impl fixed", "aiayn translate --precision bf16 "
                  "--search-impl eager", "HF generate fp32", "HF generate bf16"):
        assert f"{label}: " in report and " s, " in report.split(f"{label}: ")[1].splitlines()[0]
    assert report.count("BLEU userpath-") == 6
    fixed, eager = (out / f"userpath-aiayn-fp32-{impl}.hyp" for impl in ("fixed", "eager"))
    assert fixed.read_text() == eager.read_text() and len(fixed.read_text().splitlines()) == 6
    shutil.rmtree(qs)


def test_realtext_benchmark_smoke(copy_data, tmp_path):
    """benchmarks/e2e/realtext.py end to end on a tiny run and 4 lines, one round: every cell (aiayn translate, in
    process with both stopping rules, CTranslate2 direct, aiayn --engine ct2) runs and the table has its row; a second
    call resumes (runs nothing again) and reports the same."""
    pytest.importorskip("ctranslate2")
    from helpers import save_run, tiny_model

    from aiayn.data import Vocab

    run = save_run(tiny_model(len(Vocab.load(copy_data / "vocab.model")), eos_bias=4.0), copy_data / "vocab.model",
                   tmp_path / "run")
    for name in ("src", "ref"):
        lines = (copy_data / f"test.{'src' if name == 'src' else 'tgt'}.txt").read_text().splitlines()[:4]
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, "-m", "benchmarks.e2e.realtext", "--run", str(run), "--src", str(tmp_path / "src.txt"),
           "--ref", str(tmp_path / "ref.txt"), "--threads", "1", "--precisions", "fp32", "--rounds", "1",
           "--engine-ct2", "--out", str(tmp_path / "out")]
    first = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True, timeout=300).stdout
    cells = records(tmp_path / "out" / "cells.jsonl")
    assert {c["system"] for c in cells} == {"aiayn", "aiayn (in)", "aiayn (in), paper's rule", "ct2",
                                            "aiayn --engine ct2"}
    assert all(c["wall_s"] > 0 and c["peak_mb"] > 0 for c in cells)
    row = next(line for line in first.splitlines() if line.startswith("| 1 | fp32 | float32 |"))
    assert "4 / 4" in row  # aiayn's lines against its own fp32 output
    again = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    assert len(records(tmp_path / "out" / "cells.jsonl")) == len(cells) and "round 0" not in again.stderr
