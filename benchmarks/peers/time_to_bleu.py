"""BLEU per wall-clock minute of training: aiayn beside fairseq 0.12.2 or HF transformers' Seq2SeqTrainer, the same
data, shape, threads (or GPU) and budgets.

    python -m benchmarks.peers.time_to_bleu                              # budgets 15,30,60,95 min, one after the other
    python -m benchmarks.peers.time_to_bleu --parallel                   # both at once, one thread each (~100 min)
    python -m benchmarks.peers.time_to_bleu --parallel --data data-bin/iwslt-deen --config configs/iwslt-deen.yaml \
        --name "IWSLT16 DE-EN" --work runs/ttb-iwslt --plot docs/img/time_to_bleu_iwslt.png   # a second corpus
    python -m benchmarks.peers.time_to_bleu --budgets 1,2 --save-every 20 --average 2 --test-lines 100 \
        --work /tmp/ttb-smoke --plot /tmp/ttb-smoke/plot.png       # a smoke run: the whole pipeline in minutes
    python -m benchmarks.peers.time_to_bleu --device cuda --systems aiayn,hf --budgets 1,2,3 --save-every 200 \
        --work runs/ttb-gpu --plot runs/ttb-gpu/plot.png            # on one GPU, one system after the other

What is compared (everything that is not the toolkit is the same):
- Data: aiayn's prepared corpus (--data, default `data-bin/multi30k`, from the command in configs/multi30k.yaml).
  fairseq gets the very same pairs: aiayn's token ids written back as SentencePiece pieces, binarized by
  `fairseq-preprocess` with one dictionary listing aiayn's pieces in aiayn's order (so both have the same shared
  vocabulary).
- Model and recipe, each toolkit's own implementation of the same thing, read from aiayn's --config (with
  --aiayn-set): for configs/multi30k.yaml and configs/iwslt-deen.yaml 3+3 layers, d_model 256, 4 heads, d_ff 1024,
  P_drop 0.3, label smoothing 0.1, Adam (0.9, 0.98, 1e-9), an inverse-square-root schedule whose warm-up and peak are
  aiayn's Noam schedule's (peak lr_factor * d_model^-0.5 * warmup^-0.5; fairseq `--lr-scheduler inverse_sqrt
  --warmup-init-lr 1e-7`), the config's batch tokens; all embeddings shared (fairseq `--arch transformer
  --share-all-embeddings`, post-norm as the paper), no gradient clipping, seed 1, fairseq's default validation at
  each save. fairseq's parameter count in its log includes copies of the encoder weights that torch's inference fast
  path registers (training leaves them untouched). Both start from fairseq's initialization (the configs'
  `init: fairseq`; `--aiayn-set init=xavier` for aiayn's other one). aiayn's `dtype: auto` is fp32 on a CPU
  without native bf16, bf16 where it is native: fairseq has no bf16 CPU training (its --bf16 implies --tpu), so on
  such a machine the comparison includes that difference; --dtype fp32 removes it.
- HF (the system `hf`, benchmarks/peers/hf_seq2seq.py): MarianMTModel, the same shape, trained by HF's
  Seq2SeqTrainer with the recipe mapped onto its documented options (inverse-square-root schedule with the same
  warm-up and peak, label smoothing, no clipping, bf16 on a GPU), batches of sentences (the config's tokens / the
  mean target length) grouped by length; decoded by `generate` (beam 4, its length penalty 0.6 = score / |Y|^0.6).
- Device: --device cpu (default) or cuda (aiayn and hf; fairseq here is CPU only); on a GPU the systems train one
  after the other.
- Threads: --threads for both (OMP/MKL threads and torch's); --parallel runs both at once, --threads 1 each.
- Checkpoints: both save every --save-every updates (all kept); the wall time of a checkpoint is its file's time
  since its training process started (start-up and dev evaluations included, for both). At a budget of B minutes
  each system's last --average checkpoints saved within B minutes are averaged (parameters element-wise, as `aiayn
  average` and fairseq's scripts/average_checkpoints.py do), and the average is scored.
- Decoding: beam 4, length penalty 0.6, the --data test set, --threads threads. The penalties differ by design:
  aiayn's is the paper's GNMT alpha ((5 + |Y|) / 6)^0.6, fairseq's `--lenpen 0.6` divides by |Y|^0.6.
- Score: the same `sacrebleu.corpus_bleu` (13a tokenization) of the detokenized outputs against the --data test
  references; at each budget aiayn against each peer by sacreBLEU's paired bootstrap resampling (a p column per peer).

Prints a table (minutes | BLEU per system | p of aiayn against each peer | steps), writes JSON lines
(WORK/results.jsonl) and a plot (--plot, default docs/img/time_to_bleu.png). Resumable: a finished training, average
or decode is not redone.
Needs the harness's fairseq venv: ROOT=$PEERS bash ../shared/bench/peers/setup_peers.sh (PEERS default
~/.cache/aiayn-peers).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from aiayn.config import EOS_ID
from aiayn.data import Vocab, load_split
from aiayn.rundir import RunDir
from aiayn.training.checkpoint import average_checkpoints, save_weights

REPO = Path(__file__).resolve().parents[2]

PEERS = Path(os.environ.get("PEERS", Path.home() / ".cache" / "aiayn-peers"))
FAIRSEQ_BIN = PEERS / "venv-fairseq" / "bin"
SYSTEMS = ("aiayn", "fairseq", "hf")

FAIRSEQ_AVERAGE = """
import sys, torch
out, paths = sys.argv[1], sys.argv[2:]
first, total = None, {}
for p in paths:
    state = torch.load(p, map_location="cpu", weights_only=False)
    first = first or state
    for k, v in state["model"].items():
        total[k] = total[k] + v.double() if k in total else v.double()
