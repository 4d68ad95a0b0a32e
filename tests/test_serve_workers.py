"""serve's processes and robustness: the model swapped between batches (every request answered by exactly one model,
never a mix), a reload under load with worker processes (POST /admin/reload, then SIGHUP), clean stops, and clients
that misbehave (slow senders, oversized heads and bodies, many idle connections) against a real server process."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from helpers import REPO, save_run, tiny_model  # noqa: E402
from serving import wait_until_listening  # noqa: E402

from aiayn.data import Vocab  # noqa: E402
from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.rundir import RunDir  # noqa: E402
from aiayn.serve import BatchConfig, Batcher  # noqa: E402
from aiayn.training import checkpoint as ckpt  # noqa: E402

SEARCH = SearchConfig(beam=4, max_len_b=10)
SEARCH_FLAGS = ["--beam", "4", "--max-len-b", "10"]


@pytest.fixture(scope="module")
def models(copy_data):
    """Two tiny random models over one vocabulary, A and B, and the test lines they translate differently."""
    vocab = Vocab.load(copy_data / "vocab.model")
    lines = (copy_data / "test.src.txt").read_text().splitlines()
    a = Translator(tiny_model(len(vocab), seed=0, eos_bias=1.0), vocab, SEARCH)
    b = Translator(tiny_model(len(vocab), seed=1, eos_bias=1.0), vocab, SEARCH)
    ta, tb = a.translate(lines), b.translate(lines)
    differ = [i for i in range(len(lines)) if ta[i] != tb[i]]
    assert len(differ) >= 20, "the two models must tell their answers apart"
    lines = [lines[i] for i in differ]
    return a, b, lines, {s: t for s, t in zip(lines, a.translate(lines))}, {s: t for s, t in
                                                                            zip(lines, b.translate(lines))}


def test_swap_between_batches(models):
    """Jobs queued before swap() are answered by the old model, later ones by the new; a list never mixes them."""
    a, b, lines, by_a, by_b = models

    async def go():
        batcher = Batcher(a, BatchConfig(max_wait_ms=0))
        release = threading.Event()
        held = asyncio.create_task(batcher.run(release.wait, 10))  # the model thread is busy: jobs queue up
        await asyncio.sleep(0.05)
        before = [asyncio.create_task(batcher.submit([line])) for line in lines[:6]]
        before.append(asyncio.create_task(batcher.submit(lines[6:10])))
        await asyncio.sleep(0.05)
        batcher.swap(b)
        after = [asyncio.create_task(batcher.submit([line])) for line in lines[:6]]
        after.append(asyncio.create_task(batcher.submit(lines[6:10])))
        await asyncio.sleep(0.05)
        release.set()
        await held
        out = [[[hs[0].text for hs in await t] for t in ts] for ts in (before, after)]
        batches = batcher.stats["batches"]
        await batcher.close()
        return out, batches

    (before, after), batches = asyncio.run(go())
    assert before == [[by_a[line]] for line in lines[:6]] + [[by_a[line] for line in lines[6:10]]]
    assert after == [[by_b[line]] for line in lines[:6]] + [[by_b[line] for line in lines[6:10]]]
    assert batches == 2  # one batch of each model's jobs


# ---------------------------------------------------------------------------------------------------------
# Real server processes.


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(run: Path, *flags: str):
    """`aiayn serve --checkpoint run` with `flags` on a free loopback port: (process, base URL) once /health answers;
    stopped at the end (SIGTERM, then SIGKILL)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--checkpoint", str(run), "--port", str(port),
                             "--log-level", "warning", *SEARCH_FLAGS, *flags], env=env, stderr=subprocess.PIPE,
                            text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_listening(proc, base)
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def save_step(model, run: Path, step: int) -> None:
    """A newer step checkpoint in `run`: what a reload of the run directory picks up."""
    ckpt.save_weights(RunDir(run).step(step), model.state_dict(), model.cfg, step)


class Traffic:
    """Clients sending requests in a loop (a sentence, or a list of three), recording (sent_at, texts, answer,
    answered_at) until stopped."""

    def __init__(self, base: str, lines: list[str], clients: int = 6):
        self.base, self.lines, self.clients = base, lines, clients
        self.records: list[tuple[float, list[str], object, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _client(self, k: int) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=60) as client:
            i = k
            while not self._stop.is_set():
                texts = [self.lines[(i + j) % len(self.lines)] for j in range(3 if i % 4 == 0 else 1)]
                sent = time.monotonic()
                try:
                    r = await client.post("/translate", json={"q": texts if len(texts) > 1 else texts[0]})
                    answer = r.json()["translatedText"] if r.status_code == 200 else r.status_code
                except httpx.HTTPError as e:
                    answer = repr(e)
                self.records.append((sent, texts, answer, time.monotonic()))
                i += self.clients

    async def _run(self) -> None:
        await asyncio.gather(*(self._client(k) for k in range(self.clients)))

    def wait_for(self, n: int, since: float, timeout: float = 120) -> None:
        """Until `n` requests sent after `since` have been answered."""
        deadline = time.monotonic() + timeout
        while sum(rec[0] > since for rec in self.records) < n:
            assert time.monotonic() < deadline and self._thread.is_alive(), "the traffic stalled"
            time.sleep(0.05)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)


