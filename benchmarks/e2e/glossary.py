"""A glossary on a real test set: BLEU, chrF, sentences/s and the constraints met, with and without it.

    python -m benchmarks.e2e.glossary --checkpoint runs/quickstart/run --candidates names.tsv [--threads 2]

--candidates is a bilingual list (`source<TAB>target`, aiayn.decoding.glossary's format: e.g. Bible names, Jesus ->
Jesús). Each entry is checked against the test references (the run's recorded prepared data, or --data): among the test
sentences whose source holds the source term (whole words, case as written: what `aiayn translate --glossary`
matches), the share whose reference holds the target term; entries at or above --min-rate are the glossary, the
others are listed and left out. Then the test split (the first --n lines) is translated without and with the glossary
(each beam of --beams, the paper's alpha and length limit, batches of --batch-size, --threads threads), interleaved
--reps times, every other round in reverse order, after an untimed warm-up on the first batch (and the glossary's
search by dynamic beam allocation alone, on every sentence with terms, without the plain search first); the table
gives median sentences/s, the median CPU seconds of the process (what a machine shared with other jobs disturbs
least) and the speed they give against the search without a glossary, sacreBLEU BLEU and chrF (aiayn evaluate's),
and of the constraints (a sentence's target terms): how many the best translation holds, with and without the
glossary. The glossary is
drawn from the test references, so its BLEU is what correct terms are worth, not what a glossary made elsewhere gives.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.glossary import Glossary, constrained_beam_search
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator, padded
from aiayn.metrics import chrf, corpus_bleu
from benchmarks.timing import compare, table


def checked(candidates: Glossary, src: list[str], ref: list[str], min_rate: float) -> tuple[Glossary, list[list]]:
    """The candidates whose target term is in the reference of at least min_rate of the sentences that hold the
    source term; and a row per candidate: terms, sentences, share, kept."""
    kept, rows = [], []
    for source, target in candidates.entries:
        one, other = Glossary(((source, target),)), Glossary(((target, target),))
        hits = [bool(other.terms_in(r)) for s, r in zip(src, ref) if one.terms_in(s)]
        rate = sum(hits) / len(hits) if hits else 0.0
        if hits and rate >= min_rate:
            kept.append((source, target))
        rows.append([f"{source} -> {target}", len(hits), f"{rate:.2f}", "yes" if hits and rate >= min_rate else "no"])
    return Glossary(tuple(kept)), rows


def held(texts: list[str], targets: list[list[str]]) -> tuple[int, int]:
    """(constraints held, constraints): a sentence's target term held where its translation has it at a word start
    (what the search's pieces guarantee: the term's first piece starts a word, its last may be followed by more)."""
    met = total = 0
    for text, words in zip(texts, targets):
        total += len(words)
        met += sum(bool(re.search(rf"(?<!\w){re.escape(w)}", text)) for w in words)
    return met, total


def allocation_alone(translator: Translator, src: list[str], terms: list[list[tuple[int, ...]]]) -> list[str]:
    """The glossary's translations by dynamic beam allocation alone (constrained_beam_search(with_plain=False)), in
    the Translator's length-sorted batches."""
    sources = translator.encode(src)
    order = sorted(range(len(src)), key=lambda i: -len(sources[i]))
    out = [""] * len(src)
    for start in range(0, len(order), translator.batch_size):
        idx = order[start: start + translator.batch_size]
        hyps = constrained_beam_search(translator.model, padded([sources[i] for i in idx]), translator.search,
                                       terms=[terms[i] for i in idx], lines=torch.tensor(idx), with_plain=False)
        for i, hs in zip(idx, hyps):
            out[i] = translator.vocab.decode(hs[0].tokens)
    return out