first["model"] = {k: (v / len(paths)).float() for k, v in total.items()}
first["last_optimizer_state"] = None
torch.save(first, out)
"""

# fairseq-generate, without the encoder's "BetterTransformer" fast path (torch._transformer_encoder_layer_fwd), which
# fails under torch 2.13 ("Mask Type should be defined"); the ordinary path computes the same layer.
FAIRSEQ_GENERATE = """
import sys
from fairseq.modules import transformer_layer as tl
init = tl.TransformerEncoderLayerBase.__init__
def no_fast_path(self, *a, **k):
    init(self, *a, **k)
    self.can_use_fastpath = False
tl.TransformerEncoderLayerBase.__init__ = no_fast_path
from fairseq_cli.generate import cli_main
sys.argv = ["fairseq-generate", *sys.argv[1:]]
cli_main()
"""


def thread_env(threads: int) -> dict[str, str]:
    # TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: fairseq 0.12 pickles its config into checkpoints; torch >= 2.6 refuses
    # that by default.
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


def export_for_fairseq(data: Path, work: Path, test_lines: int | None) -> Path:
    """aiayn's prepared pairs as piece text, binarized by fairseq with aiayn's vocabulary; returns the bin folder."""
    bin_dir = work / "fairseq-bin"
    if (bin_dir / "test.src-tgt.tgt.bin").exists():
        return bin_dir
    vocab = Vocab.load(data / "vocab.model")
    text = work / "fairseq-text"
    text.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        ds = load_split(data, split)
        n = len(ds) if split != "test" or not test_lines else min(test_lines, len(ds))
        for side, lang in ((0, "src"), (1, "tgt")):
            with open(text / f"{split}.{lang}", "w", encoding="utf-8") as f:
                for i in range(n):
                    f.write(" ".join(vocab.piece(int(t)) for t in ds[i][side] if t != EOS_ID) + "\n")
    first_word = 4  # aiayn's ids 0-3 are <pad> <unk> <s> </s>; fairseq adds its own four
    with open(text / "dict.txt", "w", encoding="utf-8") as f:
        f.writelines(f"{vocab.piece(i)} 1\n" for i in range(first_word, len(vocab)))
    run([FAIRSEQ_BIN / "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
         "--trainpref", text / "train", "--validpref", text / "valid", "--testpref", text / "test",
         "--srcdict", text / "dict.txt", "--tgtdict", text / "dict.txt", "--destdir", bin_dir, "--workers", "1"],
        work / "fairseq-preprocess.log", os.environ.copy())
    return bin_dir


def run(cmd: list, log: Path, env: dict[str, str]) -> None:
    with open(log, "a") as f:
        rc = subprocess.call([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    if rc:
        raise SystemExit(f"{cmd[0]} failed ({rc}); see {log}:\n" + "".join(log.read_text().splitlines(True)[-8:]))


def recipe(args) -> dict:
    """The shape and training recipe of aiayn's config (with --aiayn-set), as the fields fairseq is given too."""
    from aiayn.cli.common import model_overrides
    from aiayn.cli.train import load_config_file
    from aiayn.config import ModelConfig
    from aiayn.training.train import TrainConfig

    cfg = load_config_file(args.config)
    m = ModelConfig.preset(cfg.get("preset", "base"), **{**cfg.get("model", {}), **model_overrides(args.aiayn_set)})
    t = TrainConfig.from_dict(cfg.get("train", {}))
    if t.anneal or t.update_freq != 1 or t.clip_norm:
        raise SystemExit(f"{args.config}: anneal, update_freq and clip_norm are not mapped to fairseq's options here")
    return {"enc_layers": m.n_enc_layers, "dec_layers": m.n_dec_layers, "d_model": m.d_model, "d_ff": m.d_ff,
            "heads": m.n_heads, "dropout": m.dropout, "label_smoothing": m.label_smoothing, "warmup": t.warmup,
            "peak_lr": t.lr_factor * m.d_model ** -0.5 * t.warmup ** -0.5,  # the Noam schedule's top
            "max_tokens": t.max_tokens, "adam_betas": f"({t.adam_betas[0]:g}, {t.adam_betas[1]:g})",
            "adam_betas_pair": list(t.adam_betas), "adam_eps": t.adam_eps}


