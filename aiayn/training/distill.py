"""Sequence-level knowledge distillation (Kim & Rush 2016): a student trained on its teacher's translations.

    distill(teachers, data, out, student, budget)   one command, four stages, each resumable (a kill, then the same
                                                    call, continues where it stopped):
      1. teacher    the teacher (a run, an imported OPUS-MT run, or several runs: an ensemble) translates the data's
                    training sources with beam search, in shards of `shard_size` pairs, each written atomically to
                    OUT/distill/teacher/; under torchrun each process translates every world_size-th shard
      2. data       the shards, merged in input order, become a prepared-data folder OUT/distill/data: the same
                    sources, the teacher's translations as targets (pairs it left empty dropped), the dev and test
                    splits and the vocabulary (the teacher's: an OPUS-MT teacher's two) copied unchanged
      3. student    the teacher cut to fewer layers ("teacher-E-D", by default teacher-all-2: aiayn.training.shrink)
                    and fine-tuned on it, or a student preset (config.py: student-6-1, ...) trained on it from random
                    weights, into OUT, a run like any other, for its budget: minutes, steps, or epochs (passes over
                    the distilled data in the student's batches, made steps once they exist);
                    its last checkpoint (the end of the annealed schedule) becomes OUT/averaged.safetensors, what
                    `aiayn translate --checkpoint OUT` decodes with (the dev loss against the human references,
                    what checkpoint_best keeps, ranks a student trained on other targets badly)
      4. shortlist  OUT/shortlist.safetensors from the distilled pairs, and the student's int8 readiness: its dev
                    translations in fp32 and int8 (greedy), their BLEU side by side

OUT/distill/recipe.json records the whole recipe (teachers and their checkpoints' SHA-256, the data's digest, the
student's preset and model, the search, the budget) and what each stage measured; a second call with another recipe
into the same OUT is refused.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aiayn import files, rundir
from aiayn.config import DEFAULT_STUDENT, EOS_ID, PRESETS, ModelConfig, SearchConfig
from aiayn.data.folder import PARTIAL_MARK, SPLITS, load_split, read_meta, run_languages, write_meta
from aiayn.errors import DataError, UsageError
from aiayn.progress import Progress
from aiayn.rundir import RunDir
from aiayn.runtime import setup_runtime
from aiayn.training import checkpoint as ckpt
from aiayn.training import shrink
from aiayn.training.run import average, trained_so_far
from aiayn.training.train import TrainConfig, resume, train

RECIPE = "recipe.json"
TEACHER_DIR, DATA_DIR = "teacher", "data"
STUDENT_PRESETS = tuple(name for name in PRESETS if name.startswith("student-"))
# The recipe's fields that fix what the stages compute: a second call must give the same ones.
FIXED = ("teachers", "data", "student", "search", "shard_size", "train")
# A teacher-E-D student's dropout where its teacher had none: without, the student loses BLEU the more epochs it
# trains on the distilled data (docs/distill.md, "On a GPU, and many epochs")
STUDENT_DROPOUT = 0.1


@dataclass(frozen=True)
class Recipe:
    """What `aiayn distill` does, all of it: recorded in OUT/distill/recipe.json."""

    teachers: tuple[str, ...]
    data: str
    student: str = DEFAULT_STUDENT
    student_overrides: dict[str, Any] = field(default_factory=dict)
    beam: int = 4
    alpha: float = 0.6
    shard_size: int = 2000
    batch_size: int = 64
    max_steps: int = 0  # > 0: train the student this many steps instead of `minutes`
    epochs: float = 0.0  # > 0: this many passes over the distilled data instead of `minutes` (made steps at stage 3)
    minutes: float = 12.0
    max_tokens: int = 2048
    warmup: int = 400
    lr_factor: float = 0.45
    anneal: float = 0.3
    dtype: str = "auto"
    device: str = "auto"
    threads: int = 0
    int8_lines: int = 500  # dev sentences translated in fp32 and int8 (stage 4)

    def __post_init__(self) -> None:
        if not self.teachers:
            raise UsageError("give the teacher: --teacher RUN (repeat it for an ensemble)")
        if self.student not in PRESETS and shrink.parse_spec(self.student) is None:
            raise UsageError(f"unknown student preset {self.student!r}; choose one of: {', '.join(STUDENT_PRESETS)}, "
                             f"{shrink.SPEC} (the teacher cut to E encoder and D decoder layers, each a number or "
                             "all), or any preset: "
                             f"{', '.join(p for p in PRESETS if p not in STUDENT_PRESETS)}")
        if self.shard_size < 1 or self.batch_size < 1 or self.max_steps < 0 or self.int8_lines < 0:
            raise UsageError("--shard-size and --batch-size must be >= 1, --max-steps and --int8-lines >= 0")
        if self.epochs < 0 or (self.epochs > 0 and self.max_steps > 0):
            raise UsageError("give the student one budget: --max-steps N, --epochs E (> 0) or --minutes M")
        if self.max_steps == 0 and self.epochs == 0 and not self.minutes > 0:
            raise UsageError(f"the student's budget must be > 0 minutes (or --max-steps N, --epochs E), got "
                             f"{self.minutes:g}")
        SearchConfig(beam=self.beam, alpha=self.alpha)  # its own checks

    def model(self, vocab_size: int, teacher: ModelConfig) -> ModelConfig:
        """The student's model: its preset's, or for "teacher-E-D" the (first) teacher's cut to E+D layers, with
        STUDENT_DROPOUT where the teacher trained without dropout and --set gives none."""
        layers = shrink.parse_spec(self.student)
        if layers is not None:
            own = {"dropout": STUDENT_DROPOUT} if teacher.dropout == 0 else {}
            return shrink.shrunk_config(teacher, *layers, {**own, **self.student_overrides})
        return ModelConfig.preset(self.student, **{**self.student_overrides, "vocab_size": vocab_size})

    def train_config(self, dtype: str, device: str) -> TrainConfig:
        by_steps = self.max_steps > 0
        return TrainConfig(max_steps=self.max_steps if by_steps else 10**9,
                           max_minutes=0.0 if by_steps else self.minutes, max_tokens=self.max_tokens,
                           warmup=self.warmup, lr_factor=self.lr_factor, anneal=self.anneal, keep_last=1,
                           save_every_minutes=0.0 if by_steps else max(1.0, self.minutes / 4),
                           save_every_steps=max(1, self.max_steps // 4) if by_steps else 0,
                           dtype=dtype, device=device, threads=self.threads, log_every=10)


# ---------------------------------------------------------------------------------------------------------
# The recipe on disk, and the inputs checked against each other.


def check_inputs(recipe: Recipe) -> dict[str, Any]:
    """The teachers and the data, checked before anything is written: each teacher a run whose vocabulary is the
    data's (same SHA-256) and whose languages (where both record them) are the data's. Returns what the recipe
    records of them."""
    data = Path(recipe.data)
    meta = read_meta(data)
    if "train" not in meta["splits"]:
        raise DataError(f"{data} has no train split: the teacher translates the training sources")
    data_vocab = files.sha256_file(data / rundir.VOCAB)
    pair = meta.get("languages")
    teachers = []
    for teacher in recipe.teachers:
        path = rundir.inference_checkpoint(Path(teacher))
        vocab = RunDir.of(path).vocab
        if files.sha256_file(vocab) != data_vocab:
            raise DataError(f"teacher {teacher} has another vocabulary ({vocab}) than the data {data}; prepare the "
                            f"data with the teacher's: aiayn prepare --vocab {vocab} ...")
        theirs = run_languages(path)
        if pair and theirs and tuple(theirs) != (pair["source"], pair["target"]):
            raise DataError(f"teacher {teacher} translates {theirs[0]} -> {theirs[1]} but the data {data} are "
                            f"{pair['source']} -> {pair['target']}")
        teachers.append({"run": str(Path(teacher).resolve()), "checkpoint": str(path.resolve()),
                         "sha256": files.sha256_file(path)})
    return {"teachers": teachers, "data": {"path": str(data.resolve()), "content_sha256": meta["content_sha256"]},
            "vocab_size": meta["vocab_size"], "languages": pair,
            "teacher_model": ckpt.read_header(Path(teachers[0]["checkpoint"]))[1]}


def recipe_record(recipe: Recipe, inputs: dict[str, Any]) -> dict[str, Any]:
    """recipe.json's fixed part: what every stage computes from."""
    model = recipe.model(inputs["vocab_size"], inputs["teacher_model"]).to_dict()
    return {"teachers": inputs["teachers"], "data": inputs["data"], "languages": inputs["languages"],
            "student": {"preset": recipe.student, "overrides": recipe.student_overrides, "model": model},
            "search": {"beam": recipe.beam, "alpha": recipe.alpha}, "shard_size": recipe.shard_size,
            "train": {k: getattr(recipe, k) for k in ("max_tokens", "warmup", "lr_factor", "anneal", "dtype")},
            "budget": ({"max_steps": recipe.max_steps} if recipe.max_steps else {"epochs": recipe.epochs}
                       if recipe.epochs else {"minutes": recipe.minutes}),  # the one that decides
            "stages": {}}


