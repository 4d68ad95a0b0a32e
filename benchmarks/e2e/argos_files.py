"""Formatted documents through aiayn and through argos-translate-files (what LibreTranslate's /translate_file runs),
on the same model: BLEU and chrF of each document's text against each engine's own plain translation of the same
verses, and against the references.

    python -m benchmarks.e2e.argos_files --checkpoint RUN --data DATA --argos-python VENV/bin/python [--n 300]

The first --n test verses become a .docx, a .pptx and an .odt (a paragraph a verse, one or two words bold or
italic, one word split into two runs, as benchmarks.e2e.documents_model makes them), an .html (the same runs as
<b>/<i>, a <p> a verse) and an .srt (each verse cut over two cues). aiayn translates them with
aiayn.documents.translate_document through the run (aiayn's engine, the run's search with beam 4, word alignments:
the run's lexical aligner where it has one), as `aiayn translate --input` and `aiayn serve`'s /translate_file do;
its plain translation is the verses without formatting through the same path. argos-translate-files (its PyPI
package, in the Python given by --argos-python, where it and spaCy are installed; argostranslate's home, data,
cache and packages in a temporary folder) translates the same files with the run exported as an Argos package
(`aiayn export --to argos`), driven as LibreTranslate drives it (`translate_file(translation, path)`), sentences
split by the package's spaCy pipeline (ARGOS_CHUNK_TYPE=SPACY: the offline splitter; the default MiniSBD downloads a
model); its plain translation is `translation.translate(verse)`. The translated files are read back with
aiayn.documents' readers (the text of each verse's paragraph or cue pair).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import random
import subprocess
import tempfile
import time
from pathlib import Path

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import SearchConfig
from aiayn.documents import translate_document
from aiayn.documents.blocks import translate_all
from aiayn.export.argos import export_argos
from aiayn.markup.engines import translate_fn
from aiayn.markup.spans import Block
from aiayn.metrics import chrf, corpus_bleu
from aiayn.rundir import inference_checkpoint, load_for_inference
from benchmarks.e2e.documents_model import formatted, make_docx, make_odt, make_pptx, make_srt, texts_and_intact

ARGOS = """
import json, sys, time
import argostranslate.package, argostranslate.translate
from argostranslatefiles import argostranslatefiles
argostranslate.package.install_from_path(sys.argv[1])
source, target = sys.argv[2:4]
job = json.loads(sys.stdin.read())
translation = argostranslate.translate.get_translation_from_codes(source, target)
start = time.process_time()
plain = [translation.translate(v) for v in job["verses"]]
out = {"plain": plain, "plain_cpu_s": time.process_time() - start, "files": {}}
for path in job["files"]:
    start = time.process_time()
    done = argostranslatefiles.translate_file(translation, path)
    out["files"][path] = [done, time.process_time() - start]
print(json.dumps(out))
"""


def make_html(path: Path, verses: list[list[tuple[str, str | None]]]) -> None:
    body = "".join("<p>" + "".join(f"<{s}>{html.escape(t)}</{s}>" if s else html.escape(t) for t, s in runs) + "</p>"
                   for runs in verses)  # no text outside the verses: a block a verse
    path.write_text(f'<html lang="en"><head><meta charset="utf-8"></head><body>{body}</body></html>', encoding="utf-8")


MAKERS = {".docx": make_docx, ".pptx": make_pptx, ".odt": make_odt, ".html": make_html, ".srt": make_srt}


def argos_side(python: str, package: Path, verses: list[str], files: list[Path], home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGOS_", "XDG_", "PYTHON"))}
    env |= {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_CACHE_HOME": str(home / "cache"), "ARGOS_PACKAGES_DIR": str(home / "packages"),
            "ARGOS_CHUNK_TYPE": "SPACY", "ARGOS_COMPUTE_TYPE": "default", "ARGOS_INTRA_THREADS": "1",
            "OMP_NUM_THREADS": "1"}
    home.mkdir(parents=True)
    done = subprocess.run([python, "-c", ARGOS, str(package), "en", "es"], env=env, cwd=home, capture_output=True,
                          text=True, timeout=7200,
                          input=json.dumps({"verses": verses, "files": [str(f) for f in files]}))
    if done.returncode != 0:
        raise SystemExit(f"argos-translate-files failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(name: str, fmt: str, texts: list[str], plain: list[str], refs: list[str], intact, seconds: float) -> dict:
    return {"engine": name, "format": fmt, "bleu_vs_plain": round(corpus_bleu(texts, plain).score, 2),
            "chrf_vs_plain": round(chrf(texts, plain).score, 2), "bleu": round(corpus_bleu(texts, refs).score, 2),
            "chrf": round(chrf(texts, refs).score, 2), "elements_once_lost_cut": list(intact), "verses": len(texts),
            "cpu_s": round(seconds, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--argos-python", required=True, help="a Python with argos-translate-files and spacy installed")
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("argos-files-out"))
    args = p.parse_args()
    verses = (args.data / "test.src.txt").read_text(encoding="utf-8").splitlines()[: args.n]
    refs = (args.data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()[: args.n]
    rng = random.Random(args.seed)
    runs = [formatted(v, rng) for v in verses]
    args.out.mkdir(parents=True, exist_ok=True)
    engine = open_engine(str(args.checkpoint), EngineOptions(search=SearchConfig(beam=4), alignments=True))
    start = time.process_time()
    plain = [b.text for b in translate_all([Block(v) for v in verses], translate_fn(engine), "en")]
    print(json.dumps(row("aiayn", "plain", plain, plain, refs, (), time.process_time() - start)), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sources = {}
        for fmt, make in MAKERS.items():
            sources[fmt] = root / f"verses{fmt}"
            make(sources[fmt], verses if fmt == ".srt" else runs)
            out = args.out / f"aiayn{fmt}"
            start = time.process_time()
            translate_document(sources[fmt], out, translate_fn(engine), "en", "es")
            texts, intact = texts_and_intact(fmt, sources[fmt], out)
            print(json.dumps(row("aiayn", fmt, texts, plain, refs, intact, time.process_time() - start)), flush=True)
        model, vocab, _ = load_for_inference(inference_checkpoint(args.checkpoint))
        package = export_argos(model, vocab, root / "translate-en_es-1_0.argosmodel", "en", "es")
        found = argos_side(args.argos_python, package, verses, list(sources.values()), root / "argos-home")
        argos_plain = found["plain"]
        print(json.dumps(row("argos-translate-files", "plain", argos_plain, argos_plain, refs, (),
                             found["plain_cpu_s"])), flush=True)
        for fmt, source in sources.items():
            done, seconds = found["files"][str(source)]
            out = args.out / f"argos{fmt}"
            out.write_bytes(Path(done).read_bytes())
            texts, intact = texts_and_intact(fmt, source, out)
            print(json.dumps(row("argos-translate-files", fmt, texts, argos_plain, refs, intact, seconds)), flush=True)


if __name__ == "__main__":
    main()