def decodings(translator: Translator, glossary: Glossary, src: list[str], terms: list[list[tuple[int, ...]]]
              ) -> dict[str, Callable[[], list[str]]]:
    """The three decodings of `src` (terms: its lines' glossary terms), each a call giving the translations."""
    return {"without": lambda: translator.translate(src),
            "with glossary": lambda: translator.translate(src, glossary=glossary),
            "with glossary, allocation alone": lambda: allocation_alone(translator, src, terms)}


def cpu_timed(fn: Callable[[], list[str]], cpu: list[float]) -> Callable[[], list[str]]:
    """fn, appending the CPU seconds of the process each call takes to `cpu`."""
    def call():
        start = time.process_time()
        out = fn()
        cpu.append(time.process_time() - start)
        return out
    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data", help="prepared data (default: the run's, from its config.json)")
    ap.add_argument("--candidates", required=True, help="source<TAB>target candidate entries")
    ap.add_argument("--min-rate", type=float, default=0.8)
    ap.add_argument("--n", type=int, default=0, help="test lines (0: all)")
    ap.add_argument("--beams", default="4", help="beam sizes, comma-separated (a table row pair each)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = Path(args.data or json.loads((Path(args.checkpoint) / "config.json").read_text())["data"])
    src = (data / "test.src.txt").read_text(encoding="utf-8").splitlines()
    ref = (data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()
    if args.n:
        src, ref = src[: args.n], ref[: args.n]
    glossary, rows = checked(Glossary.read(args.candidates), src, ref, args.min_rate)
    print(f"## Candidates checked against the references ({data}/test.tgt.txt, {len(src)} lines)\n")
    print(table(["entry", "source sentences", "reference holds target", "kept"], rows))
    print("\nglossary:", "; ".join(f"{s}\t{t}" for s, t in glossary.entries))

    loaded = open_engine(args.checkpoint, EngineOptions(engine="aiayn", device="cpu"))
    rows, subset = [], []
    for beam in map(int, args.beams.split(",")):
        translator = Translator(loaded.model, loaded.vocab, SearchConfig(beam=beam), batch_size=args.batch_size)
        terms = translator.glossary_terms(src, glossary)
        targets = [glossary.terms_in(line) for line in src]
        for warm in decodings(translator, glossary, src[: args.batch_size], terms[: args.batch_size]).values():
            warm()
        variants = decodings(translator, glossary, src, terms)
        cpu = {name: [] for name in variants}
        runs = compare({name: cpu_timed(fn, cpu[name]) for name, fn in variants.items()}, repeats=args.reps,
                       warmup=0, order="abba",
                       each=lambda name, r, s, b=beam, c=cpu: print(f"# beam {b}, {name}, round {r}: {s:.1f} s, "
                                                            f"{c[name][-1]:.1f} CPU s", flush=True))
        sub = [i for i, words in enumerate(terms) if words]
        base = statistics.median(cpu["without"])
        for name, timing in runs.items():
            hyps, spent = timing.result, statistics.median(cpu[name])
            met, total = held(hyps, targets)
            rows.append([beam, name, f"{len(src) / timing.median:.2f}", f"{spent:.1f}", f"{base / spent:.2f}x",
                         f"{corpus_bleu(hyps, ref).score:.2f}", f"{chrf(hyps, ref).score:.2f}",
                         f"{met} / {total} ({100 * met / max(total, 1):.1f} %)"])
            part = corpus_bleu([hyps[i] for i in sub], [ref[i] for i in sub]).score
            subset.append([beam, name, len(sub), f"{part:.2f}"])
    print(f"\n## {len(src)} test sentences, {len(sub)} with at least one constraint; batches of {args.batch_size}, "
          f"{args.threads} threads, median of {args.reps}\n")
    print(table(["beam", "decoding", "sentences/s", "CPU s", "speed by CPU s", "BLEU", "chrF",
                 "constraints held (target at a word start)"], rows))
    print(f"\nBLEU signature: {corpus_bleu(src[:1], ref[:1]).signature}\n")
    print(table(["beam", "decoding", "constrained sentences", "BLEU on them"], subset))

if __name__ == "__main__":
    main()
