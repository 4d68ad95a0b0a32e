"""Decoding with a lexical shortlist (aiayn.decoding.shortlist) against the full vocabulary, in aiayn and in CTranslate2
(its vocabulary map, use_vmap): sentences/s, BLEU and lines identical to the full vocabulary's, markdown tables.

    python -m benchmarks.e2e.shortlist --checkpoint runs/multi30k --data data-bin/multi30k [--threads 1]
    python -m benchmarks.e2e.shortlist --random base --vocab-size 32000 --allowed 500,2000,8000 [--threads 1]

A trained model: the shortlist is built from --data's train split (--per-source, --frequent; `aiayn shortlist`'s
defaults) and exported with the model as CTranslate2's vocabulary map. The test split (test.src.txt, the first --n
lines; sacreBLEU against test.tgt.txt) is translated by every engine, for each --precision (aiayn's decoding precision;
CTranslate2 exported in the same precision, float32 or int8), with and without the shortlist: beam --beam (4), alpha
0.6 and the |Y|^alpha penalty both engines have (--lp power), max length = source + 50, batches of --batch-size,
--threads threads each, CTranslate2 at its default patience 1. The engines run --reps times interleaved (drift on a
shared machine hits all alike); the table shows the median sentences/s, the ratio to the same engine without a
shortlist, BLEU, and the lines equal to that engine's full-vocabulary output. A first table says what the shortlist
allows: the mean allowed pieces per sentence and per batch, and the share of reference pieces inside its sentence's
allowed set (--data without --checkpoint: that table only, in seconds).

--random PRESET (speed only): a random-init model of the preset and a --vocab-size vocabulary decodes --n random
sources of --src-len pieces for exactly --out-len words (EOS banned until then, as the peer harness does), without a
shortlist and with shortlists that allow N pieces in every batch, for each N of --allowed (what a shortlist costs
depends on how many pieces it allows, not on which), in aiayn and in CTranslate2 (its vocabulary map's always-allowed
line). Model loading, building and exporting are not timed.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from aiayn.data import Vocab
from aiayn.decoding.ct2 import VMAP_FILE
from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.shortlist import SPECIALS, Shortlist, build_from_prepared, coverage
from aiayn.decoding.translator import Translator, padded
from aiayn.export.ct2 import export_ct2
from aiayn.metrics import corpus_bleu
from aiayn.model import Transformer
from aiayn.rundir import inference_checkpoint, load_for_inference
from aiayn.runtime import configure_process
from benchmarks.timing import compare, table

CT2_QUANTIZATION = {"fp32": None, "int8": "int8"}  # aiayn's decoding precision -> the CTranslate2 export's


def allowed_sizes(shortlist: Shortlist, sources: list[list[int]], batch_size: int) -> tuple[float, float]:
    """Mean allowed pieces per sentence, and per batch as Translator cuts them (longest first)."""
    alone = [shortlist.allowed(padded([s])).numel() for s in sources]
    order = sorted(sources, key=lambda s: -len(s))
    batches = [shortlist.allowed(padded(order[i: i + batch_size])).numel() for i in range(0, len(order), batch_size)]
    return sum(alone) / len(alone), sum(batches) / len(batches)


def trained(args: argparse.Namespace) -> None:
    data = Path(args.data)
    src = (data / "test.src.txt").read_text(encoding="utf-8").splitlines()
    ref = (data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()
    if args.n:
        src, ref = src[: args.n], ref[: args.n]
    shortlist = build_from_prepared(data, args.per_source, args.frequent)
    vocab = Vocab.load(data)
    sources = [vocab.encode(line) + [EOS_ID] for line in src]
    per_sentence, per_batch = allowed_sizes(shortlist, sources, args.batch_size)
    covered = coverage(shortlist, sources, [vocab.encode(line) for line in ref])
    print(f"\nshortlist of {data} (train split): {args.per_source} per source piece, {args.frequent} frequent, "
          f"{len(vocab):,} pieces in all; {len(src)} test lines\n")
    print(table(["allowed pieces per sentence", f"per batch of {args.batch_size}", "reference pieces covered"],
                [[f"{per_sentence:.0f}", f"{per_batch:.0f}", f"{100 * covered:.2f}%"]]), flush=True)
    if args.checkpoint:
        _engines(args, shortlist, src, ref)


def _engines(args: argparse.Namespace, shortlist: Shortlist, src: list[str], ref: list[str]) -> None:
    """The table of engines, with and without the shortlist."""
    checkpoint = inference_checkpoint(Path(args.checkpoint))
    model, vocab, _ = load_for_inference(checkpoint)
    search = SearchConfig(beam=args.beam, alpha=0.6, lp="power")
    with tempfile.TemporaryDirectory() as tmp:
        engines = {}
        for w in args.precision.split(","):
            folder = export_ct2(model, vocab, Path(tmp) / w, CT2_QUANTIZATION[w], shortlist=shortlist)
            full = Translator(model, vocab, search, w, batch_size=args.batch_size)
            short = Translator(full.model, vocab, search, w, batch_size=args.batch_size, shortlist=shortlist)
            engines[f"aiayn {w}", False], engines[f"aiayn {w}", True] = full.translate, short.translate
            for vmap in (False, True):
                ct2 = open_engine(folder, EngineOptions(engine="ct2", search=search, threads=args.threads,
                                                        shortlist=vmap, device="cpu", batch_size=args.batch_size))
                engines[f"CTranslate2 {w}", vmap] = ct2.translate
        runs = {key: (lambda run=run: run(src)) for key, run in engines.items()}
        t = compare(runs, repeats=args.reps, warmup=0, each=lambda key, rep, seconds: print(
            f"rep {rep + 1} {key[0]:18s} {'shortlist' if key[1] else 'full':9s} {seconds:7.2f} s", flush=True))

    rows = []
    for (engine, short), timing in t.items():
        full = t[engine, False]
        same = sum(a == b for a, b in zip(timing.result, full.result))
        rows.append([engine, "shortlist" if short else "full vocabulary", f"{len(src) / timing.median:.1f}",
                     f"{full.median / timing.median:.2f}x", f"{corpus_bleu(timing.result, ref).score:.2f}",
                     f"{same}/{len(src)}"])
    print(f"\n{checkpoint}: {len(src)} test lines, beam {args.beam}, alpha 0.6, lp power, batch {args.batch_size}, "
          f"{args.threads} thread(s), median of {args.reps}; sacreBLEU\n")
    print(table(["engine", "output", "sentences/s", "vs full vocabulary", "BLEU", "lines as full vocabulary"], rows))


def random_sources(n: int, length: int, vocab_size: int) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(len(SPECIALS), vocab_size) for _ in range(length - 1)] + [EOS_ID] for _ in range(n)]


def speed_only(args: argparse.Namespace) -> None:
    V = args.vocab_size
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset(args.random, vocab_size=V)).eval()
    sources = random_sources(args.n, args.src_len, V)
    search = SearchConfig(beam=args.beam, alpha=0.6, lp="power", max_len_a=0.0, max_len_b=args.out_len,
                          min_len=args.out_len)
    sizes = [int(n) for n in args.allowed.split(",")]
    shortlists = {n: Shortlist(torch.zeros(V, 0, dtype=torch.long), torch.arange(len(SPECIALS), n)) for n in sizes}
    pieces = [f"<{i}>" for i in range(V)]
    pieces[PAD_ID], pieces[BOS_ID], pieces[EOS_ID] = "<pad>", "<s>", "</s>"
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dirs = {None: _export_random(model, pieces, Path(tmp) / "full")}
        for n in sizes:  # one folder per vocabulary map (CTranslate2 reads vmap.txt from the model's folder)
            ct2_dirs[n] = _with_vmap(ct2_dirs[None], Path(tmp) / str(n), [pieces[i] for i in range(len(SPECIALS), n)])
        decoding, runs = Translator(model, None, search).model, {}  # one decoding copy for every shortlist
        for n in [None, *sizes]:
            t = Translator(decoding, None, search, batch_size=args.batch_size, shortlist=shortlists.get(n))
            runs["aiayn", n] = lambda t=t: t.search_ids(sources)
            runs["CTranslate2", n] = lambda d=ct2_dirs[n], vmap=n is not None: _ct2_random(d, pieces, sources, args,
                                                                                          vmap)
        t = compare(runs, repeats=args.reps, warmup=1, each=lambda key, rep, seconds: print(
            f"rep {rep + 1} {key[0]:12s} {key[1] or 'full':>6} {seconds:7.2f} s", flush=True))
    rows = [[engine, f"{n:,}" if n else f"all {V:,}", f"{len(sources) / timing.median:.2f}",
             f"{t[engine, None].median / timing.median:.2f}x"] for (engine, n), timing in t.items()]
    print(f"\n{args.random}, random init, {V:,} pieces: {len(sources)} sources of {args.src_len} pieces, exactly "
          f"{args.out_len} words out, beam {args.beam}, batch {args.batch_size}, {args.threads} thread(s), median of "
          f"{args.reps}\n")
    print(table(["engine", "allowed pieces", "sentences/s", "vs full vocabulary"], rows))


def _export_random(model: Transformer, pieces: list[str], folder: Path) -> Path:
    """A CTranslate2 folder of the random model over made-up pieces."""

    class Pieces:  # what export_ct2 reads of a vocabulary
        model_path = folder.parent / "no-sentencepiece.model"

        def __len__(self):
            return len(pieces)

        def piece(self, i: int) -> str:
            return pieces[i]

    Pieces.model_path.touch()
    return export_ct2(model, Pieces(), folder)


def _with_vmap(folder: Path, dest: Path, always: list[str]) -> Path:
    """`folder`'s model (its files linked) with a vocabulary map that always allows the pieces `always`."""
    dest.mkdir()
    for f in folder.iterdir():
        (dest / f.name).symlink_to(f)
    (dest / VMAP_FILE).write_text("\t" + " ".join(always) + "\n", encoding="utf-8")
    return dest


