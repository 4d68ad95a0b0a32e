"""Language detection of `aiayn serve` (aiayn.serve.detect: lingua among the served sources) beside LibreTranslate
1.9.6's own detector code (libretranslate.detect.Detector: lexilang under 20 characters, else langdetect, filtered to
the languages it serves), on the same sentences and the same candidate languages: accuracy and ms a sentence.

    python -m benchmarks.e2e.detect_languages --data /work/shared/data --ltvenv /tmp/ltvenv \
        --out benchmarks/results/detect-xeon

Sentences: the held-out sets of /work/shared/data (Multi30k test_2016_flickr en/de/fr; IWSLT16 TED.tst2010 en/de;
1,000 Bible verses a language, a fixed pseudo-random sample of the en-es and en-de verse-aligned files), each whole
and cut to its first three words ("short"); candidates en, de, es, fr (a server reading those four). LibreTranslate's
side runs in its own virtual environment (--ltvenv), timed there the same way (time.perf_counter around each call,
one thread); the first call of each side (models loading) is not timed.
"""

import argparse
import json
import os
import random
import subprocess
import tempfile
import time
from pathlib import Path

CANDIDATES = ["de", "en", "es", "fr"]
SETS = [  # (name, file under --data, language, how many lines: all, or a fixed sample)
    ("multi30k test2016", "multi30k/test_2016_flickr.en", "en", None),
    ("multi30k test2016", "multi30k/test_2016_flickr.de", "de", None),
    ("multi30k test2016", "multi30k/test_2016_flickr.fr", "fr", None),
    ("iwslt16 tst2010", "iwslt16-de-en/TED.tst2010.en", "en", None),
    ("iwslt16 tst2010", "iwslt16-de-en/TED.tst2010.de", "de", None),
    ("bible (1,000 verses)", "bible-en-es/web-rv1909.en", "en", 1000),
    ("bible (1,000 verses)", "bible-en-es/web-rv1909.es", "es", 1000),
    ("bible (1,000 verses)", "bible-en-de/web-elb1905.de", "de", 1000),
]

# What runs in LibreTranslate's environment: its Detector on each line of a file, the answer and the time of each.
LT_PROGRAM = """
import json, sys, time
from libretranslate.detect import Detector
detector = Detector(tuple(sys.argv[2].split(",")))
lines = open(sys.argv[1], encoding="utf-8").read().split("\\n")
detector.detect(lines[0])  # warm: models load
out = []
for line in lines:
    t = time.perf_counter()
    found = detector.detect(line)
    out.append([found[0].code, found[0].confidence, time.perf_counter() - t])
json.dump(out, sys.stdout)
"""


def sentences(data: Path) -> list[tuple[str, str, str, str]]:
    """(set, language, length kind, text) for every sentence of SETS, whole and short."""
    out = []
    for name, path, lang, sample in SETS:
        lines = [line.strip() for line in (data / path).read_text(encoding="utf-8").splitlines() if line.strip()]
        if sample:
            lines = [lines[i] for i in sorted(random.Random(0).sample(range(len(lines)), sample))]
        out += [(name, lang, "whole", line) for line in lines]
        out += [(name, lang, "short", " ".join(line.split()[:3])) for line in lines]
    return out


def aiayn_side(texts: list[str]) -> list[tuple[str, float, float]]:
    from aiayn.serve.detect import Detector

    detector = Detector(CANDIDATES)
    detector.best(texts[0])
    out = []
    for text in texts:
        t = time.perf_counter()
        found = detector.best(text)
        out.append((found["language"], found["confidence"], time.perf_counter() - t))
    return out


def libretranslate_side(texts: list[str], ltvenv: Path) -> list[tuple[str, float, float]]:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as f:
        f.write("\n".join(texts))
    try:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run([str(ltvenv / "bin" / "python"), "-c", LT_PROGRAM, f.name, ",".join(CANDIDATES)],
                              capture_output=True, text=True, check=True, env=env)
    finally:
        os.unlink(f.name)
    return [tuple(row) for row in json.loads(done.stdout)]


def table(rows, answers: dict[str, list]) -> list[str]:
    """One line per (set, language, length) and detector, then the totals."""
    groups: dict[tuple, list[int]] = {}
    for i, (name, lang, kind, _) in enumerate(rows):
        groups.setdefault((name, lang, kind), []).append(i)
    for kind in ("whole", "short"):
        groups[("all", "*", kind)] = [i for i, row in enumerate(rows) if row[2] == kind]
    lines = [f"candidates: {', '.join(CANDIDATES)}",
             "| set | language | text | sentences | " + " | ".join(f"{d} accuracy | {d} ms/sentence | {d} conf 0"
                                                                 for d in answers) + " |",
             "|---|---|---|---:|" + "---:|---:|---:|" * len(answers)]
    for (name, lang, kind), members in groups.items():
        cells = []
        for found in answers.values():
            right = sum(found[i][0] == rows[i][1] for i in members)
            ms = 1000 * sum(found[i][2] for i in members) / len(members)
            zero = sum(found[i][1] == 0 for i in members)
            cells += [f"{100 * right / len(members):.2f} %", f"{ms:.3f}", str(zero)]
        lines.append(f"| {name} | {lang} | {kind} | {len(members)} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--ltvenv", type=Path, default=Path("/tmp/ltvenv"), help="LibreTranslate 1.9.6's venv")
    ap.add_argument("--out", type=Path, help="folder for the table (table.md) and every sentence either detector got "
                                             "wrong, with both answers (misses.jsonl)")
    args = ap.parse_args()
    rows = sentences(args.data)
    texts = [row[3] for row in rows]
    answers = {"aiayn (lingua)": aiayn_side(texts), "LibreTranslate 1.9.6": libretranslate_side(texts, args.ltvenv)}
    lines = table(rows, answers)
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        with open(args.out / "misses.jsonl", "w", encoding="utf-8") as f:
            for i, row in enumerate(rows):
                if all(found[i][0] == row[1] for found in answers.values()):
                    continue
                f.write(json.dumps({"set": row[0], "language": row[1], "text_kind": row[2], "text": row[3],
                                    **{d: found[i][:2] for d, found in answers.items()}}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
