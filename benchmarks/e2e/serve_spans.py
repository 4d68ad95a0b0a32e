"""Numbers, glossary terms and tags through `aiayn serve`'s /translate on a real test set, beside `aiayn translate`'s
placement of the same spans (aiayn.markup.lines) and the plain translation.

    python -m benchmarks.e2e.serve_spans --checkpoint RUN --candidates names.tsv [--data DIR] [--out DIR]

The run is served in process (one model, aiayn's engine, the run's search settings with beam 4; the run's lexical
aligner where it has one), requests of --texts texts each sent one after the other through httpx's ASGI transport:
  glossary: the test split plain, then with the glossary (the candidates checked against the references as
            benchmarks.e2e.glossary checks them): sacreBLEU BLEU and chrF, words, the most words added per term,
            sentences more than 3 words longer per term, sentences that gained a sentence end, terms held, and how
            many answers equal `aiayn translate --glossary`'s (the engine's alignments, then carry_nbests);
  numbers:  the first --n-numbers verses with one of benchmarks.e2e.glossary.ITEMS before their final punctuation:
            items back exactly, chrF and BLEU against the references with the same items;
  html:     the issue's sentences with tags, answered as format=html;
and the CPU seconds of each way (the server's process). Raw answers go to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path

import httpx

from aiayn.decoding.glossary import Glossary
from aiayn.decoding.lines import join_lines, split_lines
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.markup.lines import carry_nbests, term_spans, term_translations
from aiayn.metrics import chrf, corpus_bleu
from aiayn.serve import LanguagePair, Loaded, Models, ServeConfig, create_app
from aiayn.serve.state import Limits
from benchmarks.e2e.glossary import ITEMS, checked, sentence_ends, with_item

HTML = ['In the beginning was the Word, and the Word was with <b>God</b>. He came to <a href="x.html">his own</a> '
        "people.", "<table><tr><td>2020</td><td>The king &amp; the people&nbsp;came.</td></tr></table>",
        "<p>Jesus said: <i>Follow me</i>.</p><script>var a = 1;<p>after</p>"]


def served(translator: Translator):
    models = Models.from_sources([(LanguagePair("en", "es"), Loaded(translator, "run"))])
    models.preload()
    return create_app(models, ServeConfig(limits=Limits(max_chars=5000, max_texts=64)))


def ask(app, bodies: list[dict]) -> tuple[list[dict], float]:
    """Each body POSTed to /translate in turn; the answers and the CPU seconds they took."""
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://x", timeout=600) as c:
            out = []
            for body in bodies:
                r = await c.post("/translate", json=body)
                assert r.status_code == 200, r.text
                out.append(r.json())
        await app.state.server.models.close()
        return out
    start = time.process_time()
    answers = asyncio.run(go())
    return answers, time.process_time() - start


def texts_of(app, lines: list[str], size: int, **fields) -> tuple[list[str], float]:
    answers, seconds = ask(app, [{"q": lines[k:k + size], "source": "en", "target": "es", **fields}
                                 for k in range(0, len(lines), size)])
    return [t for a in answers for t in a["translatedText"]], seconds


def glossary_rows(translator, glossary: Glossary, src, ref, size: int, out: Path) -> list[dict]:
    terms = [[s.text for s in term_spans(line, glossary)] for line in src]
    plain, plain_s = texts_of(served(translator), src, size)
    termed, termed_s = texts_of(served(translator), src, size, glossary=[list(e) for e in glossary.entries])
    parts, _, layouts = split_lines(src)  # what aiayn translate --glossary writes: sentence by sentence, then
    found = translator.translate_nbest(parts, alignments=True)  # the spans carried, the lines joined
    carried = carry_nbests(parts, found, glossary, lexicon=term_translations(translator, parts, glossary))
    offline = [hs[0].text for hs in join_lines(carried, layouts)]
    rows = []
    for name, texts, seconds in [("plain", plain, plain_s), ("glossary", termed, termed_s)]:
        (out / f"glossary-{name}.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
        extra = [(len(t.split()) - len(b.split())) / len(ts) for t, b, ts in zip(texts, plain, terms) if ts]
        held = sum(bool(re.search(rf"(?<!\w){re.escape(w)}(?!\w)", t)) for t, ts in zip(texts, terms) for w in ts)
        rows.append({"way": name, "cpu_s": round(seconds, 1), "bleu": round(corpus_bleu(texts, ref).score, 2),
                     "chrf": round(chrf(texts, ref).score, 2), "words": sum(len(t.split()) for t in texts),
                     "max_extra_words_per_term": max(extra),
                     "sentences_over_3_extra_per_term": sum(e > 3 for e in extra),
                     "gained_a_sentence_end": sum(sentence_ends(t) > sentence_ends(b) for t, b in zip(texts, plain)),
                     "terms_held": held, "terms": sum(map(len, terms)), "sentences_with_terms": len(extra),
                     "equal_to_aiayn_translate": sum(t == o for t, o in zip(texts, offline)) if name == "glossary"
                     else None})
    return rows


def numbers_row(translator, src, ref, n: int, size: int, out: Path) -> dict:
    items = [ITEMS[i % len(ITEMS)] for i in range(min(n, len(src)))]
    lines = [with_item(s, it) for s, it in zip(src, items)]
    refs = [with_item(r, it) for r, it in zip(ref, items)]
    texts, seconds = texts_of(served(translator), lines, size)
    (out / "numbers-served.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    exact = [it in t for it, t in zip(items, texts)]
    return {"way": "numbers through /translate", "lines": len(lines), "exact": sum(exact), "cpu_s": round(seconds, 1),
            "chrf": round(chrf(texts, refs).score, 2), "bleu": round(corpus_bleu(texts, refs).score, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--candidates", required=True)
    p.add_argument("--data", help="prepared data folder (default: the run's recorded one)")
    p.add_argument("--min-rate", type=float, default=0.8)
    p.add_argument("--n-numbers", type=int, default=300)
    p.add_argument("--texts", type=int, default=32, help="texts a request")
    p.add_argument("--out", default="serve-spans-out")
    args = p.parse_args()
    data = Path(args.data or json.loads((Path(args.checkpoint) / "config.json").read_text())["data"])
    src = (data / "test.src.txt").read_text(encoding="utf-8").splitlines()
    ref = (data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    translator = Translator.load(args.checkpoint, SearchConfig(beam=4))
    glossary = checked(Glossary.read(args.candidates), src, ref, args.min_rate)
    print(json.dumps({"glossary_entries": len(glossary.entries), "lexical_aligner": translator.aligner is not None}))
    for row in glossary_rows(translator, glossary, src, ref, args.texts, out):
        print(json.dumps(row, ensure_ascii=False), flush=True)
    print(json.dumps(numbers_row(translator, src, ref, args.n_numbers, args.texts, out), ensure_ascii=False))
    (answer,), _ = ask(served(translator), [{"q": HTML, "format": "html", "alternatives": 1}])
    print(json.dumps({"html": HTML, "answer": answer}, ensure_ascii=False))


if __name__ == "__main__":
    main()
