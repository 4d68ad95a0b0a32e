"""The report's parts: each runs (or reuses) one of the paper's results through the command that makes it, and
returns its section (the paper's number beside ours, the command, where and when, and what agrees).

A part's section is saved as OUT/parts/<part>.json once the part is done; `part_section` skips a part whose file is
there, so an interrupted report picks up at the part it stopped in (and the experiments resume within a part:
quickstart and `aiayn variations` resume their runs). Images go to OUT/img/.
"""

from __future__ import annotations

import datetime
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from aiayn import files
from aiayn.config import PAPER_VOCAB, ModelConfig
from aiayn.decoding.alignment import word_ids
from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import SearchConfig
from aiayn.errors import UserError
from aiayn.experiments import paper
from aiayn.experiments.params import format_table as format_params
from aiayn.experiments.params import parameter_table
from aiayn.experiments.report.budgets import Budget
from aiayn.experiments.report.sources import parser_runs, parser_systems, training_pairs
from aiayn.experiments.table1 import format_table as format_table1
from aiayn.experiments.table1 import measure_table1
from aiayn.experiments.table1 import plot as plot_table1
from aiayn.experiments.table2 import training_cost
from aiayn.experiments.table3.plan import PLAN, RESULT
from aiayn.experiments.table3.report import report
from aiayn.experiments.table3.runner import train_variations
from aiayn.metrics import chrf, corpus_bleu
from aiayn.metrics.evalb import parse_report, score_parses
from aiayn.parsing.parse import Parser
from aiayn.parsing.prepare import prepare_parse
from aiayn.parsing.trees import iter_tree_strings
from aiayn.quickstart import quickstart
from aiayn.rundir import RunDir
from aiayn.runtime import configure_process
from aiayn.training.run import average
from aiayn.training.train import TrainConfig, resume, train
from aiayn.viz.attention import attention_data, plot_lines, render_html

Say = Callable[[str], None]


@dataclass(frozen=True)
class Context:
    out: Path
    budget: Budget
    sources: dict[str, Path]  # --from, by kind (aiayn.experiments.report.sources)
    data: Path | None  # a prepared-data folder for the translation model and Table 3 (default: the built-in corpus)
    device: str
    hardware: str  # what the parts made here run on, in words
    tflops: float  # sustained TFLOPS per device for Table 2's cost
    say: Say = print
    treebank: Path | None = None  # a folder with train.trees and dev.trees to train the parser on

    def part_dir(self, name: str) -> Path:
        return self.out / "parts" / name

    def image(self, name: str) -> Path:
        (self.out / "img").mkdir(parents=True, exist_ok=True)
        return self.out / "img" / name


def part_section(ctx: Context, name: str, make: Callable[[Context], dict[str, Any]]) -> dict[str, Any]:
    """The part's section: read from OUT/parts/<name>.json if the part is done, else made and saved there."""
    path = ctx.out / "parts" / f"{name}.json"
    if path.is_file():
        ctx.say(f"[{name}] done already ({path}); skipped")
        return json.loads(path.read_text(encoding="utf-8"))
    ctx.say(f"[{name}] ...")
    t0 = time.time()
    section = {"id": name, "budget": ctx.budget.name, "date": _now(), "hardware": ctx.hardware, "images": [],
               "source": "made by this report", **make(ctx)}
    section["seconds"] = time.time() - t0
    for img in section["images"]:
        shrink_png(ctx.out / img["file"])
    files.write_json(path, section)
    ctx.say(f"[{name}] done in {section['seconds']:.0f} s")
    return section


