"""Documents through a trained model: test verses as Word, PowerPoint, OpenDocument and subtitle files, formatted as
people format them, translated by aiayn.documents beside the same verses translated as plain lines.

    python -m benchmarks.e2e.documents_model --checkpoint runs/quickstart/run --data runs/quickstart/data [--n 300]

Each of the first --n test verses becomes a paragraph (a .docx and an .odt: one paragraph a verse; a .pptx: ten verses
a slide) with one or two words bold or italic and one word split into two runs of the same formatting (as a spelling
mark or an edit leaves it), or two subtitle cues (an .srt: each verse cut in the middle, so every sentence runs across
two cues). One engine (aiayn's, beam 4, word alignments from its cross-attention) translates every file through
translate_document, and the verses without formatting as blocks of plain text (the same sentences, cut by the same
rules: the plain translation). The table gives, per format, sacreBLEU and chrF of the document's text against the
plain translations and against the references, and how many paragraphs came back with each formatted element exactly
once (an element left around no word, or cut at a sentence end, is not; a cue pair: both cues with text).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import zipfile
from pathlib import Path

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.documents import open_document, translate_document
from aiayn.documents.blocks import translate_all
from aiayn.documents.srt import parse_srt
from aiayn.markup.engines import translate_fn
from aiayn.markup.spans import Block
from aiayn.metrics import chrf, corpus_bleu


def formatted(verse: str, rng: random.Random) -> list[tuple[str, str | None]]:
    """A verse as runs (text, "b" / "i" / None): one or two words bold or italic (with the space between them), and
    one other word of four letters or more split into two plain runs."""
    words = verse.split()
    start = rng.randrange(len(words))
    end = min(len(words), start + rng.randint(1, 2))
    style = rng.choice("bi")
    others = [k for k in range(len(words)) if not start <= k < end and len(words[k]) > 3]
    split = rng.choice(others) if others else None
    runs: list[tuple[str, str | None]] = []
    for k, word in enumerate(words):
        if k:
            runs.append((" ", style if start < k < end else None))
        if start <= k < end:
            runs.append((word, style))
        elif k == split:
            runs.extend([(word[:2], None), (word[2:], "split")])
        else:
            runs.append((word, None))
    merged: list[tuple[str, str | None]] = []
    for text, kind in runs:  # adjacent runs of one formatting are one run, but for the split word's second half
        if merged and merged[-1][1] == kind and kind != "split":
            merged[-1] = (merged[-1][0] + text, kind)
        else:
            merged.append((text, kind))
    return [(text, None if kind == "split" else kind) for text, kind in merged]


def make_docx(path: Path, verses: list[list[tuple[str, str | None]]]) -> None:
    import docx

    d = docx.Document()
    for runs in verses:
        p = d.add_paragraph()
        for text, style in runs:
            r = p.add_run(text)
            r.bold, r.italic = style == "b" or None, style == "i" or None
    d.save(path)


def make_pptx(path: Path, verses: list[list[tuple[str, str | None]]]) -> None:
    import pptx
    from pptx.util import Inches

    prs = pptx.Presentation()
    for first in range(0, len(verses), 10):
        frame = prs.slides.add_slide(prs.slide_layouts[6]).shapes.add_textbox(
            Inches(0.5), Inches(0.5), Inches(9), Inches(6)).text_frame
        for n, runs in enumerate(verses[first:first + 10]):
            p = frame.paragraphs[0] if n == 0 else frame.add_paragraph()
            for text, style in runs:
                r = p.add_run()
                r.text = text
                r.font.bold, r.font.italic = style == "b" or None, style == "i" or None
    prs.save(path)


def make_odt(path: Path, verses: list[list[tuple[str, str | None]]]) -> None:
    from xml.sax.saxutils import escape

    ns = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:style="urn:oasis:names:tc:'
          'opendocument:xmlns:style:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" xmlns:fo="urn:'
          'oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" office:version="1.3"')
    styles = ('<office:automatic-styles><style:style style:name="b" style:family="text"><style:text-properties '
              'fo:font-weight="bold"/></style:style><style:style style:name="i" style:family="text">'
              '<style:text-properties fo:font-style="italic"/></style:style></office:automatic-styles>')
    paragraphs = "".join("<text:p>" + "".join(
        f'<text:span text:style-name="{s}">{escape(t)}</text:span>' if s else escape(t).replace("  ", " <text:s/>")
        for t, s in runs) + "</text:p>" for runs in verses)
    content = (f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ns}>{styles}<office:body>'
               f"<office:text>{paragraphs}</office:text></office:body></office:document-content>")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.text",
                   compress_type=zipfile.ZIP_STORED)
        z.writestr("content.xml", content)
        z.writestr("META-INF/manifest.xml", '<?xml version="1.0" encoding="UTF-8"?><manifest:manifest xmlns:manifest='
                   '"urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3"><manifest:file-entry '
                   'manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.text"/>'
                   '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
                   "</manifest:manifest>")


def make_srt(path: Path, verses: list[str]) -> None:
    cues = []
    for n, verse in enumerate(verses):
        words = verse.split()
        half = max(1, len(words) // 2)
        for k, part in enumerate((words[:half], words[half:] or ["..."])):
            t = 4 * n + 2 * k
            cues.append(f"{len(cues) + 1}\n{_stamp(t)} --> {_stamp(t + 2)}\n{' '.join(part)}\n")
    path.write_text("\n".join(cues), encoding="utf-8")


def _stamp(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d},000"


def texts_and_intact(fmt: str, source: Path, out: Path) -> tuple[list[str], tuple[int, int, int]]:
    """The translated verses' texts, and how many came back with each formatted element once, how many with one
    left around no word (the alignment gave it none), and how many with one cut at a sentence end (srt: both cues
    with text; neither, none)."""
    if fmt == ".srt":
        cues = parse_srt(out.read_text(encoding="utf-8"), out)
        pairs = [(cues[k], cues[k + 1]) for k in range(0, len(cues), 2)]
        return [" ".join(a.lines + b.lines) for a, b in pairs], (sum(bool(a.lines and b.lines) for a, b in pairs), 0, 0)
    before, after = open_document(source).blocks, open_document(out).blocks
    counts = [0, 0, 0]
    for a, b in zip(before, after):
        want, got = _elements(a), _elements(b)
        counts[0 if want == got else 1 if len(got) < len(want) else 2] += 1
    return [" ".join(b.text.split()) for b in after], tuple(counts)


def _elements(block) -> list[str]:
    return sorted(repr(s.key) for s in block.spans if s.kind == "wrap" and s.end > s.start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="prepared data: test.src.txt, test.tgt.txt")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    verses = (args.data / "test.src.txt").read_text(encoding="utf-8").splitlines()[: args.n]
    refs = (args.data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()[: args.n]
    engine = open_engine(args.checkpoint, EngineOptions(alignments=True))
    t = time.perf_counter()
    plain = [b.text for b in translate_all([Block(v) for v in verses], translate_fn(engine), "en")]
    plain_seconds = time.perf_counter() - t
    print(f"plain: {len(verses)} verses in {plain_seconds:.1f} s", flush=True)
    rng = random.Random(args.seed)
    runs = [formatted(v, rng) for v in verses]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, make in ((".docx", make_docx), (".pptx", make_pptx), (".odt", make_odt), (".srt", make_srt)):
            src, out = Path(tmp) / f"in{fmt}", Path(tmp) / f"out{fmt}"
            make(src, verses if fmt == ".srt" else runs)
            t = time.perf_counter()
            translate_document(src, out, translate_fn(engine), "en", "es")
            seconds = time.perf_counter() - t
            texts, intact = texts_and_intact(fmt, src, out)
            rows.append((fmt, corpus_bleu(texts, plain).score, chrf(texts, plain).score, corpus_bleu(texts, refs).score,
                         chrf(texts, refs).score, intact, len(texts), seconds))
            print(f"{fmt} done in {seconds:.1f} s", flush=True)
    print("\n| format | BLEU / chrF vs plain | BLEU / chrF vs references | elements once / left around no word / cut "
          "at a sentence end | seconds |")
    print("|---|---|---|---|---|")
    print(f"| plain text | 100 / 100 | {corpus_bleu(plain, refs).score:.2f} / {chrf(plain, refs).score:.2f} | | "
          f"{plain_seconds:.1f} |")
    for fmt, bp, cp, br, cr, intact, n, seconds in rows:
        print(f"| {fmt} | {bp:.2f} / {cp:.2f} | {br:.2f} / {cr:.2f} | {' / '.join(map(str, intact))} of {n} | "
              f"{seconds:.1f} |")


if __name__ == "__main__":
    main()
