"""benchmarks/peers/hf_seq2seq.py, the HF Trainer peer of the time-to-BLEU harness: its batches are what HF's own
collator makes, and it trains, checkpoints, averages and decodes end to end on a small corpus."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID

REPO = Path(__file__).resolve().parents[1]
pytest.importorskip("transformers")
pytest.importorskip("accelerate")


def test_collate_pads_masks_and_shifts_like_hf():
    from transformers.models.marian.modeling_marian import shift_tokens_right

    from benchmarks.peers.hf_seq2seq import collate

    b = collate([{"input_ids": [7, 8, EOS_ID], "labels": [9, EOS_ID]},
                 {"input_ids": [5, EOS_ID], "labels": [4, 6, 11, EOS_ID]}])
    assert b["input_ids"].tolist() == [[7, 8, EOS_ID], [5, EOS_ID, PAD_ID]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert b["labels"].tolist() == [[9, EOS_ID, -100, -100], [4, 6, 11, EOS_ID]]
    assert torch.equal(b["decoder_input_ids"], shift_tokens_right(b["labels"], PAD_ID, BOS_ID))


def test_trains_checkpoints_and_decodes(copy_data, tmp_path):
    recipe = ('{"enc_layers": 1, "dec_layers": 1, "d_model": 32, "d_ff": 64, "heads": 2, "dropout": 0.1, '
              '"label_smoothing": 0.1, "warmup": 10, "peak_lr": 0.003, "max_tokens": 512, '
              '"adam_betas_pair": [0.9, 0.98], "adam_eps": 1e-9}')
    out = tmp_path / "hf"
    cmd = [sys.executable, "-m", "benchmarks.peers.hf_seq2seq"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf-home")}
    subprocess.run(cmd + ["train", "--data", str(copy_data), "--out", str(out), "--minutes", "0.02", "--save-every",
                          "1000", "--recipe", recipe, "--device", "cpu"], cwd=REPO, check=True, timeout=300, env=env,
                   capture_output=True)
    saved = sorted(out.glob("checkpoint-*/model.safetensors"))
    assert saved, "the time limit saves a checkpoint"
    src = tmp_path / "test.src"
    src.write_text("alpha bravo\ncharlie\n\n", encoding="utf-8")
    hyp = tmp_path / "test.hyp"
    subprocess.run(cmd + ["decode", "--data", str(copy_data), "--input", str(src), "--output", str(hyp), "--device",
                          "cpu", str(saved[-1].parent), str(saved[-1].parent)], cwd=REPO, check=True, timeout=300,
                   env=env, capture_output=True)
    assert len(hyp.read_text(encoding="utf-8").splitlines()) == 3  # one line out for every line in, empty ones too