def shrink_png(path: Path) -> None:
    """The PNG in 256 colours (plots have few): a third of the size or less, for a page that inlines them."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(256)
    files.atomic_write(path, lambda p: small.save(p, format="PNG", optimize=True))


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _reused(path: Path, hardware: str) -> dict[str, str]:
    return {"source": f"reused from {path}", "hardware": hardware}


def _machine(result: dict[str, Any]) -> str:
    m = result.get("machine") or {}
    return ", ".join(str(m[k]) for k in ("cpu", "gpu", "cpu_kernels") if m.get(k)) or "not recorded"


# ---------------------------------------------------------------------------------------------------------
# The parts, in the paper's order of results.


def params(ctx: Context) -> dict[str, Any]:
    """Table 3's params column: every preset counted (aiayn params)."""
    rows = parameter_table()
    files.write_json(ctx.part_dir("params") / "params.json", rows)
    compared = [r for r in rows if r["paper_M"]]
    off = [(r["preset"], r["params"] / 1e6 / r["paper_M"] - 1) for r in compared]
    worst = max(off, key=lambda o: abs(o[1]))
    close = sum(abs(o) <= 0.05 for _, o in off)
    return {"title": "Table 3, parameter column", "command": "aiayn params",
            "paper": "Table 3's params column (millions; the paper leaves rows (A), (D), (E) blank).",
            "ours": format_params(rows), "rows": rows,
            "verdict": f"{close} of {len(compared)} rows within 5 % of the paper's count; the largest difference is "
                       f"{worst[0]} ({100 * worst[1]:+.1f} %). The paper does not give the exact vocabulary behind "
                       f"its column; ours counts a shared vocabulary of {PAPER_VOCAB:,} pieces."}


def table1(ctx: Context) -> dict[str, Any]:
    """Table 1 measured (aiayn table1), or a measurement reused."""

    given = ctx.sources.get("table1")
    if given:
        res, extra = json.loads(given.read_text(encoding="utf-8")), _reused(given, "not recorded in table1.json")
        command = f"aiayn table1 --json {given.name} (its output, reused)"
    else:
        threads = torch.get_num_threads()
        configure_process(threads=1)  # as `aiayn table1` measures by default: a shared machine's second core is noise
        try:
            res = measure_table1(**ctx.budget.table1, say=ctx.say)
        finally:
            configure_process(threads=threads)
        files.write_json(ctx.part_dir("table1") / "table1.json", res)
        extra = {}
        command = "aiayn table1 " + " ".join(_flags(ctx.budget.table1))
    plot_table1(res, ctx.image("table1.png"))
    e = res["time_exponent"]
    cross = res["crossover_time"]
    rows = "\n".join(f"| {kind} | {c} | {s} | {p} |" for kind, (c, s, p) in paper.TABLE1.items())
    return {**extra, "title": "Table 1: self-attention against recurrence and convolution", "command": command,
            "paper": "| layer type | complexity per layer | sequential operations | maximum path length |\n"
                     f"|---|---|---|---|\n{rows}\n\nSelf-attention is cheaper than recurrence when n < d.",
            "ours": format_table1(res), "table1": res,
            "images": [{"file": "img/table1.png", "alt": "Table 1: forward time and FLOPs against n"}],
            "verdict": f"Time exponents in n over the largest sizes: the attention core {e['self-attention core']:.2f} "
                       f"(paper: 2), self-attention with projections {e['self-attention']:.2f}, the LSTM "
                       f"{e['recurrent']:.2f} (paper: 1), the convolution {e['convolutional']:.2f} (1), restricted "
                       f"{e['restricted']:.2f} (1). Self-attention becomes slower than the LSTM "
                       + (f"from n = {cross:.0f}" if cross else f"at no n up to {res['ns'][-1]}")
                       + f" (the paper: n = d = {res['d']}). " + _orders(res)}


def _orders(res: dict[str, Any]) -> str:
    """Which layers' sequential operations and path lengths stay flat in n, and which grow (the paper: O(1) for
    self-attention and convolution, O(n) for recurrence; paths O(1), O(log_k n) or O(n/k), O(n), O(n/r))."""
    def grows(values: list[int]) -> bool:
        return values[-1] > values[0]

    flat_ops = [k for k, v in res["depth"].items() if not grows(v)]
    growing_ops = [k for k, v in res["depth"].items() if grows(v)]
    flat_path = [k for k, v in res["path"].items() if not grows(v)]
    growing_path = [k for k, v in res["path"].items() if grows(v)]
    return (f"From n = {res['depth_ns'][0]} to {res['depth_ns'][-1]}, sequential operations stay flat for "
            f"{', '.join(flat_ops) or 'none'} and grow for {', '.join(growing_ops) or 'none'}; from n = "
            f"{res['path_ns'][0]} to {res['path_ns'][-1]}, the path length stays flat for "
            f"{', '.join(flat_path) or 'none'} and grows for {', '.join(growing_path) or 'none'}.")


