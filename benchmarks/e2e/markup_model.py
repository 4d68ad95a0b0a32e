"""Markup through a trained model: test verses with inline tags translated as whole sentences (aiayn.markup, the
alignments of `aiayn translate --print-alignment`) beside each text node translated alone (what a text-node-at-a-time
HTML path does), and beside the same verses without tags.

    python -m benchmarks.e2e.markup_model --checkpoint runs/quickstart/run --data runs/quickstart/data [--n 300]

Each of the first --n test verses becomes a paragraph with one to three random inline elements (bold, italic, a link,
an image; seeded) around 1-3 words. The page is translated three ways, each by `aiayn translate` (beam 4) in one
call: whole sentences through aiayn.markup.html; every text node alone; and the verses without tags through
aiayn.markup (the same sentences, so the same translations are expected). The table gives sacreBLEU and chrF of
each way's text (tags stripped) against the references, and for the two tagged ways how many paragraphs came back
well-formed with every element there, and with each exactly once (an element across a sentence end comes back once
per sentence, by design). The issue's example goes through both tagged ways first.
"""

from __future__ import annotations

import argparse
import html
import random
import re
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from aiayn.markup.html import VOID, translate_html
from aiayn.metrics import chrf, corpus_bleu

EXAMPLE = ('<p>In the beginning was the Word, and the Word was with <b>God</b>. '
           'He came to <a href="x.html">his own</a> people.</p>')


class CliTranslator:
    """Sentences through `aiayn translate --print-alignment`, one process per call; counts the sentences."""

    def __init__(self, checkpoint: Path, alignments: bool = True):
        self.checkpoint, self.alignments, self.sentences = checkpoint, alignments, 0

    def __call__(self, sentences: list[str]):
        self.sentences += len(sentences)
        with tempfile.TemporaryDirectory() as tmp:
            src, out = Path(tmp) / "in.txt", Path(tmp) / "out.txt"
            src.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
            cmd = [sys.executable, "-m", "aiayn", "translate", "--checkpoint", str(self.checkpoint), "--input",
                   str(src), "--output", str(out), "--no-split-sentences", "--no-progress"]
            subprocess.run(cmd + (["--print-alignment"] if self.alignments else []), check=True)
            lines = out.read_text(encoding="utf-8").splitlines()
        result = []
        for line in lines:
            text, _, links = line.partition(" ||| ")
            pairs = [tuple(map(int, p.split("-"))) for p in links.split()] if self.alignments else None
            result.append((text, pairs))
        return result


def tagged(verse: str, rng: random.Random, number: int) -> str:
    """A verse as a paragraph with random inline elements around 1-3 words (and maybe an image)."""
    words = verse.split()
    starts = sorted(rng.sample(range(len(words)), min(len(words), rng.randint(1, 3))))
    out, k = [], 0
    for start in starts:
        if start < k:
            continue
        end = min(len(words), start + rng.randint(1, 3))
        out.extend(html.escape(w, quote=False) for w in words[k:start])
        tag = rng.choice(["b", "i", "a", "img"])
        inner = " ".join(html.escape(w, quote=False) for w in words[start:end])
        if tag == "img":
            out.append(f'<img src="p{number}.png" alt="">{inner}')
        elif tag == "a":
            out.append(f'<a href="#v{number}">{inner}</a>')
        else:
            out.append(f"<{tag}>{inner}</{tag}>")
        k = end
    out.extend(html.escape(w, quote=False) for w in words[k:])
    return "<p>" + " ".join(out) + "</p>"


def by_text_node(page: str, translate) -> str:
    """Every text node translated alone (no alignments needed: nothing to place)."""
    pieces = re.split(r"(<[^>]+>)", page)
    nodes = [k for k, p in enumerate(pieces) if not p.startswith("<") and p.strip()]
    done = translate([" ".join(html.unescape(pieces[k]).split()) for k in nodes])
    for k, (text, _) in zip(nodes, done):
        lead, trail = pieces[k][: len(pieces[k]) - len(pieces[k].lstrip())], pieces[k][len(pieces[k].rstrip()):]
        pieces[k] = lead + html.escape(text, quote=False) + trail
    return "".join(pieces)


class _Count(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.stack, self.bad = [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        self.bad |= not self.stack or self.stack.pop() != tag


def intact(source: str, out: str) -> tuple[bool, bool]:
    """(well-formed with every element of the source there, and each exactly once: an element across a sentence end
    comes back once per sentence)."""
    a, b = _Count(), _Count()
    a.feed(source)
    b.feed(out)
    ok = not b.bad and not b.stack and set(a.tags) == set(b.tags) and all(
        b.tags.count(t) >= a.tags.count(t) for t in set(a.tags))
    return ok, ok and sorted(a.tags) == sorted(b.tags)


_EMPTY = re.compile(r"<(b|i|a)\b[^>]*></\1>")  # an element that came back around no word


def text_of(paragraph: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", paragraph)).split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="the run (or checkpoint) to translate with")
    parser.add_argument("--data", type=Path, required=True, help="its prepared data (test.src.txt, test.tgt.txt)")
    parser.add_argument("--n", type=int, default=300, help="test verses")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random elements")
    args = parser.parse_args()
    aligned, plain = CliTranslator(args.checkpoint), CliTranslator(args.checkpoint, alignments=False)
    print("The issue's example:\n  source:       ", EXAMPLE)
    print("  whole (markup):", translate_html(EXAMPLE, aligned, "en", "es"))
    print("  by text node:  ", by_text_node(EXAMPLE, plain))
    verses = (args.data / "test.src.txt").read_text(encoding="utf-8").splitlines()[: args.n]
    refs = (args.data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()[: args.n]
    rng = random.Random(args.seed)
    paragraphs = [tagged(v, rng, k) for k, v in enumerate(verses)]
    page = "\n".join(paragraphs)
    ways = {"whole sentences, tags carried (aiayn.markup)": translate_html(page, aligned, "en", "es"),
            "every text node alone": by_text_node(page, plain),
            "the verses without tags (aiayn.markup)": translate_html(
                "\n".join(f"<p>{html.escape(v, quote=False)}</p>" for v in verses), aligned, "en", "es")}
    print(f"\n{len(verses)} test verses, {sum(p.count('<') - 2 for p in paragraphs)} inline tags, seed {args.seed}")
    print("| way | BLEU | chrF | paragraphs well-formed, every element there | and each once |")
    print("|---|---|---|---|---|")
    texts = {}
    for name, out in ways.items():
        got = out.split("\n")
        texts[name] = [text_of(p) for p in got]
        checks = [intact(s, o) for s, o in zip(paragraphs, got)] if "without" not in name else []
        cells = [f"{sum(c[k] for c in checks)} / {len(got)}" if checks else "" for k in (0, 1)]
        print(f"| {name} | {corpus_bleu(texts[name], refs).score:.2f} | {chrf(texts[name], refs).score:.2f} | "
              f"{cells[0]} | {cells[1]} |")
    got = ways[next(iter(ways))].split("\n")
    empty = sum(bool(_EMPTY.search(p)) for p in got)
    print(f"\nparagraphs with an element around no word (whole sentences): {empty} / {len(got)}")
    same = sum(a == b for a, b in zip(*(texts[n] for n in ways if "text node" not in n)))
    print(f"\nverses whose tagged translation's text equals the untagged one's: {same} / {len(verses)}")
    print("\nthe first five tagged verses, whole sentences:")
    for source, out in list(zip(paragraphs, ways[next(iter(ways))].split("\n")))[:5]:
        print(f"  {source}\n  {out}")


if __name__ == "__main__":
    main()