def _ct2_random(folder: Path, pieces: list[str], sources: list[list[int]], args: argparse.Namespace, vmap: bool):
    import ctranslate2

    translator = _ct2_random.cache.get(folder)
    if translator is None:
        translator = _ct2_random.cache[folder] = ctranslate2.Translator(str(folder), intra_threads=args.threads)
    out = []
    for i in range(0, len(sources), args.batch_size):
        batch = [[pieces[t] for t in s[:-1]] for s in sources[i: i + args.batch_size]]
        out += translator.translate_batch(batch, beam_size=args.beam, length_penalty=0.6, use_vmap=vmap,
                                          max_decoding_length=args.out_len, min_decoding_length=args.out_len,
                                          suppress_sequences=[[pieces[PAD_ID]], [pieces[BOS_ID]]])
    return out


_ct2_random.cache = {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", help="run directory or checkpoint file (a trained model)")
    ap.add_argument("--data", help="its prepared-data directory: train split (shortlist), test.src.txt / .tgt.txt")
    ap.add_argument("--random", metavar="PRESET", help="speed only: a random-init model of this preset (e.g. base)")
    ap.add_argument("--vocab-size", type=int, default=32000, help="--random: pieces (default 32000)")
    ap.add_argument("--allowed", default="500,2000,8000", help="--random: allowed pieces per batch, comma-separated")
    ap.add_argument("--src-len", type=int, default=24, help="--random: source pieces with EOS (default 24)")
    ap.add_argument("--out-len", type=int, default=24, help="--random: words out (default 24)")
    ap.add_argument("--n", type=int, default=0, help="test lines (default all; --random: 128)")
    ap.add_argument("--per-source", type=int, default=50)
    ap.add_argument("--frequent", type=int, default=100)
    ap.add_argument("--precision", "--weights", default="fp32",
                    help="aiayn decoding precisions, comma-separated: fp32, int8 (--weights: its old name)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    configure_process(kernel_cache=True, keep_freed_memory=True, threads=args.threads)  # as `aiayn`'s main does
    if args.random:
        args.n = args.n or 128
        speed_only(args)
    elif args.data:
        trained(args)
    else:
        ap.error("give --checkpoint and --data (a trained model; --data alone: the first table only), or --random "
                 "PRESET (speed only)")


if __name__ == "__main__":
    main()