def _flags(options: dict[str, Any]) -> list[str]:
    """A budget's options as the command's flags ("--max-n 128", "--quick")."""
    out = []
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        out += [flag] if v is True else [] if v is False else [f"{flag} {v}"]
    return out


def translation(ctx: Context) -> dict[str, Any]:
    """The translation model the figures are drawn from: aiayn quickstart (the built-in corpus, or --data), or a
    run reused and scored on its test split."""
    given = ctx.sources.get("translation")
    if given:
        scores, extra, run = _score_run(given, ctx.budget.translation.get("test_sentences")), _reused(given, "not "
                                                                                                   "recorded"), given
        command = f"aiayn train ... --out {given} (reused; scored on its test split here)"
    else:
        folder = ctx.part_dir("translation")
        options = {**ctx.budget.translation, "device": ctx.device}
        scores = quickstart(folder, progress=False, data=ctx.data, **options)
        if scores.get("interrupted_by") is not None:
            raise KeyboardInterrupt
        run, extra = folder / "run", {}
        shown = {k: v for k, v in ctx.budget.translation.items() if k not in ("model", "test_sentences")}
        command = ("aiayn quickstart " + " ".join(_flags(shown))
                   + "".join(f" --set {k}={v}" for k, v in ctx.budget.translation.get("model", {}).items())
                   + (f" (scored on the first {scores['test_sentences']} test sentences)"
                      if ctx.budget.translation.get("test_sentences") else ""))
    data = RunDir(run).data
    bleu = f"{scores['bleu']:.1f}" if scores.get("bleu") is not None else "not scored"
    return {**extra, "title": "A translation model (the model the attention figures are drawn from)",
            "command": command, "run": str(run), "data": str(data), "scores": scores,
            "paper": "Table 2, newstest2014 BLEU: base " + ", ".join(f"{k} {v}" for k, v in paper.TABLE2_BLEU["base"]
                                                                     .items())
                     + "; big " + ", ".join(f"{k} {v}" for k, v in paper.TABLE2_BLEU["big"].items()) + ".",
            "ours": f"Test BLEU {bleu} on {scores.get('test_sentences', '?')} sentences of {data}'s test split "
                    f"(sacreBLEU {scores.get('signature', '')}); run {run}.",
            "verdict": "Not comparable with the paper's BLEU: another corpus, language pair and test set, and a model "
                       f"trained minutes, not {paper.TABLE2_HOURS['base']:g} hours on {paper.TABLE2_GPUS} GPUs; WMT14 "
                       "is listed under 'not run here' below."}


def _score_run(run: Path, n: int | None) -> dict[str, Any]:
    """BLEU of a reused run on its data's test split: its test.hyp if it has one, else the first n (None: all) test
    sentences translated now."""
    data = RunDir(run).data
    if not (data / "test.tgt.txt").is_file():
        return {"bleu": None, "note": f"{data} has no test split"}
    refs = files.read_lines(data / "test.tgt.txt")
    if (run / "test.hyp").is_file():
        hyps = files.read_lines(run / "test.hyp")
    else:
        engine = open_engine(run, EngineOptions(engine="aiayn", device="cpu"))
        hyps = engine.translate(files.read_lines(data / "test.src.txt")[:n])
    refs = refs[:len(hyps)]
    bleu = corpus_bleu(hyps, refs)
    return {"bleu": bleu.score, "chrf": chrf(hyps, refs).score, "signature": bleu.signature,
            "test_sentences": len(hyps)}


