"""Glossary terms and kept spans on a real test set: the plain search, terms placed by alignment, and the lexically
constrained search (dynamic beam allocation), side by side; then numbers and symbols carried through.

    python -m benchmarks.e2e.glossary --checkpoint RUN --candidates names.tsv [--data DIR] [--out DIR]

Glossary part: --candidates (`source<TAB>target`) are checked against the test references (kept where the target
term is in the reference of at least --min-rate of the test sentences whose source holds the source term), so the
BLEU shows what correct terms are worth. The test split is translated three ways, beam 4 (the run's search): plain;
`placed` (aiayn.markup.lines: the plain translation with each term put in place of the target words aligned to the
source term); `constrained` (aiayn.decoding.glossary's search: the plain search, then dynamic beam allocation for the
sentences whose translation misses a term). Per way: sacreBLEU BLEU and chrF, the words of the whole output against
the plain one, per sentence with terms the words added per term (the most and how many sentences add more than 3),
sentences that gained a sentence end (text invented after the translation), terms held, CPU seconds.

Numbers part: the first --n-numbers test verses, each with one of ITEMS (a price, a year, a number, a URL, an e-mail
address, a time, a percentage, a symbol, an emoji) put before its final punctuation, in source and reference alike;
translated plain and with spans carried (aiayn.markup.lines.carry_nbests): how many items come back exactly, and chrF
on those lines. Raw output (every translation) goes to --out.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.glossary import Glossary
from aiayn.markup.lines import carry_nbests, term_spans, term_translations
from aiayn.metrics import chrf, corpus_bleu

ITEMS = ["15 €", "2020", "12345", "$20", "3.5%", "10:30", "https://example.org/a", "info@example.org", "©", "😀",
         "1999-2001", "42"]
_END = re.compile(r"[.!?;:,]*$")


def checked(candidates: Glossary, src: list[str], ref: list[str], min_rate: float) -> Glossary:
    """The candidates whose target term is in the reference of at least min_rate of the sentences holding the
    source term."""
    kept = []
    for source, target in candidates.entries:
        one, other = Glossary(((source, target),)), Glossary(((target, target),))
        hits = [bool(other.terms_in(r)) for s, r in zip(src, ref) if one.terms_in(s)]
        if hits and sum(hits) / len(hits) >= min_rate:
            kept.append((source, target))
    return Glossary(tuple(kept))


def sentence_ends(text: str) -> int:
    return len(re.findall(r"[.!?](\s|$)", text))


def glossary_rows(engine, glossary: Glossary, src: list[str], ref: list[str], out: Path) -> list[dict]:
    """One row per way (plain, placed, constrained)."""
    terms = [[s.text for s in term_spans(line, glossary)] for line in src]
    ways = {}
    start = time.process_time()
    plain = engine.translate_nbest(src, alignments=True)
    ways["plain"] = ([h[0].text for h in plain], time.process_time() - start)
    placed = carry_nbests(src, plain, glossary, lexicon=term_translations(engine, src, glossary))
    ways["placed"] = ([h[0].text for h in placed], time.process_time() - start)
    placed = carry_nbests(src, plain, glossary)
    ways["placed_by_alignment_alone"] = ([h[0].text for h in placed], time.process_time() - start)
    start = time.process_time()
    ways["constrained"] = ([h[0].text for h in engine.translate_nbest(src, glossary=glossary)],
                           time.process_time() - start)
    base = ways["plain"][0]
    rows = []
    for name, (texts, seconds) in ways.items():
        (out / f"glossary-{name}.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
        extra = [(len(t.split()) - len(b.split())) / len(ts) for t, b, ts in zip(texts, base, terms) if ts]
        held = sum(bool(re.search(rf"(?<!\w){re.escape(w)}(?!\w)", t)) for t, ts in zip(texts, terms) for w in ts)
        rows.append({"way": name, "cpu_s": round(seconds, 1), "bleu": round(corpus_bleu(texts, ref).score, 2),
                     "chrf": round(chrf(texts, ref).score, 2), "words": sum(len(t.split()) for t in texts),
                     "words_plain": sum(len(t.split()) for t in base), "max_extra_words_per_term": max(extra),
                     "sentences_over_3_extra_per_term": sum(e > 3 for e in extra),
                     "gained_a_sentence_end": sum(sentence_ends(t) > sentence_ends(b) for t, b in zip(texts, base)),
                     "terms_held": held, "terms": sum(map(len, terms)), "sentences_with_terms": len(extra)})
    return rows


def with_item(line: str, item: str) -> str:
    """The line with the item before its final punctuation."""
    end = _END.search(line).start()
    return f"{line[:end]} {item}{line[end:]}"


def numbers_rows(engine, src: list[str], ref: list[str], n: int, out: Path) -> list[dict]:
    items = [ITEMS[i % len(ITEMS)] for i in range(min(n, len(src)))]
    lines = [with_item(s, it) for s, it in zip(src, items)]
    refs = [with_item(r, it) for r, it in zip(ref, items)]
    plain = engine.translate_nbest(lines, alignments=True)
    ways = {"plain": [h[0].text for h in plain], "carried": [h[0].text for h in carry_nbests(lines, plain)]}
    rows = []
    for name, texts in ways.items():
        (out / f"numbers-{name}.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
        exact = [it in t for it, t in zip(items, texts)]
        per_kind = {it: sum(e for e, i in zip(exact, items) if i == it) for it in ITEMS}
        rows.append({"way": name, "lines": len(lines), "exact": sum(exact), "chrf": round(chrf(texts, refs).score, 2),
                     "bleu": round(corpus_bleu(texts, refs).score, 2), "exact_per_item": per_kind})
    (out / "numbers-source.txt").write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--candidates", required=True)
    p.add_argument("--data", help="prepared data folder (default: the run's recorded one)")
    p.add_argument("--min-rate", type=float, default=0.8)
    p.add_argument("--n-numbers", type=int, default=300)
    p.add_argument("--out", default="glossary-out")
    args = p.parse_args()
    data = Path(args.data or json.loads((Path(args.checkpoint) / "config.json").read_text())["data"])
    src = (data / "test.src.txt").read_text(encoding="utf-8").splitlines()
    ref = (data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = open_engine(args.checkpoint, EngineOptions(alignments=True))
    glossary = checked(Glossary.read(args.candidates), src, ref, args.min_rate)
    print(json.dumps({"glossary_entries": len(glossary.entries)}))
    for row in glossary_rows(engine, glossary, src, ref, out):
        print(json.dumps(row, ensure_ascii=False), flush=True)
    for row in numbers_rows(engine, src, ref, args.n_numbers, out):
        print(json.dumps(row, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