def train_commands(args, bin_dir: Path) -> dict[str, list]:
    minutes = max(args.budgets)
    r = recipe(args)
    aiayn = [sys.executable, "-m", "aiayn", "train", "--config", args.config,
             "--data", args.data, "--out", args.work / "aiayn", "--threads", args.threads, "--max-minutes", minutes,
             "--save-every-steps", args.save_every, "--save-every-minutes", 0, "--keep-last", 100_000,
             "--no-progress", "--device", args.device] + (["--dtype", args.dtype] if args.dtype else [])
    for kv in args.aiayn_set:
        aiayn += ["--set", kv]
    fairseq = [FAIRSEQ_BIN / "fairseq-train", bin_dir, "--cpu", "--num-workers", 0, "--seed", 1,
               "--arch", "transformer", "--share-all-embeddings",
               "--encoder-layers", r["enc_layers"], "--decoder-layers", r["dec_layers"],
               "--encoder-embed-dim", r["d_model"], "--decoder-embed-dim", r["d_model"],
               "--encoder-ffn-embed-dim", r["d_ff"], "--decoder-ffn-embed-dim", r["d_ff"],
               "--encoder-attention-heads", r["heads"], "--decoder-attention-heads", r["heads"],
               "--dropout", r["dropout"], "--attention-dropout", 0, "--activation-dropout", 0,
               "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", r["label_smoothing"],
               "--optimizer", "adam", "--adam-betas", r["adam_betas"], "--adam-eps", r["adam_eps"], "--clip-norm", 0,
               "--lr-scheduler", "inverse_sqrt", "--warmup-updates", r["warmup"], "--warmup-init-lr", 1e-7,
               "--lr", f"{r['peak_lr']:.6g}", "--max-tokens", r["max_tokens"], "--max-epoch", 100_000,
               "--stop-time-hours", f"{minutes / 60:.6g}",
               "--save-dir", args.work / "fairseq", "--save-interval-updates", args.save_every,
               "--keep-interval-updates", -1, "--no-epoch-checkpoints", "--no-last-checkpoints",
               "--log-format", "simple", "--log-interval", 50, "--no-progress-bar"]
    hf = [sys.executable, "-m", "benchmarks.peers.hf_seq2seq", "train", "--data", args.data, "--out", args.work / "hf",
          "--minutes", minutes, "--save-every", args.save_every, "--recipe", json.dumps(r), "--device", args.device]
    return {"aiayn": aiayn, "fairseq": fairseq, "hf": hf}