def attention(ctx: Context, translation_section: dict[str, Any]) -> dict[str, Any]:
    """The appendix's figures 3-5 from the translation model: encoder self-attention of the second layer from the
    top (the paper's layer 5 of 6: FIGURES_LAYER), drawn by aiayn.viz.attention as `aiayn attention` draws them."""
    run = Path(translation_section["run"])
    translator = open_engine(run, EngineOptions(engine="aiayn", search=SearchConfig(beam=ctx.budget.attention_beam),
                                                device=ctx.device))
    images, lines, datas, ratios = [], [], {}, {}
    for name, (sentence, word, shows) in paper.FIGURES.items():
        data = datas.get(sentence) or attention_data(translator, None, sentence)
        datas[sentence] = data
        layer = data["default_layer"]
        heads_all = data["weights"]["encoder"][layer]
        words = sentence.split()
        piece_word = word_ids(data["tokens"]["src"])
        if word:  # figures 3 and 4: the lines of one word, from the heads that look where the paper's do
            target = ("more", "difficult") if name == "figure3" else ("Law",)
            q = piece_word.index(words.index(word))
            cols = [j for j, w in enumerate(piece_word) if w < len(words) and words[w] in target]
            mass = [sum(h[q][j] for j in cols) for h in heads_all]
            heads = sorted(range(len(mass)), key=lambda h: -mass[h])[:2 if name == "figure4" else len(mass)]
            uniform = len(cols) / len(piece_word)
            ratios[name] = (mass[heads[0]] / uniform, " ".join(target), word)
            lines.append(f"- {name[:-1].capitalize()} {name[-1]} ({shows}): from '{word}', the head that looks most "
                         f"at '{' '.join(target)}' puts {mass[heads[0]]:.2f} of its attention there (head "
                         f"{heads[0]}; spread evenly it would be {uniform:.2f}); heads by that weight: "
                         + ", ".join(f"{h} {mass[h]:.2f}" for h in sorted(range(len(mass)), key=lambda h: -mass[h])))
        else:  # figure 5: two heads' lines for every word
            q, heads = None, [0, 1][:len(heads_all)]
            lines.append(f"- Figure 5 ({shows}): every word's lines in heads {heads[0]} and {heads[-1]}.")
        plot_lines(data, "encoder", layer, heads, ctx.image(f"{name}.png"), query=q)
        images.append({"file": f"img/{name}.png", "alt": f"{name}: encoder self-attention, layer {layer}"})
        if not (ctx.out / "img" / f"{name}-viewer.html").exists() and name != "figure5":  # 5: 4's sentence
            files.write_text(ctx.image(f"{name}-viewer.html"), render_html(data))
    n_layers = translator.model.cfg.n_enc_layers
    return {"title": "Appendix, figures 3-5: attention visualizations", "images": images,
            "command": f"aiayn attention --checkpoint {run} --src SENTENCE --out OUT (the lines of one word: "
                       "aiayn.viz.attention.plot_lines with query)",
            "paper": "\n".join(f"- {n[:-1].capitalize()} {n[-1]}: {s} ('{t}')"
                                for n, (t, _, s) in paper.FIGURES.items())
                     + "\n\nEncoder self-attention in layer {} of {}.".format(*paper.FIGURES_LAYER),
            "ours": "\n".join(lines) + f"\n\nEncoder self-attention in layer {layer} (from 0) of {n_layers}, "
                    f"model {run}. The interactive viewer of each sentence (every layer and head) is beside the "
                    "images: img/figure3-viewer.html, img/figure4-viewer.html.",
            "verdict": _attention_verdict(ratios) + (" (Smoke run: the model has not learned; the "
                                                     "figures only show the pipeline works.)"
                                                     if ctx.budget.smoke else "")}


def _attention_verdict(ratios: dict[str, tuple[float, str, str]]) -> str:
    """One sentence per figure: how the most concentrated head compares with even attention (the paper's heads put
    most of their weight on the phrase)."""
    said = []
    for name, (ratio, target, word) in ratios.items():
        how = (f"the most concentrated head puts {ratio:.1f}x even attention on it" if ratio > 1
               else f"no head puts more than even attention on it (at most {ratio:.1f}x)")
        said.append(f"{name[:-1].capitalize()} {name[-1]}, '{word}' -> '{target}': {how}")
    return ("The paper's heads put most of their weight on the phrase; here " + "; ".join(said)
            + ". A small model trained minutes on another corpus may have no such head.")


