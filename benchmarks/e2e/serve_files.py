"""A 20-page Word document through `POST /translate_file` beside its paragraphs sent to `POST /translate`, on the same
server (uvicorn in this process, one model, aiayn's engine, the server's batching), timed alternately.

    python -m benchmarks.e2e.serve_files --checkpoint runs/quickstart/run --data runs/quickstart/data [--pages 20]

The document: --pages x 30 test verses, one paragraph each (about 500 words a page). /translate gets the same
paragraphs as the line API's clients can send them at best: every request of max_texts texts at once. Each --repeats
round times the file (upload, translation, download) then the texts, wall and CPU seconds of this process (server and
client); the answer is a JSON line a round (with the round's ratios, and how many paragraphs of the file equal the
/translate answer for the same text) and a line of medians.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx


def make_docx(paragraphs: list[str]) -> bytes:
    import docx

    d = docx.Document()
    for p in paragraphs:
        d.add_paragraph(p)
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def docx_paragraphs(data: bytes) -> list[str]:
    import docx

    return [p.text for p in docx.Document(io.BytesIO(data)).paragraphs if p.text]


async def by_file(client: httpx.AsyncClient, data: bytes, source: str, target: str) -> tuple[float, list[str]]:
    start = time.perf_counter()
    r = await client.post("/translate_file", files={"file": ("report.docx", data)},
                          data={"source": source, "target": target})
    r.raise_for_status()
    got = await client.get(r.json()["translatedFileUrl"])
    got.raise_for_status()
    return time.perf_counter() - start, docx_paragraphs(got.content)


async def by_lines(client: httpx.AsyncClient, texts: list[str], per: int, source: str, target: str
                   ) -> tuple[float, list[str]]:
    start = time.perf_counter()
    calls = [client.post("/translate", json={"q": texts[i:i + per], "source": source, "target": target})
             for i in range(0, len(texts), per)]
    answers = await asyncio.gather(*calls)
    out = []
    for r in answers:
        r.raise_for_status()
        out += r.json()["translatedText"]
    return time.perf_counter() - start, out


class ServerThread:
    """uvicorn serving `app` on a free loopback port, in a thread."""

    def __init__(self, app):
        import socket
        import threading

        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def main() -> None:
    from aiayn.serve.files import FileConfig, install_files

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data", required=True, help="the prepared data folder (its test.src.txt gives the verses)")
    ap.add_argument("--pages", type=int, default=20)
    ap.add_argument("--per-page", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="the server's timeout_s (the line API's default, 30 s, answers 504 to a 20-page burst)")
    ap.add_argument("--chunk", type=int, default=FileConfig.chunk_sentences, help="the file's sentences a chunk")
    ap.add_argument("--source", default="en")
    ap.add_argument("--target", default="es")
    args = ap.parse_args()
    from aiayn.decoding.engine import EngineOptions, open_engine
    from aiayn.serve import BatchConfig, LanguagePair, Limits, Loaded, Models, ServeConfig, create_app

    verses = Path(args.data, "test.src.txt").read_text(encoding="utf-8").splitlines()
    paragraphs = (verses * (1 + args.pages * args.per_page // len(verses)))[:args.pages * args.per_page]
    engine = open_engine(args.checkpoint, EngineOptions())
    limits = Limits(max_chars=5000, max_texts=64)
    models = Models.from_sources([(LanguagePair(args.source, args.target), Loaded(engine, args.checkpoint))],
                                  BatchConfig(timeout_s=args.timeout))
    models.preload()
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(models, ServeConfig(limits=limits))
        install_files(app, FileConfig(folder=Path(folder), chunk_sentences=args.chunk))
        data = make_docx(paragraphs)
        print(json.dumps({"paragraphs": len(paragraphs), "words": sum(len(p.split()) for p in paragraphs),
                          "docx_bytes": len(data)}), flush=True)
        rounds = []
        with ServerThread(app) as base:
            async def go():
                async with httpx.AsyncClient(base_url=base, timeout=1800) as client:
                    await by_lines(client, paragraphs[:8], limits.max_texts, args.source, args.target)  # warm-up
                    for k in range(args.repeats):
                        cpu0 = time.process_time()
                        file_s, file_out = await by_file(client, data, args.source, args.target)
                        cpu1 = time.process_time()
                        lines_s, lines_out = await by_lines(client, paragraphs, limits.max_texts, args.source,
                                                            args.target)
                        cpu2 = time.process_time()
                        same = sum(a == b for a, b in zip(file_out, lines_out))
                        rounds.append({"round": k, "file_s": round(file_s, 2), "lines_s": round(lines_s, 2),
                                       "ratio": round(file_s / lines_s, 3), "file_cpu_s": round(cpu1 - cpu0, 2),
                                       "lines_cpu_s": round(cpu2 - cpu1, 2), "cpu_ratio": round((cpu1 - cpu0) /
                                                                                              (cpu2 - cpu1), 3),
                                       "paragraphs_equal": same, "paragraphs_out": len(file_out)})
                        print(json.dumps(rounds[-1]), flush=True)
            asyncio.run(go())
    summary = {key: statistics.median(r[key] for r in rounds) for key in ("file_s", "lines_s", "ratio", "file_cpu_s",
                                                                            "lines_cpu_s", "cpu_ratio")}
    summary["ratio_of_medians"] = round(summary["file_s"] / summary["lines_s"], 3)
    print(json.dumps({"median": summary}))


if __name__ == "__main__":
    main()