def train(args, bin_dir: Path) -> None:
    """Train what is not trained yet (both at once with --parallel); record each process's start time."""
    cmds = train_commands(args, bin_dir)
    todo = [s for s in args.systems if not (args.work / f"{s}.trained.json").exists()]
    for s in todo:  # an unfinished earlier attempt: start that system again from scratch
        shutil.rmtree(args.work / s, ignore_errors=True)
    groups = [todo] if args.parallel else [[s] for s in todo]
    for group in groups:
        procs = {}
        for s in group:
            log = open(args.work / f"{s}.train.log", "w")
            procs[s] = (time.time(), subprocess.Popen([str(c) for c in cmds[s]], stdout=log, stderr=subprocess.STDOUT,
                                                      env=thread_env(args.threads), cwd=REPO), log)
            print(f"training {s} for {max(args.budgets):g} min ({args.threads} thread(s)); log {log.name}", flush=True)
        for s, (start, proc, log) in procs.items():
            rc = proc.wait()
            log.close()
            if rc:
                raise SystemExit(f"{s} training failed ({rc}); see {args.work / f'{s}.train.log'}")
            (args.work / f"{s}.trained.json").write_text(json.dumps({"start": start, "end": time.time(),
                                                                     "command": [str(c) for c in cmds[s]]}))


def checkpoints(args, system: str) -> list[tuple[float, int, Path]]:
    """(minutes since the process started, update, path) of every checkpoint, oldest first."""
    start = json.loads((args.work / f"{system}.trained.json").read_text())["start"]
    if system == "aiayn":
        found = [(int(p.stem.split("_")[1]), p) for p in RunDir(args.work / "aiayn").checkpoints]
    elif system == "hf":  # checkpoint-N folders; a folder's time is its weights file's
        found = [(int(p.name.split("-")[1]), p) for p in (args.work / "hf").glob("checkpoint-*")
                 if (p / "model.safetensors").exists()]
        return sorted(((p.stat().st_mtime - start) / 60, step, p) for step, p in
                      ((step, d / "model.safetensors") for step, d in found))
    else:
        found = [(int(m.group(1)), p) for p in (args.work / "fairseq").glob("checkpoint_*_*.pt")
                 if (m := re.fullmatch(r"checkpoint_\d+_(\d+)\.pt", p.name))]
    return sorted(((p.stat().st_mtime - start) / 60, step, p) for step, p in found)