def table3(ctx: Context, translation_section: dict[str, Any]) -> dict[str, Any]:
    """Table 3's variations (aiayn variations) at the budget's scale, or a study reused; the report's numbers are
    table3.report's own, computed on a copy of the study's results (the study folder itself is not written)."""
    study = ctx.part_dir("table3") / "study"
    given = ctx.sources.get("table3")
    if given:
        copy_results(given, study)
        summary = report(study)
        any_r = json.loads(next(study.glob(f"*/{RESULT}")).read_text(encoding="utf-8"))
        extra = _reused(given, _machine(any_r))
        command = f"aiayn variations --out {given} (its {PLAN} holds the options; reused)"
    else:
        data = ctx.data or Path(translation_section["data"])
        summary = train_variations(data, study, device=ctx.device, say=ctx.say, **ctx.budget.table3)
        extra = {}
        options = {k: v for k, v in ctx.budget.table3.items() if k not in ("train", "backbone")}
        command = (f"aiayn variations --data {data} --out {study} " + " ".join(_flags(options))
                   + "".join(f" --{k.replace('_', '-')} {v}" for k, v in ctx.budget.table3.get("train", {}).items()))
    images = []
    for name in ("table3.png", "table3_curves.png"):
        if (study / name).is_file():
            shutil.copyfile(study / name, ctx.image(name))
            images.append({"file": f"img/{name}", "alt": f"Table 3: {name}"})
    return {**extra, "title": "Table 3: variations on the Transformer architecture", "command": command,
            "images": images, "summary": {k: v for k, v in summary.items() if k != "text"},
            "paper": "Table 3 (EN-DE newstest2013 dev, full size, the paper's steps; PPL per word-piece): its PPL, "
                     "BLEU and params sit beside ours in the table below.",
            "ours": summary["text"], "verdict": table3_verdict(summary)}


def copy_results(study: Path, to: Path) -> None:
    """A study's plan and every row's and replica's result.json, into `to` (what table3.report reads)."""
    to.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(study / PLAN, to / PLAN)
    for result in study.glob(f"*/{RESULT}"):
        (to / result.parent.name).mkdir(exist_ok=True)
        shutil.copyfile(result, to / result.parent.name / RESULT)


def table3_verdict(summary: dict[str, Any]) -> str:
    """Rank correlation and the pairs out of order, in a sentence, from table3.report's summary."""
    n = len(summary["rows"])
    text = (f"Over the {n} rows trained (scale 1/{summary['scale']}, {summary['steps']:,} steps each), Spearman's "
            f"rank correlation with the paper: dev PPL {summary['spearman_ppl']:.3f}, dev BLEU "
            f"{summary['spearman_bleu']:.3f}.")
    if summary.get("resolvable_pairs"):
        p = summary["resolvable_pairs"]
        out_of_order = ", ".join(f"{a} < {b}" for a, b in p["reversed"]) or "none"
        text += (f" Of the {p['pairs']} pairs of rows the seed noise ({100 * summary['noise']['relative']:.1f} %) can "
                 f"tell apart, {p['agree']} are in the paper's order; out of order (the paper's better row first): "
                 f"{out_of_order}.")
    if summary["missing"]:
        text += f" Not trained: {', '.join(summary['missing'])}."
    return text


def table4(ctx: Context) -> dict[str, Any]:
    """Table 4's parser: a results folder reused (eval.log, the runs beside it)."""
    ref = "\n".join(f"| {who} | {data} | {f1} |" for who, data, f1 in paper.TABLE4)
    paper_md = f"WSJ section 23 F1:\n\n| parser | training | F1 |\n|---|---|---|\n{ref}"
    wsj, semi = (f1 for who, data, f1 in paper.TABLE4 if who.startswith("Transformer"))
    given = ctx.sources.get("parser") or (train_parser(ctx) if ctx.treebank else None)
    if not given:
        return {"title": "Table 4: English constituency parsing", "paper": paper_md, "not_run": True,
                "command": "aiayn train --config configs/ptb-parse.yaml --out runs/ptb; aiayn parse ...; aiayn "
                           "evaluate --task parse (configs/ptb-parse.yaml has every step)",
                "ours": "Not run by this report: give --treebank (train.trees, dev.trees) to train one, or --from a "
                        "parser results folder (its eval.log).",
                "verdict": f"No parser result to compare with the paper's {wsj} (WSJ only) and {semi} "
                           "(semi-supervised)."}
    systems = parser_systems(given)
    runs = parser_runs(given)
    sizes = {n for n in (training_pairs(r) for r in runs) if n}
    trees = f"{max(sizes):,}" if sizes else "an unrecorded number of"
    dev = _dev_trees(given)
    best = max(systems, key=lambda s: s["f1"])
    ours = "\n".join(f"| {s['name']} | {s['f1']:.2f} | {s.get('recall', float('nan')):.2f} | "
                     f"{s.get('precision', float('nan')):.2f} | `{s['command']}` |" for s in systems)
    ratio = (f" ({paper.TABLE4_TRAIN_SENTENCES['WSJ only, discriminative'] / max(sizes):.0f}x fewer than the "
             "paper's ~40K)") if sizes else ""
    made = given == ctx.part_dir("table4")
    return {**({} if made else _reused(given, "not recorded in eval.log (see the folder's notes)")),
            "title": "Table 4: English constituency parsing", "paper": paper_md, "systems": systems,
            "command": "aiayn parse ... then aiayn evaluate --task parse (each system's command below; "
                       f"{given}/eval.log)",
            "ours": f"Labelled-bracket F1 (EVALB, COLLINS.prm) on {dev} WSJ dev trees of our {trees}-tree Penn "
                    f"Treebank sample, not section 23:\n\n| system | F1 | recall | precision | command |\n"
                    f"|---|---|---|---|---|\n{ours}",
            "verdict": f"Our best, {best['name']}, reaches F1 {best['f1']:.1f} on the sample's dev trees: "
                       f"{wsj - best['f1']:.1f} below the paper's WSJ-only {wsj} and {semi - best['f1']:.1f} below its "
                       f"semi-supervised {semi}, trained on our {trees}-tree sample{ratio} with a smaller model "
                       "(configs/ptb-parse.yaml); the dev trees are not section 23, so the gap is indicative only."}


