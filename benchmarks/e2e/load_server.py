"""Load on `aiayn serve`: many clients, one sentence a request, against offline translation of the same sentences.

    python -m benchmarks.e2e.load_server --checkpoint runs/multi30k --src data-bin/multi30k/test.src.txt \
        [--requests 1000] [--clients 32] [--threads 1] [--time-limit 300]

In one run: offline Translator.translate of all the sentences (batches of 64 sorted by length: what `aiayn
translate` does), and of consecutive groups of --clients sentences (the most a server can batch with that many
one-sentence requests in flight); then the server (a subprocess on a free loopback port, the same checkpoint, search
and thread count) with dynamic batching, and with --no-batching. The offline runs come before, between and after
the loads, and each load is compared with the mean of the two around it (the machine may be shared). Each load
sends --requests requests from --clients concurrent clients, each on its own keep-alive connection, waiting for
its answer before sending the next, and stops at --time-limit.

Reported per server mode: sentences per batch and how busy the model thread was, requests sent, lost (sent but
not answered 200, must be 0), wrong (answered, but not offline translation's answer), p50/p99 latency,
sentences/s, and sentences/s as a share of offline's (goal >= 0.8 with batching). Without --checkpoint (or when
it does not exist) a tiny random model stands in, and the first line says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

from aiayn.search import SearchConfig
from aiayn.translate import Translator
from benchmarks.timing import once, table

REPO = Path(__file__).resolve().parents[2]


def tiny_run(folder: Path) -> tuple[Path, list[str]]:
    """A run directory holding a random `tiny` model and a vocabulary of synthetic sentences, and those sentences."""
    from aiayn import checkpoint as ckpt
    from aiayn import rundir
    from aiayn.config import ModelConfig
    from aiayn.data import Vocab
    from aiayn.model import Transformer

    rng = random.Random(0)
    words = "the a man woman dog street runs plays red blue green in on with near small big child ball".split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 16))) for _ in range(2000)]
    vocab = Vocab.train(lines, folder, vocab_size=120)  # the 19 words leave room for ~150 pieces at most
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=len(vocab)))
    ckpt.save_weights(rundir.step_checkpoint_path(folder, 1), model.state_dict(), model.cfg, 1)
    return folder, lines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(checkpoint: Path, threads: int, batching: bool, search: list[str]) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cmd = [sys.executable, "-m", "aiayn", "serve", "--checkpoint", str(checkpoint), "--port", str(port),
           "--log-level", "warning", *search, *([] if batching else ["--no-batching"])]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(base + "/health", timeout=1)
            return proc, port
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {' '.join(cmd)}") from None
            time.sleep(0.2)


class Connection:
    """One keep-alive HTTP/1.1 connection sending JSON (a minimal client: httpx's AsyncClient managed ~190 requests/s
    with 32 connections on the 2-core machine of docs/serving.md, this ~730: the load must not measure its client)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, obj) -> tuple[int, dict]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        body = json.dumps(obj).encode()
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        length = next(int(h.split(":")[1]) for h in head if h.lower().startswith("content-length:"))
        return int(head[0].split()[1]), json.loads(await self.reader.readexactly(length))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def load(port: int, lines: list[str], clients: int, time_limit: float) -> dict:
    """`clients` loops, each on its own connection sending the next unsent sentence and waiting for its answer, until
    all are sent or time_limit passes. Returns answers (None = lost), latencies, and the wall time."""
    answers: list[str | None] = [None] * len(lines)
    sent, latencies, next_i = [False] * len(lines), [], 0
    deadline = time.perf_counter() + time_limit

    async def client(conn: Connection) -> None:
        nonlocal next_i
        while next_i < len(lines) and time.perf_counter() < deadline:
            i, next_i = next_i, next_i + 1
            sent[i] = True
            t = time.perf_counter()
            try:
                status, answer = await asyncio.wait_for(conn.post("/translate", {"q": lines[i]}),
                                                        max(1.0, deadline - t))
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
                conn.close()
                conn.writer = None
                continue  # lost
            if status == 200:
                answers[i] = answer["translatedText"]
                latencies.append(time.perf_counter() - t)

    conns = [Connection("127.0.0.1", port) for _ in range(clients)]
    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in conns))
    wall = time.perf_counter() - start
    for c in conns:
        c.close()
    return {"answers": answers, "sent": sum(sent), "latencies": latencies, "wall": wall}


