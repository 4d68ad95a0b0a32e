"""Load on `aiayn serve`: many clients, one sentence a request, against offline translation of the same sentences.

    python -m benchmarks.e2e.load_server --checkpoint runs/multi30k --src data-bin/multi30k/test.src.txt \
        [--requests 1000] [--clients 32,64] [--workers 1,auto] [--threads N] [--time-limit 300]

In one run: offline Translator.translate of all the sentences on --threads torch threads (default: every usable
core; batches of 64 sorted by length: what `aiayn translate` does), and of consecutive groups of --clients sentences
(the most one server process can batch with that many one-sentence requests in flight); then, for each --workers
value, the server (a subprocess on a free loopback port, the same checkpoint and search, --workers W with --threads
/ W torch threads each: the same cores as offline) loaded by each --clients count, with dynamic batching (and with
--no-batching when --modes says so). Offline runs come before, between and after the loads, and each load is
compared with the mean of the two around it (the machine may be shared). Each load sends --requests requests from
its clients, each on its own keep-alive connection, waiting for its answer before sending the next, and stops at
--time-limit.

Reported per load: sentences per batch and how busy the model threads were (summed over workers: 2.0 = two workers
busy all the time), requests sent, lost (sent but not answered 200, must be 0), wrong (answered, but not offline
translation's answer), p50/p99 latency, sentences/s, and sentences/s as a share of offline's (goals with
batching: >= 0.8 at 32 clients, >= 0.9 at 64). Without --checkpoint (or when it does not exist) a tiny random model
stands in, and the first line says so.
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
from collections.abc import Callable
from pathlib import Path

import httpx
import torch

from aiayn.decoding.engine import EngineOptions, open_engine
from aiayn.decoding.search import SearchConfig
from aiayn.serve.workers import auto_workers, usable_cores
from benchmarks.timing import once, table

REPO = Path(__file__).resolve().parents[2]


def tiny_run(folder: Path) -> tuple[Path, list[str]]:
    """A run directory holding a random `tiny` model and a vocabulary of synthetic sentences, and those sentences."""
    from aiayn.config import ModelConfig
    from aiayn.data import Vocab
    from aiayn.model import Transformer
    from aiayn.rundir import RunDir
    from aiayn.training import checkpoint as ckpt

    rng = random.Random(0)
    words = "the a man woman dog street runs plays red blue green in on with near small big child ball".split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 16))) for _ in range(2000)]
    vocab = Vocab.train(lines, folder, vocab_size=120)  # the 19 words leave room for ~150 pieces at most
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=len(vocab)))
    ckpt.save_weights(RunDir(folder).step(1), model.state_dict(), model.cfg, 1)
    return folder, lines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(checkpoint: Path, flags: list[str]) -> tuple[subprocess.Popen, int]:
    """`aiayn serve` with `flags` on a free loopback port, once it answers /health; (process, port)."""
    port = free_port()
    cmd = [sys.executable, "-m", "aiayn", "serve", "--checkpoint", str(checkpoint), "--port", str(port),
           "--log-level", "warning", *flags]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            httpx.get(base + "/health", timeout=1)
            return proc, port
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {' '.join(cmd)}") from None
            time.sleep(0.2)


def stats(base: str) -> dict:
    """The batching counters of every worker together (GET /workers; /info's are one worker's)."""
    time.sleep(2 * 0.2)  # workers publish their counters every 0.2 s
    return httpx.get(base + "/workers", timeout=10).json()["total"]


class Connection:
    """One keep-alive HTTP/1.1 connection (a minimal client: httpx's AsyncClient managed ~190 requests/s with 32
    connections on the 2-core machine of docs/serving-performance.md, this ~730: the load must not measure its
    client). It opens again on the next request after the server closed it."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
                      ) -> tuple[int, bytes]:
        """(status, body) of one request."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: {content_type}\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower().split("\r\n")
        length = next(int(h.split(":")[1]) for h in head if h.startswith("content-length:"))
        answer = await self.reader.readexactly(length)
        if "connection: close" in head:
            self.close()
        return int(head[0].split()[1]), answer

    async def post(self, path: str, obj) -> tuple[int, dict]:
        status, answer = await self.request("POST", path, json.dumps(obj).encode())
        return status, json.loads(answer)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


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
                continue  # lost
            if status == 200:
                answers[i] = answer["translatedText"]
                latencies.append(time.perf_counter() - t)

    wall = await run_clients(port, clients, client)
    return {"answers": answers, "sent": sum(sent), "latencies": latencies, "wall": wall}


async def run_clients(port: int, clients: int, client) -> float:
    """Run `client(connection)` on `clients` keep-alive connections to localhost:port at once; the wall seconds."""
    conns = [Connection("127.0.0.1", port) for _ in range(clients)]
    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in conns))
    wall = time.perf_counter() - start
    for c in conns:
        c.close()
    return wall


def serve_and_load(checkpoint: Path, args: argparse.Namespace, lines: list[str], workers: str, batching: bool,
                   between: Callable[[], None]) -> list[tuple[int, dict, dict]]:
    """Start a server with `workers` workers, warm it up, load it with each --clients count, calling between()
    after each load (offline runs); [(clients, load results, the batching counters of that load)]."""
    n = auto_workers("cpu") if workers == "auto" else int(workers)
    flags = ["--beam", str(args.beam), "--workers", workers, "--threads", str(max(1, args.threads // n))]
    if args.max_wait_ms is not None:
        flags += ["--max-wait-ms", str(args.max_wait_ms)]
    proc, port = start_server(checkpoint, flags + ([] if batching else ["--no-batching"]))
    base, out = f"http://127.0.0.1:{port}", []
    try:
        # warm-up: the first requests of each worker pay for lazy initialisation
        asyncio.run(load(port, lines[: 8 * n], min(4 * n, 32), args.time_limit))
        for clients in args.clients:
            before = stats(base)
            r = asyncio.run(load(port, lines, clients, args.time_limit))
            after = stats(base)
            out.append((clients, r, {k: after[k] - before[k] for k in after}))
            between()
    finally:
        proc.terminate()
        proc.wait(120)
    return out


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default=str(REPO / "runs" / "multi30k"))
    ap.add_argument("--src", default=str(REPO / "data-bin" / "multi30k" / "test.src.txt"))
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int_list, default=[32, 64], help="client counts, comma-separated (32,64)")
    ap.add_argument("--workers", default="1,auto", help="the server's --workers values to load, comma-separated")
    ap.add_argument("--threads", type=int, default=usable_cores(),
                    help="torch threads offline, and of all the server's workers together (default: usable cores)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per load at most (default 300)")
    ap.add_argument("--modes", default="batching", help="batching and/or no-batching, comma-separated")
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
    translator = open_engine(checkpoint, EngineOptions(search=SearchConfig(beam=args.beam), device="cpu"))
    outputs: list[list[str]] = []

    def run_offline(grouped: bool) -> dict:
        """Sentences/s of offline translation: all at once (batches of 64 sorted by length, `aiayn translate`), and
        (grouped) in consecutive groups of `clients` sentences for each client count (the most one server process
        can batch with that many one-sentence requests in flight: the gap is the load's shape, not the server)."""
        out, seconds = once(lambda: translator.translate(lines))
        outputs.append(out)
        rates = {"sorted": len(lines) / seconds}
        if grouped and args.threads > 1:  # one core's rate, for scale: N single-threaded processes reach N x it
            torch.set_num_threads(1)
            out, seconds = once(lambda: translator.translate(lines))
            torch.set_num_threads(args.threads)
            outputs.append(out)
            rates["1 thread"] = len(lines) / seconds
        for c in args.clients if grouped else []:
            parts = [lines[i: i + c] for i in range(0, len(lines), c)]
            out, seconds = once(lambda parts=parts: [t for part in parts for t in translator.translate(part)])
            outputs.append(out)
            rates[c] = len(lines) / seconds
        return rates

    # Offline runs before, between and after the loads; each load is compared with the mean of the two around it,
    # so that what the other tenants of a shared machine do hits both sides alike.
    load_before = f"{os.getloadavg()[0]:.2f}"
    offline = [run_offline(grouped=True)]
    rows = []
    for workers in args.workers.split(","):
        for mode in args.modes.split(","):
            results = serve_and_load(checkpoint, args, lines, workers, mode == "batching",
                                     between=lambda: offline.append(run_offline(grouped=False)))
            for k, (clients, r, st) in enumerate(results):
                around = statistics.mean(o["sorted"] for o in offline[-len(results) + k - 1:][:2])
                rows.append(load_row(workers, mode, clients, r, st, outputs[0], around))
    offline.append(run_offline(grouped=True))
    changed = sum(a != b for o in outputs for a, b in zip(o, outputs[0]))
    mean = statistics.mean(o["sorted"] for o in offline)
    sorted_runs = ", ".join(f"{o['sorted']:.1f}" for o in offline)
    header = [[f"offline `Translator.translate` (batches of 64, length-sorted); runs: {sorted_runs}", "-", len(lines),
               "-", "-", "-", "-", f"{mean:.1f}", "1.00"]]
    for c in ["1 thread"] * (args.threads > 1) + args.clients:
        runs = [o[c] for o in offline if c in o]
        if c == "1 thread":
            header.append([f"offline, batches of 64, one torch thread; runs: {', '.join(f'{x:.1f}' for x in runs)}",
                           "-", len(lines), "-", "-", "-", "-", f"{statistics.mean(runs):.1f}",
                           f"{statistics.mean(runs) / mean:.2f}"])
            continue
        header.append([f"offline, in groups of {c} in request order; runs: {', '.join(f'{x:.1f}' for x in runs)}",
                       "-", len(lines), "-", "-", "-", "-", f"{statistics.mean(runs):.1f}",
                       f"{statistics.mean(runs) / mean:.2f}"])
    print(f"{what}; {len(lines)} sentences, beam {args.beam}, {args.threads} torch thread(s) offline and per server "
          f"(all its workers together); CPUs {sorted(os.sched_getaffinity(0))} of {os.cpu_count()} ({cpu_model()}); "
          f"load average {load_before} before, {os.getloadavg()[0]:.2f} after; torch {torch.__version__}")
    print(table(["mode", "clients", "requests", "lost", "wrong", "p50 ms", "p99 ms", "sentences/s", "vs offline"],
                header + rows))
    print(f"offline translations that differ from the first offline run's (threads, batch shapes): {changed}")
    tmp.cleanup()


def load_row(workers: str, mode: str, clients: int, r: dict, st: dict, expect: list[str], offline: float) -> list:
    """A table row for one load: its counts, latencies and rate against the offline rate around it."""
    answered = [i for i, a in enumerate(r["answers"]) if a is not None]
    lost = r["sent"] - len(answered)
    wrong = sum(r["answers"][i] != expect[i] for i in answered)
    rate, lat = len(answered) / r["wall"], r["latencies"]
    per_batch = st["sentences"] / max(1, st["batches"])
    busy = st["model_busy_s"] / r["wall"]
    return [f"server, --workers {workers}, {mode} ({per_batch:.1f} sentences/batch, model busy {busy:.2f})", clients,
            r["sent"], lost, wrong, f"{1000 * percentile(lat, 0.5):.0f}", f"{1000 * percentile(lat, 0.99):.0f}",
            f"{rate:.1f}", f"{rate / offline:.2f}"]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