def train_parser(ctx: Context) -> Path:
    """The parser trained on --treebank as configs/ptb-parse.yaml trains it (at the budget's size): prepare-parse,
    train (resumed if interrupted), average, parse the dev sentences, score them; into OUT/parts/table4/ laid out
    as a parser results folder (eval.log as benchmarks' eval scripts write it, the run beside it)."""
    o, folder = ctx.budget.parser, ctx.part_dir("table4")
    data, run = folder / "data", folder / "run"
    prepare_parse(ctx.treebank / "train.trees", data, ctx.treebank / "dev.trees", vocab_size=o["vocab_size"],
                  leaves="words")
    if RunDir(run).is_run:
        summary = resume(run, progress=False)
    else:
        tc = TrainConfig.from_dict({**o["train"], "device": ctx.device})
        summary = train(data, run, ModelConfig.preset(o["preset"], **o["model"]), tc, progress=False)
    if summary["interrupted_by"] is not None:
        raise KeyboardInterrupt
    paths = RunDir(run).checkpoints[-o["average_last"]:]
    average(paths, RunDir(run).averaged)
    sentences = files.read_lines(data / "valid.src.txt")[:o["dev_sentences"]]
    gold = list(iter_tree_strings(files.iter_lines(ctx.treebank / "dev.trees")))[:len(sentences)]
    t0 = time.time()
    search = SearchConfig(beam=o["beam"], alpha=o["alpha"], max_len_a=1.0, max_len_b=300)
    parser = Parser(open_engine(run, EngineOptions(engine="aiayn", search=search, device="cpu")))
    trees = [t[0][0] if t else "" for t in parser.parse_nbest(sentences)]
    seconds = time.time() - t0
    files.write_text(folder / "dev.trees", "\n".join(trees) + "\n")
    command = f"aiayn parse --checkpoint {run} --beam {o['beam']} --alpha {o['alpha']}"
    files.write_text(folder / "eval.log", f"== {o['preset']}-avg{len(paths)} ({seconds:.0f} s to decode): {command}\n"
                     + parse_report(score_parses(trees, gold)))
    return folder


def _dev_trees(folder: Path) -> str:
    """How many trees were scored: the lines of the first hypothesis file kept, or 'the'."""
    kept = sorted(folder.glob("**/*.trees"))
    return f"{files.count_lines(kept[0]):,}" if kept else "the"