def evaluate(args, system: str, budget: float, bin_dir: Path, refs: list[str], src: Path) -> dict | None:
    chosen = [c for c in checkpoints(args, system) if c[0] <= budget][-args.average:]
    if not chosen:
        return None
    out = args.work / "eval" / f"{system}-{budget:g}"
    out.mkdir(parents=True, exist_ok=True)
    hyp = out / "test.hyp"
    if not hyp.exists():
        env = thread_env(args.threads)
        if system == "aiayn":
            avg = args.work / "aiayn" / f"average-{budget:g}min.safetensors"  # in the run folder: finds vocab.model
            state, cfg = average_checkpoints([p for _, _, p in chosen])
            save_weights(avg, state, cfg)
            run([sys.executable, "-m", "aiayn", "translate", "--checkpoint", avg, "--input", src,
                 "--output", hyp, "--beam", 4, "--alpha", 0.6, "--no-progress", "--no-split-sentences", "--device",
                 args.device],
                out / "decode.log", env)
        elif system == "hf":
            run([sys.executable, "-m", "benchmarks.peers.hf_seq2seq", "decode", "--data", args.data, "--input", src,
                 "--output", hyp, "--beam", 4, "--lenpen", 0.6, "--device", args.device,
                 *[p.parent for _, _, p in chosen]], out / "decode.log", env)
        else:
            avg = out / "average.pt"
            run([FAIRSEQ_BIN / "python", "-c", FAIRSEQ_AVERAGE, avg, *[p for _, _, p in chosen]], out / "average.log",
                env)
            gen = out / "generate.txt"
            run([FAIRSEQ_BIN / "python", "-c", FAIRSEQ_GENERATE, bin_dir, "--path", avg, "--gen-subset", "test",
                 "--cpu", "--beam", 4, "--lenpen", 0.6, "--batch-size", 64, "--post-process", "sentencepiece",
                 "--results-path", out], out / "decode.log", env)
            shutil.move(out / "generate-test.txt", gen)
            lines = {}
            for line in gen.read_text(encoding="utf-8").splitlines():
                if line.startswith("D-"):
                    tag, _, text = line.split("\t", 2)
                    lines[int(tag[2:])] = text
            hyp.write_text("".join(lines.get(i, "") + "\n" for i in range(len(refs))), encoding="utf-8")
    import sacrebleu

    hyps = hyp.read_text(encoding="utf-8").splitlines()
    bleu = sacrebleu.corpus_bleu(hyps, [refs])
    return {"system": system, "budget_min": budget, "bleu": round(bleu.score, 2), "bp": round(bleu.bp, 3),
            "step": chosen[-1][1], "checkpoints": [c[1] for c in chosen],
            "minutes_of_last": round(chosen[-1][0], 2), "threads": args.threads}


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for system, style in zip(SYSTEMS, ("o-", "s--", "^:")):
        got = sorted((r["budget_min"], r["bleu"]) for r in rows if r["system"] == system)
        if got:
            ax.plot(*zip(*got), style, label=system)
    ax.set_xlabel("training wall-clock minutes")
    ax.set_ylabel("test BLEU (sacreBLEU)")
    ax.set_title(f"{title}, same data, shape, hardware")
    ax.grid(alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO / "data-bin" / "multi30k")
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "multi30k.yaml",
                    help="aiayn's config; its shape and recipe are given to fairseq too")
    ap.add_argument("--name", default=None, help="the corpus's name in the table and plot (default: --data's folder)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "time_to_bleu")
    ap.add_argument("--budgets", default="15,30,60,95", help="minutes, comma separated")
    ap.add_argument("--threads", type=int, default=None, help="per system (default: 2, or 1 with --parallel)")
    ap.add_argument("--parallel", action="store_true", help="train both systems at once")
    ap.add_argument("--save-every", type=int, default=150, help="updates between checkpoints (both systems)")
    ap.add_argument("--average", type=int, default=5, help="checkpoints averaged at each budget")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], help="aiayn's training dtype (default: the config's auto)")
    ap.add_argument("--systems", default="aiayn,fairseq", help="aiayn and one or both of fairseq, hf")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for aiayn and hf")
    ap.add_argument("--aiayn-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a model field for aiayn's run, as `aiayn train --set` (repeatable); e.g. init=fairseq to "
                         "start from fairseq's initialization (docs/model.md)")
    ap.add_argument("--test-lines", type=int, default=None, help="score on the first N test lines only (smoke runs)")
    ap.add_argument("--plot", type=Path, default=REPO / "docs" / "img" / "time_to_bleu.png")
    args = ap.parse_args()
    args.budgets = sorted(float(b) for b in args.budgets.split(","))
    args.threads = args.threads or (1 if args.parallel else 2)
    args.systems = [s for s in args.systems.split(",") if s]
    if args.device != "cpu" and "fairseq" in args.systems:
        raise SystemExit("fairseq runs on the CPU here; on a GPU compare --systems aiayn,hf")
    if args.device != "cpu" and args.parallel:
        raise SystemExit("--parallel shares a CPU's cores; on a GPU the systems train one after the other")
    if "fairseq" in args.systems and not (FAIRSEQ_BIN / "fairseq-train").exists():
        raise SystemExit(f"no fairseq at {FAIRSEQ_BIN}: ROOT={PEERS} bash ../shared/bench/peers/setup_peers.sh")
    args.work.mkdir(parents=True, exist_ok=True)

    bin_dir = export_for_fairseq(args.data, args.work, args.test_lines) if "fairseq" in args.systems else None
    refs = (args.data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()[: args.test_lines]
    src = args.work / "test.src.txt"
    src.write_text("".join(line + "\n" for line in
                           (args.data / "test.src.txt").read_text(encoding="utf-8").splitlines()[: len(refs)]),
                   encoding="utf-8")
    train(args, bin_dir)
    rows = [r for b in args.budgets for s in args.systems if (r := evaluate(args, s, b, bin_dir, refs, src))]
    with open(args.work / "results.jsonl", "w") as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    by = {(r["system"], r["budget_min"]): r for r in rows}
    peers = [s for s in args.systems if s != "aiayn"]
    tests = {peer: significance(args, by, refs, peer) for peer in peers}
    name = args.name or args.data.name
    where = args.device if args.device != "cpu" else f"{args.threads} thread(s) per system"
    print(f"\n{name} test ({len(refs)} lines), {where}{', both at once' if args.parallel else ''}; average of the "
          f"last {args.average} checkpoints; p: aiayn against each peer by paired bootstrap resampling (sacreBLEU's, "
          "1,000 resamples; WORK/significance-PEER.txt)\n")
    shown = [s for s in SYSTEMS if s in args.systems]
    print("| minutes | " + " | ".join(f"{s} BLEU" for s in shown) + "".join(f" | p vs {p}" for p in peers) + " | "
          + " | ".join(f"{s} steps" for s in shown) + " |\n|" + "---|" * (1 + len(peers) + 2 * len(shown)))
    for b in args.budgets:
        cells = [by.get((s, b)) for s in shown]
        ps = "".join(f" | {tests[p][b]:.3f}" if b in tests[p] else " | " for p in peers)
        print(f"| {b:g} | " + " | ".join(f"{c['bleu']:.2f}" if c else "" for c in cells) + f"{ps} | "
              + " | ".join(f"{c['step']:,}" if c else "" for c in cells) + " |")
    plot(rows, args.plot, name)
    print(f"\nresults: {args.work / 'results.jsonl'}; plot: {args.plot}")


def significance(args, by: dict, refs: list[str], peer: str) -> dict[float, float]:
    """Budget -> p-value of aiayn's BLEU against the peer's (paired bootstrap); the full tables to
    WORK/significance-PEER.txt."""
    from aiayn.metrics.significance import format_comparison, paired_significance

    p_values, report = {}, []
    for b in args.budgets:
        if ("aiayn", b) not in by or (peer, b) not in by:
            continue
        systems = {s: (args.work / "eval" / f"{s}-{b:g}" / "test.hyp").read_text(encoding="utf-8").splitlines()
                   for s in (peer, "aiayn")}
        c = paired_significance(systems, refs, metrics=("bleu", "chrf"))
        p_values[b] = c.scores["bleu"]["aiayn"].p_value
        report += [f"## {b:g} minutes", format_comparison(c)]
    if report:
        (args.work / f"significance-{peer}.txt").write_text("\n".join(report) + "\n", encoding="utf-8")
    return p_values


if __name__ == "__main__":
    main()
