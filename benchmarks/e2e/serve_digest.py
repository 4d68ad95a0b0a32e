"""A digest of `aiayn serve`'s answers to plain-text requests on a real test set: run it on two versions of aiayn to
show that they answer alike (the same digest), without keeping the answers.

    python -m benchmarks.e2e.serve_digest --checkpoint RUN --data DATA [--n 879]
    PYTHONPATH=OLD_CHECKOUT python benchmarks/e2e/serve_digest.py --checkpoint RUN --data DATA   # another version

The run is served in process (one model, aiayn's engine, beam 4) and sent its first --n test verses as requests of
32 texts (each verse a text), then as requests of 8 texts with "alternatives": 2, then as texts of four verses on
four lines; prints the sha256 of each way's JSON answers (translations, alternatives, scores rounded to 4 places).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from pathlib import Path

import httpx

from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.serve import LanguagePair, Loaded, Models, ServeConfig, create_app
from aiayn.serve.state import Limits


def answers(translator: Translator, bodies: list[dict]) -> list[dict]:
    models = Models.from_sources([(LanguagePair("en", "es"), Loaded(translator, "run"))])
    models.preload()
    app = create_app(models, ServeConfig(limits=Limits(max_chars=5000, max_texts=64)))

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://x", timeout=600) as c:
            out = [(await c.post("/translate", json=body)).json() for body in bodies]
        await models.close()
        return out
    return asyncio.run(go())


def digest(found: list[dict]) -> str:
    def rounded(value):
        if isinstance(value, float):
            return round(value, 4)
        if isinstance(value, list):
            return [rounded(v) for v in value]
        return value
    text = json.dumps([{k: rounded(v) for k, v in a.items()} for a in found], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--n", type=int, default=879)
    args = p.parse_args()
    verses = (Path(args.data) / "test.src.txt").read_text(encoding="utf-8").splitlines()[: args.n]
    translator = Translator.load(args.checkpoint, SearchConfig(beam=4))
    ways = {"32 texts a request": [{"q": verses[k:k + 32]} for k in range(0, len(verses), 32)],
            "8 texts, alternatives 2": [{"q": verses[k:k + 8], "alternatives": 2} for k in range(0, len(verses), 8)],
            "4 lines a text": [{"q": ["\n".join(verses[j:j + 4]) for j in range(k, min(k + 32, len(verses)), 4)]}
                               for k in range(0, len(verses), 32)]}
    for name, bodies in ways.items():
        found = answers(translator, bodies)
        texts = sum(len(a["translatedText"]) for a in found)
        print(json.dumps({"way": name, "requests": len(bodies), "texts": texts, "sha256": digest(found)}), flush=True)


if __name__ == "__main__":
    main()