def open_recipe(out: Path, record: dict[str, Any], main: bool) -> dict[str, Any]:
    """OUT/distill/recipe.json: written when new; else the one there, refused if its fixed part differs from
    `record` (the budget may change: a longer or shorter student run)."""
    path = RunDir(out).distill / RECIPE
    if not path.is_file():
        if not main:  # the main process writes it (and refuses a folder that holds something else)
            return record
        if out.exists() and not RunDir(out).unstarted:
            raise UsageError(f"{out} is not empty and holds no distillation ({path} is missing); give a new --out")
        files.write_json(path, record)
        return record
    saved = json.loads(path.read_text(encoding="utf-8"))
    differ = [k for k in FIXED if saved.get(k) != record[k]]
    if differ:
        raise UsageError(f"{out} holds a distillation with another {', '.join(differ)} (see {path}); run the same "
                         "command again to continue it, or give a new --out")
    saved["budget"] = record["budget"]
    return saved


def save_stage(out: Path, record: dict[str, Any], stage: str, result: dict[str, Any]) -> None:
    record["stages"][stage] = result
    files.write_json(RunDir(out).distill / RECIPE, record)


# ---------------------------------------------------------------------------------------------------------
# Stage 1: the teacher's translations, shard by shard.


def shard_path(out: Path, k: int) -> Path:
    return RunDir(out).distill / TEACHER_DIR / f"shard_{k:05d}.npz"