def table2(ctx: Context, runs: list[Path]) -> dict[str, Any]:
    """Table 2's training cost (aiayn table2) for each run made or reused that logged its speed."""
    rows = []
    for run in runs:
        try:
            c = training_cost(run, 1, ctx.tflops, paper.TABLE2_STEPS["base"], paper.TABLE2_TOKENS_PER_STEP)
        except (UserError, OSError, KeyError):  # no log, or no config.json: a run that cannot be costed
            continue
        here = Path(run).resolve().is_relative_to(ctx.out.resolve())
        rows.append({"run": str(run), "trained": "here" if here else "elsewhere", **c})
    base = paper.TABLE2_HOURS["base"]
    paper_md = (f"Training cost = time x GPUs x sustained TFLOPS: base {base:g} h x {paper.TABLE2_GPUS} P100 x "
                f"{paper.P100_TFLOPS} = {paper.TABLE2_COST['base']:.1e} FLOPs; big "
                f"{paper.TABLE2_HOURS['big']:g} h x {paper.TABLE2_GPUS} x {paper.P100_TFLOPS} = "
                f"{paper.TABLE2_COST['big']:.1e} FLOPs ({paper.TABLE2_STEPS['base']:,} and "
                f"{paper.TABLE2_STEPS['big']:,} steps of ~{paper.TABLE2_TOKENS_PER_STEP:,} target tokens).")
    table = "\n".join(f"| {r['run']} | {r['trained']} | {r['tokens_per_s']:,.0f} | {r['hours']:,.0f} | "
                      f"{r['paper_way_flops']:.2g} | {r['model_flops']:.2g} | {100 * r['utilisation']:.0f} % |"
                      for r in rows)
    fastest = max(rows, key=lambda r: r["tokens_per_s"], default=None)
    return {"title": "Table 2: training cost", "rows": rows, "paper": paper_md,
            "command": f"aiayn table2 RUN --gpus 1 --tflops {ctx.tflops:.3g}",
            "ours": f"Per run, the paper's base schedule ({paper.TABLE2_STEPS['base']:,} steps x "
                    f"{paper.TABLE2_TOKENS_PER_STEP:,} target tokens) at the run's median "
                    f"speed, on one device of {ctx.tflops:.3g} sustained TFLOPS (this machine's; a run trained "
                    "elsewhere keeps the speed logged there, so its utilisation may read above 100 %):\n\n"
                    "| run | trained | target tokens/s | hours | cost the paper's way (FLOPs) | model FLOPs | "
                    "utilisation |\n"
                    f"|---|---|---|---|---|---|---|\n{table}"
            if rows else "No run with a training log to cost.",
            "verdict": (f"At the fastest run's speed ({fastest['tokens_per_s']:,.0f} tokens/s) the paper's base "
                        f"schedule would take {fastest['hours']:,.0f} hours at that speed, against {base:g} h on "
                        f"{paper.TABLE2_GPUS} P100s; the "
                        "costs differ as much as the hardware, and the models costed are smaller than base.")
            if fastest else "Nothing to compare."}


def not_run(ctx: Context) -> dict[str, Any]:
    """What no budget runs here: the paper's WMT14 models and its full-size tables, with the commands."""
    return {"title": "Not run here: the paper's full-size experiments", "source": "commands only",
            "command": "docs/reproduce.md",
            "paper": f"WMT14 EN-DE / EN-FR, base ({paper.TABLE2_HOURS['base']:g} h) and big "
                     f"({paper.TABLE2_HOURS['big']:g} h) on {paper.TABLE2_GPUS} P100 GPUs; Table 3 at full size; the "
                     "parser (the `parse` preset) on the full WSJ training set.",
            "ours": "\n".join([
                "On a machine with 8 GPUs and the WMT14 data (docs/reproduce.md has the data preparation):", "",
                "- `torchrun --nproc_per_node 8 -m aiayn train --config configs/wmt14-ende-base.yaml --out "
                "runs/ende-base`, then `aiayn average --run runs/ende-base --last 5`, `aiayn translate --checkpoint "
                "runs/ende-base --input data-bin/wmt14-ende/test.src.txt --output runs/ende-base/test.hyp` and "
                "`aiayn evaluate --hyp runs/ende-base/test.hyp --ref data-bin/wmt14-ende/test.tgt.txt "
                "--target-lang de`",
                "- the big model: the same with `configs/wmt14-ende-big.yaml` and `--last 20`",
                "- Table 2's cost of either: `aiayn table2 runs/ende-base --gpus 8 --tflops <your GPUs' TFLOPS>`",
                "- Table 3 at full size: `aiayn variations --data data-bin/wmt14-ende --out runs/table3 --jobs 8`",
                "- then this report from them: `aiayn paper --budget gpu --from runs/table3 --from runs/ende-base "
                "...`"]),
            "verdict": "These need GPUs and days; each is one command away."}
