"""`aiayn quickstart`: the whole system on the built-in English->Spanish Bible, on a CPU, in about 13 minutes.

prepare the shipped corpus -> train a small preset in bf16 for a bounded time -> average the last checkpoints
(by default the last one alone: the rate is annealed to 0 at the end) -> translate the held-out book (Gospel of
John) with beam search -> sacreBLEU -> a few example translations.
Everything lands in one folder; running it again reuses the prepared data and a finished run, and resumes a run
that was interrupted (Ctrl-C, SIGTERM, kill) to its time budget. Ctrl-C or SIGTERM during training saves a checkpoint
and stops the quickstart (the result says "interrupted_by").
"""

from __future__ import annotations

import time
from pathlib import Path

from aiayn import files
from aiayn.config import ModelConfig
from aiayn.data import builtin_corpus, prepare
from aiayn.decoding.engine import Engine, EngineOptions, open_engine
from aiayn.decoding.search import SearchConfig
from aiayn.errors import UsageError
from aiayn.metrics import chrf, corpus_bleu
from aiayn.rundir import RunDir
from aiayn.runtime import resolve_device, resolve_dtype
from aiayn.training.run import average, trained_so_far
from aiayn.training.train import TrainConfig, resume, train

# The quickstart's departures from the `small` preset, each measured (RESULTS.md, "Quickstart recipe search";
# docs/model.md): no dropout (a 12-minute run sees each sentence ~3 times, far from overfitting; `--set dropout=0.1`
# puts it back), and fairseq's initialization (`--set init=xavier` puts Xavier back).
MODEL_DEFAULTS = {"dropout": 0.0, "init": "fairseq"}

# The recipe by the dtype training runs in, each chosen by a measured search of quickstart trials
# (benchmarks/e2e/quickstart_search.py; benchmarks/results/quickstart-search-avx2/README.md). bf16 (CPUs that
# multiply bf16 natively, GPUs): `small` with 8,000 pieces, 2k-token batches. fp32 (every other CPU, e.g. AVX2-only
# ones), where a cheaper step does more in 12 minutes than a bigger model: 4,000 pieces, 2+2 layers of width 192
# (d_ff 768, 4 heads of 48), 1k-token batches. `shape` applies to the default preset only; flags and --set override
# all of it.
RECIPES = {
    "bf16": {"vocab_size": 8000, "max_tokens": 2048, "shape": {}},
    "fp32": {"vocab_size": 4000, "max_tokens": 1024,
             "shape": {"n_enc_layers": 2, "n_dec_layers": 2, "d_model": 192, "d_ff": 768, "d_k": 48, "d_v": 48}},
}
DEFAULT_PRESET = "small"
PAIR = ("en", "es")  # recorded with the data: serve and export find it (LibreTranslate's clients ask for en -> es)

EXAMPLES = [
    "In the beginning was the Word.",
    "The people went out to the river to be baptized.",
    "He said to them, \"Follow me, and I will make you fishers of men.\"",
    "Love your neighbor as yourself.",
    "The children were playing in the house of their father.",
]