def shard_ranges(n: int, size: int) -> list[tuple[int, int]]:
    """The training pairs [start, end) of each shard, in input order."""
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def read_shard(path: Path, expected: int) -> list[np.ndarray]:
    """A shard's translations (one id array per pair), refused unless it holds `expected` of them."""
    try:
        with np.load(path, allow_pickle=False) as z:
            lengths, ids = z["lengths"], z["ids"]
    except (OSError, ValueError, KeyError, EOFError):
        raise DataError(f"{path} is damaged; delete it and run the same command again") from None
    if len(lengths) != expected or int(lengths.sum()) != len(ids):
        raise DataError(f"{path} holds {len(lengths)} translations, not {expected}; delete it and run again")
    return np.split(ids, np.cumsum(lengths)[:-1]) if expected else []


def _write_shard(path: Path, translations: Sequence[Sequence[int]]) -> None:
    lengths = np.array([len(t) for t in translations], np.int64)
    ids = np.fromiter((i for t in translations for i in t), np.int32, count=int(lengths.sum()))

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, lengths=lengths, ids=ids)

    files.atomic_write(path, write)


def translate_shards(recipe: Recipe, out: Path, rank: int = 0, world_size: int = 1, device: str = "cpu",
                     progress: bool = True) -> dict[str, Any]:
    """This process's shards (every world_size-th, from `rank`) that are not on disk yet: the teacher's best beam
    hypothesis of each training source. Returns {"shards", "translated", "seconds"} of this process."""
    from aiayn.decoding.translator import Translator

    split = load_split(recipe.data, "train")
    ranges = shard_ranges(len(split), recipe.shard_size)
    mine = [k for k in range(rank, len(ranges), world_size)]
    todo = [k for k in mine if not shard_path(out, k).is_file()]
    result = {"shards": len(ranges), "translated": 0, "seconds": 0.0}
    if not todo:
        return result
    teacher = Translator.load(list(recipe.teachers), SearchConfig(beam=recipe.beam, alpha=recipe.alpha),
                              precision="fp32", device=device, batch_size=recipe.batch_size)
    src, _ = split.ids()
    done = sum(ranges[k][1] - ranges[k][0] for k in mine if k not in todo)
    bar = Progress("teacher", sum(ranges[k][1] - ranges[k][0] for k in mine), "sentences",
                   enabled=progress and rank == 0, initial=done)
    t0 = time.time()
    for k in todo:
        start, end = ranges[k]
        sources = [src[split.offsets[0, i]:split.offsets[0, i + 1]].tolist() + [EOS_ID] for i in range(start, end)]
        sources = [s[:teacher.max_input_len - 1] + [EOS_ID] if len(s) > teacher.max_input_len else s
                   for s in sources]
        hyps = teacher.search_ids(sources)
        _write_shard(shard_path(out, k), [h[0].tokens for h in hyps])
        result["translated"] += end - start
        bar.update(end - start, sent_s=f"{result['translated'] / (time.time() - t0):.1f}")
    bar.close()
    result["seconds"] = time.time() - t0
    return result


