"""One row: train (or resume) it to a step, then score its last checkpoint the paper's way."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from aiayn import files, rundir
from aiayn.data import Vocab, load_split
from aiayn.data.folder import META_FILE
from aiayn.decoding.search import PAPER_SEARCH
from aiayn.decoding.translator import Translator
from aiayn.errors import DataError
from aiayn.experiments.table3.plan import (
    RESULT,
    Plan,
    add_time,
    dev_curve,
    finished,
    read_result,
    read_time,
    run_dir,
)
from aiayn.experiments.table3.rows import paper_row, replica_seed, row_of
from aiayn.metrics import CorpusMetric, corpus_bleu, perplexity
from aiayn.model import Transformer, count_parameters
from aiayn.rundir import RunDir
from aiayn.runtime import Runtime, cpu_model, resolve_device
from aiayn.training import checkpoint as ckpt
from aiayn.training.train import resume, train


def train_row(out: Path, plan: Plan, name: str, max_steps: int, device: str = "auto", threads: int = 0,
            keep_checkpoints: bool = False, jobs: int = 1) -> dict[str, Any] | None:
    """Train row `name` of the plan to `max_steps` (a new run, or resuming the one there); when that is the plan's
    step count, score it and write OUT/<name>/result.json. Returns the result, or None if not (yet) scored.
    Raises KeyboardInterrupt if a signal stopped the training (after it saved a checkpoint to resume from)."""
    out = Path(out)
    if finished(out, name):
        return read_result(out, name)
    run = run_dir(out, name)
    t0 = time.time()
    if RunDir(run).is_run:
        summary = resume(run, progress=False, max_steps=max_steps)
    else:
        if run.exists():  # created, but killed before its config was written
            shutil.rmtree(run)
        cfg = plan.model_config(name)
        summary = train(Path(plan.data), run, cfg, plan.train_config(max_steps, device, threads, replica_seed(name)),
                        progress=False)
    add_time(out, name, time.time() - t0, summary["elapsed_s"])
    if summary["interrupted_by"] is not None:
        raise KeyboardInterrupt
    if plan.steps is None or summary["step"] < plan.steps:
        return None
    result = score_row(out, plan, name, device, jobs)
    if not keep_checkpoints:
        shutil.rmtree(run / rundir.CHECKPOINT_DIR, ignore_errors=True)
        RunDir(run).best.unlink(missing_ok=True)
    return result


def score_row(out: Path, plan: Plan, name: str, device: str = "auto", jobs: int = 1) -> dict[str, Any]:
    """Dev perplexity and dev BLEU of the row's last checkpoint (Table 3's protocol) -> OUT/<name>/result.json."""
    run = run_dir(out, name)
    last = RunDir(run).latest()
    if last is None:
        raise DataError(f"row {name}: no checkpoint in {run} to score")
    state, cfg, meta = ckpt.load_weights(last)
    dev = resolve_device(device)
    model = Transformer(cfg)
    model.load_state_dict(state)
    model.to(dev).eval()
    valid = load_split(plan.data, "valid")
    t0 = time.time()
    ppl = perplexity(model, valid, plan.train["max_tokens"], 0.0, Runtime(dev))  # fp32, eps 0: the true NLL
    hyps, bleu = dev_bleu(model, Path(plan.data), valid.text_paths, plan.dev_sentences, dev)
    files.write_text(out / name / "dev.hyp", "".join(h + "\n" for h in hyps))
    times = read_time(out, name)
    result = {
        "row": name, "of": row_of(name), "seed": RunDir(run).config["train"]["seed"], "scale": plan.scale,
        "steps": int(meta.get("step", -1)), "model": cfg.to_dict(),
        "params": count_parameters(model), "dev_ppl": ppl.ppl, "dev_nll_per_token": ppl.nll / ppl.tokens,
        "dev_tokens": ppl.tokens, "dev_bleu": bleu.score, "bleu_signature": bleu.signature,
        "dev_sentences": plan.dev_sentences, "bleu_sentences": len(hyps), "train_minutes": times["train_s"] / 60,
        "train_calls": times["calls"], "score_seconds": time.time() - t0, "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "dtype": RunDir(run).config["train"]["dtype"], "concurrent_jobs": jobs, "train": plan.train,
        "backbone": plan.backbone,
        "data": plan.data, "data_sha256": data_digest(Path(plan.data)), "machine": machine(dev),
        "dev_curve": dev_curve(out, name), "paper": paper_row(name),
    }
    files.write_json(out / name / RESULT, result)
    return result


def data_digest(data: Path) -> str | None:
    """The prepared data's content digest (meta.json's content_sha256), so that merged rows can be checked alike."""
    try:
        return json.loads((data / META_FILE).read_text(encoding="utf-8")).get("content_sha256")
    except (OSError, ValueError):
        return None


def machine(dev: torch.device) -> dict[str, Any]:
    """What trained and scored the row: CPU model, the CPU kernels torch runs (an ISA reproduction shows here), torch's
    version, the GPU if any."""
    return {"cpu": cpu_model(), "cpu_kernels": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None}


def dev_bleu(model: Transformer, data: Path, text_paths: tuple[Path, Path], sentences: int | None,
             dev: torch.device) -> tuple[list[str], CorpusMetric]:
    """Beam-search translations of the dev sources (the first `sentences` of them; None: all) and their sacreBLEU."""
    src_path, ref_path = text_paths
    sources = files.read_lines(src_path)[:sentences]
    refs = files.read_lines(ref_path)[:sentences]
    translator = Translator(model, Vocab.load(data), PAPER_SEARCH, device=dev,
                            batch_size=128 if dev.type == "cuda" else 64)
    hyps = translator.translate(sources)
    return hyps, corpus_bleu(hyps, refs)