def quickstart(out: Path, minutes: float = 12.0, preset: str = DEFAULT_PRESET, vocab_size: int | None = None,
               dtype: str = "auto", average_last: int = 1, beam: int = 4, progress: bool = True,
               model: dict | None = None, max_tokens: int | None = None, warmup: int = 400, lr_factor: float = 0.45,
               alpha: float = 0.6, anneal: float = 0.3, max_steps: int = 0, device: str = "auto",
               test_sentences: int | None = None, data: Path | None = None) -> dict:
    """Run the whole job into `out`; returns test BLEU, chrF, the sacreBLEU signature and the minutes taken (or
    {"interrupted_by": signal} if Ctrl-C/SIGTERM stopped the training). model: overrides of the preset's fields
    (e.g. {"dropout": 0.1}) on top of MODEL_DEFAULTS and the dtype's RECIPES shape; vocab_size, max_tokens (None: the
    dtype's RECIPES), warmup, lr_factor, anneal: the recipe (the recipe search varies them). max_steps > 0 trains
    for that many steps instead of `minutes`: the same model on any machine, however busy (the recipe search's
    step-budgeted trials). device: where it trains and translates ("auto": a CUDA GPU when there is one).
    test_sentences: score the first N test sentences only (None: all). data: a prepared-data folder (train, valid,
    test; e.g. Multi30k) instead of the built-in corpus, whose vocabulary then replaces vocab_size's."""
    out = Path(out)
    where = resolve_device(device)  # a clear error for a GPU that is not there, before anything is written
    dtype = resolve_dtype(dtype, where)  # bf16 only where this machine multiplies it natively
    if minutes <= 0:
        raise UsageError(f"the training budget must be > 0 minutes, got {minutes:g}")
    # Every option is checked before anything is written.
    cfg, vocab_size, max_tokens = recipe(dtype, preset, model, vocab_size, max_tokens)
    # A run of ~1,500 steps: ~2k-token batches (more updates in the time: measured better than 4k, RESULTS.md) and
    # the paper's schedule with a 400-step warm-up, scaled to peak at ~1.4e-3 (the paper's base peaks at 7e-4 with
    # 25k-token batches and 4000 warm-up steps), annealed linearly to 0 over the last 30% of the time: the last
    # checkpoint then beats an average of older, much worse ones (RESULTS.md, "Quickstart recipe search").
    if max_steps < 0:
        raise UsageError(f"--max-steps must be >= 0, got {max_steps}")
    by_steps = max_steps > 0
    tc = TrainConfig(max_steps=max_steps if by_steps else 10**9, max_minutes=0 if by_steps else minutes,
                     max_tokens=max_tokens, warmup=warmup, lr_factor=lr_factor, anneal=anneal,
                     save_every_minutes=0 if by_steps else minutes / (average_last + 3),
                     save_every_steps=max(1, max_steps // (average_last + 3)) if by_steps else 0,
                     keep_last=average_last, dtype=dtype, device=str(where), log_every=10)
    budget = f"{max_steps} steps" if by_steps else f"{minutes:g} minutes"
    search = SearchConfig(beam=beam, alpha=alpha)
    t0 = time.time()
    data_dir = _prepared(out, data, vocab_size)

    run = out / "run"
    summary = None
    if not RunDir(run).is_run:  # a new run (or one whose start was interrupted: train reuses it)
        shape = (f"{cfg.n_enc_layers}+{cfg.n_dec_layers} layers, d_model {cfg.d_model}, d_ff {cfg.d_ff}, "
                 f"{cfg.n_heads} heads, {vocab_size:,} pieces, {max_tokens:,}-token batches")
        print(f"[2/5] training in {dtype} on {where}: {shape}; for {budget} into {run}", flush=True)
        summary = train(data_dir, run, cfg, tc, progress=progress)
    elif by_steps and (step := trained_so_far(run)[0]) < max_steps:
        print(f"[2/5] {run} was interrupted after {step} of its {budget}; resuming it", flush=True)
        summary = resume(run, progress=progress, max_steps=max_steps)
    elif not by_steps and (done := trained_so_far(run)[1]) < minutes * 60 - 1:
        print(f"[2/5] {run} was interrupted after {done / 60:.1f} of its {budget}; resuming it", flush=True)
        summary = resume(run, progress=progress, max_minutes=(minutes * 60 - done) / 60)
    else:
        print(f"[2/5] {run} is already trained; reusing it (train longer: aiayn train --resume {run} "
              "--max-minutes 30)", flush=True)
    if summary is not None and summary["interrupted_by"] is not None:
        print(f"quickstart stopped: training was interrupted at step {summary['step']} (checkpoint saved); run the "
              "same command again to finish it", flush=True)
        return {"interrupted_by": summary["interrupted_by"]}

    _average(run, average_last)
    # Decode in the dtype it trained in; fp16 (auto's pick on a GPU without bf16) is no decoding precision: fp32.
    translator = open_engine(run, EngineOptions(engine="aiayn", search=search, device=str(where),
                                                precision="fp32" if dtype == "fp16" else dtype))
    scores = _translate_test(translator, data_dir, run, beam, progress, test_sentences)
    print("[5/5] example translations (English -> Spanish):")
    for en, hyp in zip(EXAMPLES, translator.translate(EXAMPLES)):
        print(f"      {en}\n   -> {hyp}")
    minutes_total = (time.time() - t0) / 60
    speed = _training_speed(run)
    print(f"""
trained {speed['steps']:,} steps at a median {speed['train_tokens_per_s']:,.0f} target tokens/s.
done in {minutes_total:.1f} minutes. Everything is in {out}/. Next:
  echo "The Lord is my shepherd." | aiayn translate --checkpoint {run}
  aiayn evaluate --hyp {run / 'test.hyp'} --ref {data_dir / 'test.tgt.txt'} --target-lang es
  aiayn train --resume {run} --max-minutes 30        # train longer, then refresh the weights translate uses:
  aiayn average --run {run} --last {average_last}
  aiayn plot {run}                                   # training curves -> {run / 'curves.png'}""")
    return {**scores, **speed, "minutes": minutes_total, "interrupted_by": None}


def _prepared(out: Path, data: Path | None, vocab_size: int) -> Path:
    """Step 1: the built-in corpus prepared into OUT/data (reused if there), or the prepared-data folder given."""
    if data is not None:
        print(f"[1/5] using the prepared data in {data}", flush=True)
        return Path(data)
    print(f"[1/5] preparing the built-in English-Spanish Bible in {out / 'data'}", flush=True)
    raw = builtin_corpus(out / "raw")
    prepare(*raw["train"], out / "data", vocab_size=vocab_size, valid=raw["valid"], test=raw["test"], languages=PAIR)
    return out / "data"


def recipe(dtype: str, preset: str = DEFAULT_PRESET, model: dict | None = None, vocab_size: int | None = None,
           max_tokens: int | None = None) -> tuple[ModelConfig, int, int]:
    """The model config, vocabulary size and batch size the quickstart trains with in `dtype` (bf16 or fp32): the
    dtype's RECIPES entry (its shape only on the default preset), then what was asked for explicitly."""
    chosen = RECIPES["bf16" if dtype == "bf16" else "fp32"]
    shape = chosen["shape"] if preset == DEFAULT_PRESET else {}
    cfg = ModelConfig.preset(preset, **{**MODEL_DEFAULTS, **shape, **(model or {})})
    return (cfg, chosen["vocab_size"] if vocab_size is None else vocab_size,
            chosen["max_tokens"] if max_tokens is None else max_tokens)


def _average(run: Path, last: int) -> None:
    """Average the run's last `last` step checkpoints into its averaged checkpoint (what translate then loads)."""
    paths = RunDir(run).checkpoints[-last:]
    what = "the last checkpoint" if len(paths) == 1 else f"the last {len(paths)} checkpoints"
    print(f"[3/5] averaging {what} -> {RunDir(run).averaged}", flush=True)
    average(paths, RunDir(run).averaged)


def _translate_test(translator: Engine, data_dir: Path, run: Path, beam: int, progress: bool,
                    n: int | None = None) -> dict:
    """Step 4: translate the held-out book (its first n verses) into run/test.hyp and score it; prints the scores
    and the speed."""
    src_lines = (data_dir / "test.src.txt").read_text(encoding="utf-8").splitlines()[:n]
    refs = (data_dir / "test.tgt.txt").read_text(encoding="utf-8").splitlines()[:n]
    print(f"[4/5] translating {data_dir}'s test split ({len(src_lines)} sentences, beam {beam})", flush=True)
    t0 = time.time()
    hyps = translator.translate(src_lines, progress=progress)
    seconds = time.time() - t0
    with files.atomic_text_output(run / "test.hyp") as f:
        f.write("\n".join(hyps) + "\n")
    bleu, chrf_score = corpus_bleu(hyps, refs), chrf(hyps, refs)
    print(f"      test BLEU {bleu.score:.1f}   chrF {chrf_score.score:.1f}\n      sacreBLEU {bleu.signature}\n"
          f"      {len(src_lines)} verses in {seconds:.0f} s ({len(src_lines) / seconds:.1f} sentences/s)")
    return {"bleu": bleu.score, "chrf": chrf_score.score, "signature": bleu.signature, "test_sentences": len(refs),
            "translate_sentences_per_s": len(src_lines) / seconds}


def _training_speed(run: Path) -> dict:
    """The steps the run trained (its newest checkpoint's: the log has a row every few steps only) and its median
    training speed (target tokens/s), from its log."""
    train_rows = [r for r in RunDir(run).log if r["kind"] == "train"]
    speeds = sorted(r["tokens_per_s"] for r in train_rows)
    return {"steps": max(trained_so_far(run)[0], train_rows[-1]["step"] if train_rows else 0),
            "train_tokens_per_s": speeds[len(speeds) // 2] if speeds else 0.0}