def serve_and_load(checkpoint: Path, args: argparse.Namespace, lines: list[str], batching: bool) -> tuple[dict, dict]:
    """Start a server, warm it up, load it; (load results, the batcher's stats of the load)."""
    flags = ["--beam", str(args.beam)]
    if args.max_wait_ms is not None:
        flags += ["--max-wait-ms", str(args.max_wait_ms)]
    proc, port = start_server(checkpoint, args.threads, batching, flags)
    base = f"http://127.0.0.1:{port}"
    try:
        for line in lines[:4]:  # warm-up: the first requests pay for lazy initialisation
            httpx.post(base + "/translate", json={"q": line}, timeout=60)
        before = httpx.get(base + "/info", timeout=10).json()["stats"]
        r = asyncio.run(load(port, lines, args.clients, args.time_limit))
        after = httpx.get(base + "/info", timeout=10).json()["stats"]
    finally:
        proc.terminate()
        proc.wait(60)
    return r, {k: after[k] - before[k] for k in after}


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default=str(REPO / "runs" / "multi30k"))
    ap.add_argument("--src", default=str(REPO / "data-bin" / "multi30k" / "test.src.txt"))
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads, offline and in the server (default 1)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per load at most (default 300)")
    ap.add_argument("--modes", default="batching,no-batching")
    ap.add_argument("--max-wait-ms", type=float, default=None, help="the server's --max-wait-ms (default: its own)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    tmp = tempfile.TemporaryDirectory()
    checkpoint, src = Path(args.checkpoint), Path(args.src)
    if checkpoint.exists() and src.exists():
        lines = src.read_text(encoding="utf-8").splitlines()
        what = f"{checkpoint} on {src}"
    else:
        checkpoint, lines = tiny_run(Path(tmp.name))
        what = "a tiny RANDOM model (no trained checkpoint found) on synthetic sentences"
    lines = [line for line in lines if line.strip()]
    lines = (lines * (args.requests // len(lines) + 1))[: args.requests]
    search = SearchConfig(beam=args.beam)

    translator = Translator.load(checkpoint, search)

    groups = {"sorted": [lines], "grouped": [lines[i: i + args.clients] for i in range(0, len(lines), args.clients)]}

    def run_offline() -> dict[str, float]:
        """Sentences/s of offline translation: all at once (batches of 64 sorted by length, `aiayn translate`), and
        in consecutive groups of `clients` sentences (the most a server can batch with `clients` one-sentence
        requests in flight: the gap between the two is the load's shape, not the server)."""
        rates = {}
        for kind, parts in groups.items():
            out, seconds = once(lambda parts=parts: [out for part in parts for out in translator.translate(part)])
            outputs.append(out)
            rates[kind] = len(lines) / seconds
        return rates

    # Offline runs before, between and after the loads; each load is compared with the mean of the two around it,
    # so that what the other tenants of a shared machine do hits both sides alike.
    outputs: list[list[str]] = []
    offline = [run_offline()]
    rows = []
    for mode in args.modes.split(","):
        r, stats = serve_and_load(checkpoint, args, lines, batching=mode == "batching")
        offline.append(run_offline())
        answered = [i for i, a in enumerate(r["answers"]) if a is not None]
        lost = r["sent"] - len(answered)
        wrong = sum(r["answers"][i] != outputs[0][i] for i in answered)
        rate = len(answered) / r["wall"]
        lat = r["latencies"]
        per_batch = stats["sentences"] / max(1, stats["batches"])
        busy = stats["model_busy_s"] / r["wall"]
        rows.append([f"server, {mode} ({per_batch:.1f} sentences/batch, model busy {busy:.0%})", r["sent"], lost,
                     wrong, f"{1000 * percentile(lat, 0.5):.0f}", f"{1000 * percentile(lat, 0.99):.0f}", f"{rate:.1f}",
                     f"{rate / statistics.mean(o['sorted'] for o in offline[-2:]):.2f}"])
    assert all(o == outputs[0] for o in outputs)
    mean = statistics.mean(o["sorted"] for o in offline)
    offline_rows = []
    for kind, label in [("sorted", "offline `Translator.translate` (batches of 64, length-sorted)"),
                        ("grouped", f"offline, in groups of {args.clients} in request order")]:
        runs = [o[kind] for o in offline]
        rate = statistics.mean(runs)
        offline_rows.append([f"{label}; runs: {', '.join(f'{x:.1f}' for x in runs)}", len(lines), "-", "-", "-", "-",
                             f"{rate:.1f}", f"{rate / mean:.2f}"])
    rows = offline_rows + rows

    print(f"{what}; {len(lines)} sentences, beam {args.beam}, {args.clients} clients, {args.threads} thread(s), "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    print(table(["mode", "requests", "lost", "wrong", "p50 ms", "p99 ms", "sentences/s", "vs offline"], rows))
    tmp.cleanup()


if __name__ == "__main__":
    main()
