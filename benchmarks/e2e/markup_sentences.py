"""Sentence splitting: aiayn's English-abbreviation rule (aiayn.decoding.sentences), sentencex, and aiayn.markup's
(sentencex less two kinds of cut), on the built-in Bible corpus and on hand-made lines with abbreviations.

    python -m benchmarks.e2e.markup_sentences [--lines 10000]

For English and Spanish (the corpus's two sides): characters per second (best of 3, one process), sentences found,
the lines aiayn's rule and aiayn.markup split differently (the first few printed), then each splitter's sentences
of a few lines whose right split is known (abbreviations of English, German, Spanish and French).
"""

from __future__ import annotations

import argparse
import lzma
import time

import sentencex

from aiayn.data.corpora import BUILTIN
from aiayn.decoding.sentences import split_sentences
from aiayn.markup.sentences import sentence_ranges

KNOWN = {
    "en": "Mr. Smith met Dr. Brown at 5 p.m. on Jan. 5. They spoke. The U.S. economy grew 3.5 pct. in Q2.",
    "de": "Das ist z.B. ein Test. Am 3. Mai kam er um 10 Uhr. Er sagte: „Gut.“ Dann ging er, d.h. er lief.",
    "es": "El Sr. García llegó. ¿Vino la Dra. López? Sí, vino a las 5 p. ej. tarde.",
    "fr": "M. Dupont est arrivé. Il a vu Mme Durand, etc. Puis il est parti.",
}


def splitters(lang: str):
    return {"aiayn rule": split_sentences, "sentencex": lambda line: list(sentencex.segment(lang, line)),
            "aiayn.markup": lambda line: [line[s:e] for s, e in sentence_ranges(line, lang)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=10000, help="corpus lines per language")
    args = parser.parse_args()
    with lzma.open(BUILTIN, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    for lang, column in (("en", 1), ("es", 2)):
        lines = [r[column] for r in rows if len(r) > column][: args.lines]
        chars = sum(map(len, lines))
        for name, split in splitters(lang).items():
            best = min(_timed(split, lines) for _ in range(3))
            found = sum(len(split(line)) for line in lines)
            print(f"{lang} {name}: {len(lines)} lines, {chars} chars -> {found} sentences, {best * 1000:.0f} ms, "
                  f"{chars / best / 1e6:.1f} M chars/s")
        rule, _, sx = splitters(lang).values()
        differ = [(line, [s.strip() for s in rule(line)], [s.strip() for s in sx(line)]) for line in lines]
        differ = [d for d in differ if d[1] != d[2]]
        print(f"{lang}: {len(differ)} of {len(lines)} lines split differently; the first three:")
        for _line, a, b in differ[:3]:
            print(f"  aiayn rule:   {a}\n  aiayn.markup: {b}")
    for lang, text in KNOWN.items():
        for name, split in splitters(lang).items():
            print(f"{lang} {name}: {[s.strip() for s in split(text)]}")


def _timed(split, lines) -> float:
    start = time.perf_counter()
    for line in lines:
        split(line)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