def answered_by(record, *tables: dict) -> list[int]:
    """Which of the models' tables answer `record` whole (a list answered partly by each matches none)."""
    _, texts, answer, _ = record
    answers = [answer] if isinstance(answer, str) else answer
    return [k for k, table in enumerate(tables) if isinstance(answers, list) and answers == [table[t] for t in texts]]


def wait_for_generation(base: str, generation: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        report = httpx.get(base + "/workers", timeout=5).json()
        if all(w["generation"] >= generation for w in report["workers"]):
            return report
        assert time.monotonic() < deadline, report
        time.sleep(0.1)


def test_reload_under_load_with_workers(models, copy_data, tmp_path, capsys):
    """2 workers serve model A under load; B is saved and POST /admin/reload swaps it in, then A again by SIGHUP.
    Nothing is lost, every answer is one model's whole, and after each reload only the new model answers. A second
    server on the same port is refused (its workers would otherwise share the port with the first's)."""
    a, b, lines, by_a, by_b = models
    key = "k" * 8 + "-admin-key-for-tests"
    (tmp_path / "admin.key").write_text(key + "\n")
    run = save_run(a.model, copy_data / "vocab.model", tmp_path / "run", step=10)
    with server(run, "--workers", "2", "--threads", "1", "--admin-key", str(tmp_path / "admin.key")) as (proc, base):
        from aiayn.cli import main

        port = base.rsplit(":", 1)[1]
        assert main(["serve", "--checkpoint", str(run), "--port", port, "--workers", "2"]) == 1
        assert "another server is listening there" in capsys.readouterr().err
        assert httpx.post(base + "/admin/reload", timeout=10).status_code == 403
        wrong = httpx.post(base + "/admin/reload", headers={"X-Admin-Key": "not the key"}, timeout=10)
        assert wrong.status_code == 403 and "not valid" in wrong.json()["error"]
        with Traffic(base, lines) as traffic:
            traffic.wait_for(6, since=0)
            save_step(b.model, run, 20)
            r = httpx.post(base + "/admin/reload", headers={"X-Admin-Key": key}, timeout=120)
            first_reload_done = time.monotonic()
            traffic.wait_for(6, since=first_reload_done)
            save_step(a.model, run, 30)
            sighup = time.monotonic()
            os.kill(proc.pid, signal.SIGHUP)  # the main process: every worker reloads
            report = wait_for_generation(base, 2)
            second_reload_done = time.monotonic()
            traffic.wait_for(6, since=second_reload_done)
        assert r.status_code == 200, r.text
        assert r.json()["reloaded"] == 2 and r.json()["checkpoint"] == str(RunDir(run).step(20))
        assert len(report["workers"]) == 2 and all(w["ready"] for w in report["workers"])
        info = httpx.get(base + "/info", timeout=5).json()
        assert info["models"][0]["checkpoint"] == str(RunDir(run).step(30))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        log = proc.stderr.read()
    assert key not in log  # the admin key is never logged
    records = traffic.records
    bad = [rec for rec in records if not answered_by(rec, by_a, by_b)]
    assert not bad, bad[:3]  # nothing lost (a failure is no table's answer), no mix of the two models
    in_flight = [rec for rec in records if rec[0] < first_reload_done < rec[3]]
    after_first = [rec for rec in records if first_reload_done < rec[0] and rec[3] < sighup]
    after_second = [rec for rec in records if rec[0] > second_reload_done]
    assert in_flight  # requests were flowing while the models were swapped
    assert len(after_first) >= 6 and all(answered_by(rec, by_a, by_b) == [1] for rec in after_first)
    assert len(after_second) >= 6 and all(answered_by(rec, by_a, by_b) == [0] for rec in after_second)


def test_one_budget_per_client_across_workers(models, copy_data, tmp_path):
    """--req-limit holds for the server, not per worker: 16 requests on 16 connections (the kernel spreads them over
    both workers) from one address within a minute, 4 allowed, whichever worker each reached."""
    a, _, lines, by_a, _ = models
    run = save_run(a.model, copy_data / "vocab.model", tmp_path / "run", step=10)
    with server(run, "--workers", "2", "--threads", "2", "--req-limit", "4") as (proc, base):
        answers = [httpx.post(base + "/translate", json={"q": lines[0]}, timeout=30) for _ in range(16)]
    assert sorted(r.status_code for r in answers) == [200] * 4 + [429] * 12
    assert all(r.json()["translatedText"] == by_a[lines[0]] for r in answers if r.status_code == 200)
    assert all(r.json()["limit"] == "req_limit" and int(r.headers["Retry-After"]) >= 1
               for r in answers if r.status_code == 429)


def test_reload_keeps_serving_when_the_checkpoint_is_bad(models, copy_data, tmp_path):
    """A reload that cannot load (a corrupt newest checkpoint) answers 500 and leaves the served model in place."""
    a, _, lines, by_a, _ = models
    (tmp_path / "admin.key").write_text("0123456789abcdef-test")
    run = save_run(a.model, copy_data / "vocab.model", tmp_path / "run", step=10)
    with server(run, "--workers", "1", "--admin-key", str(tmp_path / "admin.key")) as (proc, base):
        RunDir(run).step(20).write_bytes(b"not a checkpoint")
        r = httpx.post(base + "/admin/reload", headers={"X-Admin-Key": "0123456789abcdef-test"}, timeout=60)
        assert r.status_code == 500 and "goes on serving" in r.json()["error"]
        t = httpx.post(base + "/translate", json={"q": lines[0]}, timeout=30)
        assert t.json()["translatedText"] == by_a[lines[0]]


# ---------------------------------------------------------------------------------------------------------
# Clients that misbehave, on loopback against a real server.

READ_TIMEOUT_S = 3  # the server's --read-timeout: the margin within which the well-behaved requests must be answered


def raw(port: int, data: bytes = b"") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if data:
        s.sendall(data)
    return s


def response(s: socket.socket, timeout: float) -> tuple[int | None, bytes]:
    """(status, the whole response) read until the server closes the connection; status None: closed silently."""
    s.settimeout(timeout)
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return (int(data.split()[1]) if data else None), data


def pending(s: socket.socket) -> bool:
    """Whether the server has neither answered on `s` nor closed it."""
    return not select.select([s], [], [], 0)[0]


def dribble(s: socket.socket, data: bytes, stop: threading.Event) -> None:
    """Send `data` a byte every 50 ms until `stop` is set or the server closes the connection."""
    for byte in data:
        if stop.wait(0.05):
            return
        try:
            s.send(bytes([byte]))
        except OSError:
            return


HEAD = b"POST /translate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"


def test_misbehaving_clients(models, copy_data, tmp_path):
    """Slow and silent clients, all at once, are cut at the read timeout while others are answered meanwhile; heads
    and bodies over the limits are refused. No answer races the clock: the slow clients wait for a state (answered
    or closed) with generous deadlines, and the only timing checked is that nobody is cut before the read timeout."""
    a, _, lines, by_a, _ = models
    run = save_run(a.model, copy_data / "vocab.model", tmp_path / "run")
    with server(run, "--workers", "1", "--read-timeout", str(READ_TIMEOUT_S)) as (proc, base):
        port = int(base.rsplit(":", 1)[1])

        def translate_ok(k: int) -> None:
            r = httpx.post(base + "/translate", json={"q": lines[k]}, timeout=60)
            assert r.json()["translatedText"] == by_a[lines[k]]

        # a body dribbled byte by byte (and never whole: the dribbling outlasts any deadline), a head cut short, a
        # connection that never sends, 200 idle connections (half of them with half a head)
        opened = time.monotonic()
        body = (json.dumps({"q": lines[0]}) + " " * 10_000).encode()
        slow = raw(port, HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode())
        slow_head, silent = raw(port, b"POST /translate HTTP/1.1\r\nHo"), raw(port)
        idle = [raw(port, b"GET /health HTTP/1.1\r\n" if k % 2 else b"") for k in range(200)]
        stop = threading.Event()
        threading.Thread(target=dribble, args=(slow, body, stop), daemon=True).start()
        try:
            for k in range(1, 4):  # others are answered meanwhile: while every slow connection is open and unanswered
                translate_ok(k)
            assert all(pending(s) for s in [slow, slow_head, silent, *idle]), "cut before the read timeout"
            # each is cut at the read timeout (counted from the first byte: the dribbled bytes do not extend it),
            # with a 408 where something was sent, closed silently where nothing was
            status, data = response(slow, 60)
            assert status == 408 and b"read_timeout_s" in data and time.monotonic() - opened >= READ_TIMEOUT_S
        finally:
            stop.set()
        assert response(slow_head, 60)[0] == 408 and response(silent, 60)[0] is None
        assert [response(s, 60)[0] for s in idle] == [408 if k % 2 else None for k in range(200)]
        # a head over 16 KiB: 431 at once
        status, data = response(raw(port, HEAD + b"X-Big: " + b"a" * 20_000 + b"\r\n\r\n"), 60)
        assert status == 431 and b"max_head_bytes" in data
        # a legal request whose head and body come in one write, more than 16 KiB together: answered
        texts = [" ".join([lines[k % len(lines)]] * 30)[:900] for k in range(24)]
        body = json.dumps({"q": texts}).encode()
        status, data = response(raw(port, HEAD + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                                    .encode() + body), 120)
        assert len(body) > 16 * 1024 and status == 200, data[:300]
        # Content-Length over the limit: 413 though the body is never sent (a server waiting for it would answer 408)
        status, data = response(raw(port, HEAD + b"Content-Length: 100000000\r\n\r\n"), 60)
        assert status == 413 and b"max_body_bytes" in data
        # a chunked body that never ends: 413 at the limit, and the connection is closed
        big = raw(port, HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        chunk, sent = b"%x\r\n%s\r\n" % (65536, b" " * 65536), 0
        big.settimeout(60)
        try:
            while sent < 50_000_000:
                big.sendall(chunk)
                sent += len(chunk)
        except OSError:  # the server closed the connection (reset or broken pipe)
            pass
        assert sent < 20_000_000  # the server stopped reading near its limit (max_body_bytes, ~0.8 MB), far below 50 MB
        status, data = response(big, 60)
        assert status == 413 and b"max_body_bytes" in data
        translate_ok(0)
        assert httpx.get(base + "/health", timeout=60).json()["status"] == "ok"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        log = proc.stderr.read()
    assert "Traceback" not in log, log[-3000:]


def test_flags(tmp_path, capsys, monkeypatch):
    from aiayn.cli import main

    run = tmp_path / "run"
    run.mkdir()
    assert main(["serve", "--checkpoint", str(run), "--workers", "0"]) == 2
    assert "--workers: must be auto or an integer >= 1, got '0'" in capsys.readouterr().err
    # the key itself on the command line: refused, and not repeated
    assert main(["serve", "--checkpoint", str(run), "--admin-key", "a-literal-secret-key-xyz"]) == 2
    err = capsys.readouterr().err
    assert "takes a file holding the key" in err and "a-literal-secret-key-xyz" not in err
    (tmp_path / "short.key").write_text("short\n")
    assert main(["serve", "--checkpoint", str(run), "--admin-key", str(tmp_path / "short.key")]) == 2
    assert "fewer than 16 characters" in capsys.readouterr().err
    monkeypatch.delenv("AIAYN_TEST_ADMIN_KEY", raising=False)
    assert main(["serve", "--checkpoint", str(run), "--admin-key", "env:AIAYN_TEST_ADMIN_KEY"]) == 2
    assert "AIAYN_TEST_ADMIN_KEY is not set" in capsys.readouterr().err


def test_soak_script_briefly():
    """benchmarks/e2e/soak_server.py for a few seconds on its tiny random model: nothing lost or wrong."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.e2e.soak_server", "--checkpoint", "none", "--minutes",
                          "0.08", "--warmup-minutes", "0.04", "--clients", "4", "--sample-s", "1", "--workers", "1"],
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in out.stdout.splitlines()
            if line.startswith("| ")}
    sent, lost, wrong = (int(x) for x in rows["all"])
    assert sent > 20 and lost == 0 and wrong == 0, out.stdout
    assert int(rows["bad"][0]) > 0 and "growth" in out.stdout


def test_each_worker_keeps_freed_memory_unless_the_server_runs_with_low_memory(copy_data, tmp_path, monkeypatch):
    """A spawned worker starts with glibc's defaults: `aiayn serve` hands each one its choice (keep freed memory for
    reuse; not with --low-memory or AIAYN_LOW_MEMORY=1), and the worker applies it before loading its models."""
    import multiprocessing

    from aiayn.cli import build_parser
    from aiayn.cli.serve import serve_config
    from aiayn.serve import workers
    from aiayn.serve.board import WorkerBoard

    vocab = Vocab.load(copy_data / "vocab.model")
    run = save_run(tiny_model(len(vocab), eos_bias=1.0), copy_data / "vocab.model", tmp_path / "run")
    base = ["serve", "--checkpoint", str(run)]
    monkeypatch.delenv("AIAYN_LOW_MEMORY", raising=False)
    spec = serve_config(build_parser().parse_args(base))
    assert spec.keep_freed_memory
    assert not serve_config(build_parser().parse_args(["--low-memory", *base])).keep_freed_memory
    monkeypatch.setenv("AIAYN_LOW_MEMORY", "1")
    assert not serve_config(build_parser().parse_args(base)).keep_freed_memory
    applied = []
    monkeypatch.setattr(workers, "configure_process", lambda **kw: applied.append(kw))
    workers.build_server(spec, WorkerBoard(multiprocessing.get_context("spawn"), 1), 0)
    assert applied == [{"threads": spec.threads, "keep_freed_memory": True}]
