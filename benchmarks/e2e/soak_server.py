"""A soak of `aiayn serve`: minutes of mixed load on loopback, counting lost and wrong answers and sampling the
server's memory.

    python -m benchmarks.e2e.soak_server --checkpoint runs/multi30k --src data-bin/multi30k/test.src.txt \
        [--minutes 10] [--warmup-minutes 1] [--clients 16] [--workers auto]

The server runs as a subprocess on a free loopback port (the same checkpoint and search as the offline reference,
--workers as given). --clients clients, each on its own keep-alive connection, send one request after another,
drawn at random (seeded) from a mix:

    translate one sentence      55 %    answer must be offline translation's
    translate a list of 2-8     15 %    likewise, text by text
    GET /health, GET /info      15 %    200
    bad requests                15 %    their 4xx: not JSON, not UTF-8, no q, an empty text, a text over --max-chars,
                                        alternatives >= beam, an unknown route, a wrong method

Counted: requests by kind, lost (no answer, a broken connection, or a status other than the one expected: a 5xx
included), wrong (200, but not offline translation's answer). Every --sample-s seconds the resident memory (RSS) of
the server's processes (the main process and each worker) is read from /proc; reported: each at the end of the
warm-up, at the end, and its growth between the two (goal < 5 %), and every sample as a line (the raw record).
Without --checkpoint (or when it does not exist) a tiny random model stands in, and the first line says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path

import httpx
import torch

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import SearchConfig
from benchmarks.e2e.load_server import REPO, Connection, cpu_model, start_server, tiny_run
from benchmarks.timing import table

TIMEOUT_S = 60.0  # a request not answered in this time is lost
# (kind, weight): what a client sends next
MIX = [("one", 55), ("list", 15), ("health", 10), ("info", 5), ("bad", 15)]
BAD = [  # (body or None for a GET, path, method, the status expected)
    (b"q=not json", "/translate", "POST", 400),
    (b'{"q": "caf\xe9"}', "/translate", "POST", 400),
    (b'{"text": "no q"}', "/translate", "POST", 422),
    (b'{"q": "   "}', "/translate", "POST", 422),
    (json.dumps({"q": "a" * 1001}).encode(), "/translate", "POST", 413),
    (json.dumps({"q": "hello", "alternatives": 99}).encode(), "/translate", "POST", 422),
    (None, "/no-such-route", "GET", 404),
    (None, "/translate", "GET", 405),
]


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Soak:
    """The clients' counters and the memory samples of one soak."""

    def __init__(self, port: int, lines: list[str], expect: dict[str, str], seed: int):
        self.port, self.lines, self.expect = port, lines, expect
        self.rng = random.Random(seed)
        self.sent = {kind: 0 for kind, _ in MIX}
        self.lost = {kind: 0 for kind, _ in MIX}
        self.wrong = {kind: 0 for kind, _ in MIX}
        self.examples: list[str] = []  # the first few lost or wrong, for the report

    def _note(self, what: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(what)

    async def one(self, conn: Connection) -> None:
        kinds, weights = zip(*MIX)
        kind = self.rng.choices(kinds, weights)[0]
        self.sent[kind] += 1
        try:
            if kind in ("one", "list"):
                texts = self.rng.sample(self.lines, 1 if kind == "one" else self.rng.randint(2, 8))
                q = texts[0] if kind == "one" else texts
                status, body = await asyncio.wait_for(
                    conn.request("POST", "/translate", json.dumps({"q": q}).encode()), TIMEOUT_S)
                if status != 200:
                    raise ValueError(f"status {status}: {body[:200]!r}")
                got = json.loads(body)["translatedText"]
                if (got if kind == "list" else [got]) != [self.expect[t] for t in texts]:
                    self.wrong[kind] += 1
                    self._note(f"wrong: {texts!r} -> {got!r}")
                return
            if kind in ("health", "info"):
                method, path, payload, expected = "GET", f"/{kind}", b"", 200
            else:
                payload, path, method, expected = self.rng.choice(BAD)
            status, body = await asyncio.wait_for(conn.request(method, path, payload or b""), TIMEOUT_S)
            if status != expected:
                raise ValueError(f"{kind}: status {status}, expected {expected}: {body[:200]!r}")
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError, StopIteration) as e:
            conn.close()
            self.lost[kind] += 1
            self._note(f"lost: {kind}: {e!r}")

    async def run(self, clients: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds

        async def client() -> None:
            conn = Connection("127.0.0.1", self.port)
            while time.monotonic() < deadline:
                await self.one(conn)
            conn.close()

        await asyncio.gather(*(client() for _ in range(clients)))


def sample_memory(pids: dict[str, int], seconds: float, every: float, start: float, samples: list) -> None:
    """Every `every` seconds until `seconds` have passed: (t, {process: RSS MB}) appended to samples."""
    while (t := time.monotonic() - start) < seconds:
        samples.append((t, {name: rss_mb(pid) for name, pid in pids.items()}))
        print(json.dumps({"t": round(t, 1), "rss_mb": {k: v and round(v, 1) for k, v in samples[-1][1].items()}}),
              flush=True)
        time.sleep(every)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default=str(REPO / "runs" / "multi30k"))
    ap.add_argument("--src", default=str(REPO / "data-bin" / "multi30k" / "test.src.txt"))
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the load runs (default 10)")
    ap.add_argument("--warmup-minutes", type=float, default=1.0,
                    help="memory growth is measured from the end of this (default 1)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--workers", default="auto", help="the server's --workers (default auto)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--sentences", type=int, default=300, help="distinct sentences the clients draw from")
    ap.add_argument("--sample-s", type=float, default=5.0, help="seconds between memory samples (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory()
    checkpoint, src = Path(args.checkpoint), Path(args.src)
    if checkpoint.exists() and src.exists():
        lines, what = src.read_text(encoding="utf-8").splitlines(), f"{checkpoint} on {src}"
    else:
        checkpoint, lines = tiny_run(Path(tmp.name))
        what = "a tiny RANDOM model (no trained checkpoint found) on synthetic sentences"
    lines = list(dict.fromkeys(line for line in lines if line.strip()))[: args.sentences]
    engine = open_engine(checkpoint, EngineOptions(search=SearchConfig(beam=args.beam), device="cpu"))
    expect = dict(zip(lines, engine.translate(lines)))

    proc, port = start_server(checkpoint, ["--beam", str(args.beam), "--workers", args.workers])
    try:
        report = httpx.get(f"http://127.0.0.1:{port}/workers", timeout=10).json()
        pids = {"main": report["main_pid"], **{f"worker {w['worker']}": w["pid"] for w in report["workers"]}}
        if len(pids) == 2 and pids["main"] == pids["worker 0"]:  # --workers 1: one process
            pids = {"server": pids["main"]}
        soak, samples, seconds = Soak(port, lines, expect, args.seed), [], 60 * args.minutes
        start = time.monotonic()
        sampler = asyncio.to_thread(sample_memory, pids, seconds, args.sample_s, start, samples)

        async def both() -> None:
            await asyncio.gather(soak.run(args.clients, seconds), sampler)
        asyncio.run(both())
        wall = time.monotonic() - start
        samples.append((wall, {name: rss_mb(pid) for name, pid in pids.items()}))
        stats = httpx.get(f"http://127.0.0.1:{port}/workers", timeout=10).json()["total"]
    finally:
        proc.terminate()
        proc.wait(120)
    tmp.cleanup()
    print(f"{what}; {len(lines)} distinct sentences, beam {args.beam}, --workers {args.workers}, {args.clients} "
          f"clients, {args.minutes:g} minutes (warm-up {args.warmup_minutes:g}); torch {torch.__version__}; "
          f"{cpu_model()}")
    print_report(soak, samples, 60 * args.warmup_minutes, wall, stats)


def print_report(soak: Soak, samples: list, warmup_s: float, wall: float, stats: dict) -> None:
    rows = [[kind, soak.sent[kind], soak.lost[kind], soak.wrong[kind] if kind in ("one", "list") else "-"]
            for kind, _ in MIX]
    rows.append(["all", sum(soak.sent.values()), sum(soak.lost.values()), sum(soak.wrong.values())])
    print(table(["requests", "sent", "lost", "wrong"], rows))
    print(f"{sum(soak.sent.values()) / wall:.1f} requests/s; the server decoded {stats['sentences']} sentences in "
          f"{stats['batches']} batches")
    for example in soak.examples:
        print("  " + example)
    warm = next((s for s in samples if s[0] >= warmup_s), samples[-1])
    end = samples[-1]
    rows = []
    for name in end[1]:
        a, b = warm[1][name], end[1][name]
        peak = max(s[1][name] or 0 for s in samples if s[0] >= warmup_s)
        rows.append([name, f"{a:.1f}", f"{b:.1f}", f"{peak:.1f}", f"{100 * (b - a) / a:+.1f} %"])
    a, b = sum(warm[1].values()), sum(end[1].values())
    rows.append(["all processes", f"{a:.1f}", f"{b:.1f}", "-", f"{100 * (b - a) / a:+.1f} %"])
    print(table(["process", f"RSS MB at {warm[0]:.0f} s", f"RSS MB at {end[0]:.0f} s", "peak after warm-up",
                 "growth"], rows))


if __name__ == "__main__":
    main()
