"""Tag placement through word alignments, against manually word-aligned sentences.

    python -m benchmarks.e2e.markup_tags --gold DIR|FILE.jsonl [--checkpoint RUN] [--aligner RUN] [--seed 0]

--gold: a folder with test.de, test.en and de-en.ref.wa (sentence, German word, English word, S or P; Ergun Biçici's
100 Europarl sentences, github.com/bicici/SMTData, German-English_WordAlignment.zip), or a JSON-lines file of
{"src_words", "tgt_words", "alignment": [[i, j], ...]} (every link sure; e.g. INESC-ID's English-Spanish golden
collection as loganbrenningmeyer/multi-binaryalign keeps it); read, never copied here. Each source sentence gets up
to --per-sentence random inline elements (1 to 3 words, apart, seeded) and the reference stands for its translation.
The right place of an element is the reference words from the first to the last sure-linked to its words (elements
with no sure link are counted apart); aiayn.markup.spans.carry places it through each alignment below, and the
table gives the share placed exactly, the word-level F1 of the placed words, and the alignment error rate (AER,
Och and Ney 2003) of that alignment:

- gold: every sure link (what placement gives with a perfect many-to-many alignment: the cost of the rules alone);
- gold, one link per target word: the engines' form (Translation.alignment, fast_align's), each target word kept
  to its first sure link (else its first possible one);
- diagonal: what a translation without alignment gets (the monotone fallback);
- with --checkpoint (a model of the gold's direction): aiayn's cross-attention alignment (the top decoder layer,
  aiayn.decoding.attention.align, what `translate_nbest(alignments=True)` gives without a lexical aligner),
  teacher-forced on the reference;
- with --aligner (a run of the gold's direction with RUN/aligner.safetensors, `aiayn shortlist --aligner`): the run's
  lexical aligner (aiayn.decoding.aligner, what the engines give where the run has the file). More alignment sources
  side by side, AER included: benchmarks/e2e/alignment_quality.py.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from aiayn.markup.spans import Span, carry, words


def read_gold(path: Path) -> list[tuple[str, str, set, set]]:
    """(source, reference, sure links, possible links (sure included)) per sentence."""
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return [(" ".join(r["src_words"]), " ".join(r["tgt_words"]), {tuple(p) for p in r["alignment"]},
                 {tuple(p) for p in r["alignment"]}) for r in rows]
    folder = path
    de = (folder / "test.de").read_text(encoding="utf-8-sig").splitlines()
    en = (folder / "test.en").read_text(encoding="utf-8-sig").splitlines()
    sure: dict[int, set] = {}
    possible: dict[int, set] = {}
    for line in (folder / "de-en.ref.wa").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        k, i, j = int(parts[0]) - 1, int(parts[1]), int(parts[2])
        possible.setdefault(k, set()).add((i, j))
        if parts[3] == "S":
            sure.setdefault(k, set()).add((i, j))
    return [(d, e, sure.get(k, set()), possible.get(k, set())) for k, (d, e) in enumerate(zip(de, en))]


def one_per_target(sure: set, possible: set) -> list[tuple[int, int]]:
    """Each target word's first sure link, else its first possible one."""
    out = {}
    for i, j in sorted(possible - sure) + sorted(sure):
        if j not in out or (i, j) in sure and out[j] not in sure:
            out[j] = (i, j)
    return sorted(out.values(), key=lambda link: link[1])