# ---------------------------------------------------------------------------------------------------------
# Stage 2: the distilled data.


def _gather(flat: np.ndarray, offsets: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ids of the kept pairs (`keep`: a boolean per pair) out of one side's concatenation, and their lengths."""
    lengths = np.diff(offsets)[keep]
    starts = offsets[:-1][keep]
    shift = starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return flat[np.arange(int(lengths.sum())) + np.repeat(shift, lengths)], lengths


def write_data(recipe: Recipe, out: Path, record: dict[str, Any]) -> dict[str, Any]:
    """OUT/distill/data from the data and the teacher's shards (built beside it, renamed into place when complete).
    Returns the train split's counts."""
    data, target = Path(recipe.data), RunDir(out).distill / DATA_DIR
    split = load_split(data, "train")
    ranges = shard_ranges(len(split), recipe.shard_size)
    missing = [k for k in range(len(ranges)) if not shard_path(out, k).is_file()]
    if missing:
        raise DataError(f"the teacher's shard {missing[0]} is missing ({shard_path(out, missing[0])}); run the same "
                        "command again to translate it")
    translations = [t for k, (a, b) in enumerate(ranges) for t in read_shard(shard_path(out, k), b - a)]
    keep = np.array([len(t) > 0 for t in translations], bool)
    meta = read_meta(data)
    part = target.with_name(target.name + ".partial")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    (part / PARTIAL_MARK).touch()
    src_flat, _ = split.ids()
    src_ids, src_len = _gather(src_flat, split.offsets[0], keep)
    tgt_ids = np.fromiter((i for t, kept in zip(translations, keep) if kept for i in t), np.dtype(meta["dtype"]))
    tgt_len = np.array([len(t) for t in translations], np.int64)[keep]
    offsets = np.zeros((2, len(src_len) + 1), np.int64)
    np.cumsum(src_len, out=offsets[0, 1:])
    np.cumsum(tgt_len, out=offsets[1, 1:])
    src_ids.astype(meta["dtype"]).tofile(part / "train.src.bin")
    tgt_ids.tofile(part / "train.tgt.bin")
    np.save(part / "train.idx.npy", offsets)
    for name in [rundir.VOCAB, "vocab.vocab"] + [f.name for s in SPLITS if s != "train" for f in data.glob(f"{s}.*")]:
        if (data / name).is_file():
            shutil.copyfile(data / name, part / name)
    n, kept = len(split), int(keep.sum())
    train_split = {"read": n, "kept": kept, "dropped": {"empty": n - kept, "too_long": 0, "ratio": 0},
                   "dropped_lines": {"empty": (np.flatnonzero(~keep)[:5] + 1).tolist(), "too_long": [], "ratio": []},
                   "src_tokens": int(offsets[0, -1]), "tgt_tokens": int(offsets[1, -1]), "src_unk": 0.0,
                   "tgt_unk": 0.0}
    skip = ("files", "content_sha256", "format", "fingerprint")
    new = {**{k: v for k, v in meta.items() if k not in skip}, "splits": {**meta["splits"], "train": train_split},
           "fingerprint": {"distilled": {k: record[k] for k in ("teachers", "data", "search", "shard_size")}}}
    write_meta(part, new)
    (part / PARTIAL_MARK).unlink()
    files.commit_folder(part, target)
    return {"pairs": n, "kept": kept, "dropped_empty": n - kept, "target_tokens": int(offsets[1, -1]),
            "source_target_tokens": int(split.offsets[1, -1])}


# ---------------------------------------------------------------------------------------------------------
# Stage 3: the student; stage 4: shortlist and int8.




def shrunk_student(out: Path, teacher: Path, model: ModelConfig) -> Path:
    """OUT/distill/init/student.safetensors: a "teacher-E-D" student's first weights, cut from the (first) teacher's
    checkpoint, with the vocabulary beside it as a run's checkpoint has it. Both written atomically: under torchrun
    every process writes the same files."""
    folder = RunDir(out).distill / "init"
    vocab = RunDir(out).distill / DATA_DIR / rundir.VOCAB
    files.atomic_write(folder / rundir.VOCAB, lambda tmp: shutil.copyfile(vocab, tmp))
    return shrink.write_shrunk(teacher, model, folder / "student.safetensors")


def epoch_steps(out: Path, epochs: float, max_tokens: int, world_size: int) -> int:
    """--epochs E as the student's steps: E passes over the distilled data in train's batches of max_tokens (one
    step a batch in each process), rounded up."""
    from aiayn.data.batching import TokenBatchSampler

    split = load_split(RunDir(out).distill / DATA_DIR, "train", full_check=False)
    batches = TokenBatchSampler(split.src_lengths, split.tgt_lengths, max_tokens=max_tokens,
                                seed=TrainConfig().seed, world_size=world_size)
    return max(1, math.ceil(epochs * len(batches)))


def train_student(recipe: Recipe, out: Path, record: dict[str, Any], progress: bool) -> dict[str, Any] | None:
    """The student (recipe.json's model, in `record`) trained, or resumed to the same budget, on the distilled data
    into `out`; a "teacher-E-D" student starts from the recorded first teacher's weights (fine-tuned: train's
    init_from). None when it is done already. Returns train's summary."""
    data = RunDir(out).distill / DATA_DIR
    if not RunDir(out).is_run:
        tc = recipe.train_config(recipe.dtype, recipe.device)
        model = ModelConfig.from_dict(record["student"]["model"])
        init = (shrunk_student(out, Path(record["teachers"][0]["checkpoint"]), model)
                if shrink.parse_spec(recipe.student) else None)
        return train(data, out, model, tc, progress=progress, init_from=init)
    steps, seconds = trained_so_far(out)
    if recipe.max_steps and steps < recipe.max_steps:
        return resume(out, progress=progress, max_steps=recipe.max_steps)
    if not recipe.max_steps and seconds < recipe.minutes * 60 - 1:
        return resume(out, progress=progress, max_minutes=(recipe.minutes * 60 - seconds) / 60)
    return None


def int8_readiness(out: Path, lines: int, device: str) -> dict[str, Any]:
    """The student's first `lines` dev sentences translated greedily in fp32 and in int8: BLEU of each against the
    references and the share of identical outputs (the student decodes in int8 as it does in fp32)."""
    from aiayn.decoding.translator import Translator
    from aiayn.metrics import corpus_bleu

    data = RunDir(out).distill / DATA_DIR
    src, ref = data / "valid.src.txt", data / "valid.tgt.txt"
    if not src.is_file() or lines == 0:
        return {"skipped": "the data have no dev split" if lines else "--int8-lines 0"}
    sources = files.read_lines(src)[:lines]
    refs = files.read_lines(ref)[:lines]
    result = {"sentences": len(sources)}
    outputs = {}
    for precision in ("fp32", "int8"):
        t0 = time.time()
        translator = Translator.load(out, SearchConfig(beam=1), precision=precision, device=device)
        outputs[precision] = translator.translate(sources)
        result[precision] = {"bleu": round(corpus_bleu(outputs[precision], refs).score, 2),
                             "seconds": round(time.time() - t0, 2)}
    result["identical"] = round(sum(a == b for a, b in zip(*outputs.values())) / max(1, len(sources)), 4)
    return result


def build_shortlist(out: Path) -> dict[str, Any]:
    from aiayn.decoding.shortlist import build_from_prepared

    shortlist = build_from_prepared(RunDir(out).distill / DATA_DIR)
    shortlist.save(RunDir(out).shortlist)
    return {"path": str(RunDir(out).shortlist), **shortlist.describe()}


# ---------------------------------------------------------------------------------------------------------
# The command.


def _teacher_stage(recipe: Recipe, out: Path, record: dict[str, Any], progress: bool) -> None:
    """Stages 1 and 2, in every process of a torchrun job (each its slice of the shards; the main one merges)."""
    target = RunDir(out).distill / DATA_DIR
    with setup_runtime(recipe.device, "fp32", recipe.threads) as rt:
        if (target / "meta.json").is_file():
            return
        if rt.is_main:
            print(f"[1/4] the teacher translates {recipe.data}'s training sources (beam {recipe.beam}, "
                  f"{rt.world_size} process(es) on {rt.device}) into {shard_path(out, 0).parent}", flush=True)
        mine = translate_shards(recipe, out, rt.rank, rt.world_size, str(rt.device), progress)
        totals = rt.all_reduce([float(mine["translated"]), mine["seconds"]])
        rt.barrier()
        if rt.is_main:
            if totals[0]:
                save_stage(out, record, "teacher", {"sentences": int(totals[0]), "processes": rt.world_size,
                                                    "sentences_per_s": round(totals[0] / max(totals[1] /
                                                                                             rt.world_size, 1e-9), 2)})
            print(f"[2/4] the distilled data: {target}", flush=True)
            save_stage(out, record, "data", write_data(recipe, out, record))
        rt.barrier()


def distill(recipe: Recipe, out: Path, progress: bool = True) -> dict[str, Any]:
    """All four stages into `out`, each skipped where it is done; returns recipe.json's record."""
    out = Path(out)
    main = int(os.environ.get("RANK", "0")) == 0
    record = recipe_record(recipe, check_inputs(recipe))
    record = open_recipe(out, record, main)
    if main:
        RunDir(out).distill.mkdir(parents=True, exist_ok=True)
    # one process group for both stages: a second one on torchrun's store would read the first one's stale addresses
    with setup_runtime(recipe.device, "fp32", recipe.threads) as rt:
        _teacher_stage(recipe, out, record, progress)
        budget = ""
        if recipe.epochs:  # the student's budget in steps, now that the distilled data exist
            steps = epoch_steps(out, recipe.epochs, recipe.max_tokens, rt.world_size)
            budget = f" for {recipe.epochs:g} epochs ({steps:,} steps)"
            recipe = dataclasses.replace(recipe, epochs=0.0, max_steps=steps)
        if main:
            print(f"[3/4] the student ({recipe.student}) trains on the distilled data into {out}{budget}", flush=True)
        summary = train_student(recipe, out, record, progress)
    if summary is not None and summary["interrupted_by"] is not None:
        return {**record, "interrupted_by": summary["interrupted_by"]}
    if not main:
        return {**record, "interrupted_by": None}
    trained = summary is not None or not RunDir(out).averaged.is_file()
    if trained:  # the end of the annealed schedule is the student translate loads (stage 3 of the module docstring)
        last = RunDir(out).checkpoints[-1]
        average([last], RunDir(out).averaged)
        steps, seconds = trained_so_far(out)
        save_stage(out, record, "student", {"steps": steps, "train_seconds": round(seconds, 1),
                                            "checkpoint": f"{rundir.AVERAGED}: {last.name}"})
    if trained or not RunDir(out).shortlist.is_file():
        print(f"[4/4] the shortlist from the distilled pairs, and the student in int8: {out}", flush=True)
        save_stage(out, record, "int8", int8_readiness(out, recipe.int8_lines, "cpu"))
        if not RunDir(out).shortlist.is_file():
            save_stage(out, record, "shortlist", build_shortlist(out))
    return {**record, "interrupted_by": None}