def diagonal(n_source: int, n_target: int) -> list[tuple[int, int]]:
    return [(min(n_source - 1, j * n_source // max(n_target, 1)), j) for j in range(n_target)]


def aer(links: set, sure: set, possible: set) -> tuple[int, int, int, int]:
    """The counts AER needs: |A & S|, |A & P|, |A|, |S|."""
    return len(links & sure), len(links & possible), len(links), len(sure)


def random_spans(rng: random.Random, n_words: int, src: list, per_sentence: int) -> list[tuple[int, int]]:
    """Up to per_sentence word ranges [a, b] of 1 to 3 words, apart."""
    out, taken = [], set()
    for _ in range(per_sentence * 3):
        if len(out) == per_sentence:
            break
        a = rng.randrange(n_words)
        b = min(n_words - 1, a + rng.randint(0, 2))
        if not taken & set(range(a - 1, b + 2)):
            out.append((a, b))
            taken.update(range(a, b + 1))
    return sorted(out)


def placed_words(text: str, span: Span) -> set[int]:
    return {k for k, (s, e) in enumerate(words(text)) if s < span.end and span.start < e}


def measure(gold, alignment_of, per_sentence: int, seed: int) -> dict:
    rng = random.Random(seed)
    exact = total = unaligned = 0
    f1_sum = 0.0
    counts = [0, 0, 0, 0]
    for de, en, sure, possible in gold:
        src, n_target = words(de), len(en.split())
        links = alignment_of(sure, possible, len(src), n_target, pair=(de, en))
        for k, c in enumerate(aer(set(links), sure, possible)):
            counts[k] += c
        ranges = random_spans(rng, len(src), src, per_sentence)
        spans = [Span(src[a][0], src[b][1], "wrap", n) for n, (a, b) in enumerate(ranges)]
        text, moved = carry(de, spans, en, links)
        by_key = {s.key: s for s in moved}
        for n, (a, b) in enumerate(ranges):
            targets = sorted(j for i, j in sure if a <= i <= b)
            if not targets:
                unaligned += 1
                continue
            want = set(range(targets[0], targets[-1] + 1))
            got = placed_words(text, by_key[n])
            total += 1
            exact += got == want
            hit = len(got & want)
            f1_sum += 2 * hit / (len(got) + len(want)) if got or want else 1.0
    a_s, a_p, a, s = counts
    return {"elements": total, "no sure link": unaligned, "exact": exact / total, "word F1": f1_sum / total,
            "AER": 1 - (a_s + a_p) / (a + s)}


def lexical_alignments(run: Path, gold) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """The run's lexical aligner's word links of each (source, reference), each word encoded on its own."""
    from aiayn.data.vocab import Vocab
    from aiayn.decoding import aligner

    vocab, model = Vocab.load(run / "vocab.model"), aligner.load(run / aligner.FILE)
    encode = lambda text: [i for word in text.split() for i in (vocab.encode(word) or [1])]  # noqa: E731
    return {(src, ref): model.links(encode(src), encode(ref), vocab) for src, ref, *_ in gold}


def model_alignments(checkpoint: Path, gold) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """aiayn's cross-attention word links of each (source, reference), teacher-forced; pairs whose pieces do not
    make the gold's words are left out (and counted)."""
    from aiayn.decoding.attention import align
    from aiayn.decoding.engine import EngineOptions, open_engine

    engine = open_engine(checkpoint, EngineOptions(alignments=True))
    sources = engine.encode([src for src, *_ in gold])
    targets = [engine.vocab.encode(ref) for _, ref, *_ in gold]
    links = align(engine.model, engine.vocab, sources, targets)
    return {(src, ref): pairs for (src, ref, *_), pairs in zip(gold, links)}


VARIANTS = {
    "gold (every sure link)": lambda sure, possible, n, m, pair=None: sorted(sure),
    "gold, one link per target word": lambda sure, possible, n, m, pair=None: one_per_target(sure, possible),
    "diagonal (no alignment)": lambda sure, possible, n, m, pair=None: diagonal(n, m),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gold", type=Path, required=True,
                        help="folder with test.de, test.en, de-en.ref.wa; or a .jsonl of src_words/tgt_words/alignment")
    parser.add_argument("--checkpoint", type=Path, help="also place through this model's alignments (same direction)")
    parser.add_argument("--aligner", type=Path, help="also place through this run's lexical aligner (same direction)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random elements")
    parser.add_argument("--per-sentence", type=int, default=3, help="elements per sentence (at most)")
    args = parser.parse_args()
    gold = read_gold(args.gold)
    print(f"{len(gold)} sentence pairs, {sum(len(s) for *_, s, _ in gold)} sure links, "
          f"{sum(len(p) for *_, p in gold)} sure or possible; seed {args.seed}, {args.per_sentence} per sentence")
    print("| alignment | elements placed | exact | word F1 | AER |")
    print("|---|---|---|---|---|")
    variants = dict(VARIANTS)
    if args.checkpoint:
        by_pair = model_alignments(args.checkpoint, gold)
        variants["aiayn cross-attention, top layer (teacher-forced)"] = lambda sure, possible, n, m, pair=None: \
            by_pair[pair]
    if args.aligner:
        lexical = lexical_alignments(args.aligner, gold)
        variants["the run's lexical aligner (teacher-forced)"] = lambda sure, possible, n, m, pair=None: lexical[pair]
    for name, alignment_of in variants.items():
        r = measure(gold, alignment_of, args.per_sentence, args.seed)
        print(f"| {name} | {r['elements']} (+{r['no sure link']} with no sure link) | {r['exact']:.1%} | "
              f"{r['word F1']:.3f} | {r['AER']:.3f} |")


if __name__ == "__main__":
    main()
