"""What the serve tests share: a translator of the copy task, in-process calls, a real `aiayn serve` process, a
uvicorn thread and a headless browser (test_serve.py, test_serve_api.py, test_serve_fuzz.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from helpers import REPO, browser, save_run, tiny_model  # noqa: F401 (browser: the serve tests import it here)

from aiayn.data import Vocab
from aiayn.decoding.search import SearchConfig
from aiayn.decoding.translator import Translator
from aiayn.serve import BatchConfig, LanguagePair, Models, create_app
from aiayn.serve.config import ServeConfig
from aiayn.serve.engines import Loaded

SEARCH = SearchConfig(beam=4, max_len_b=10)


def copy_translator(copy_data: Path) -> tuple[Translator, list[str]]:
    """A tiny random model over the copy task's vocabulary (its 40 test lines get 40 different translations), and
    those lines."""
    vocab = Vocab.load(copy_data / "vocab.model")
    lines = (copy_data / "test.src.txt").read_text().splitlines()
    return Translator(tiny_model(len(vocab), eos_bias=1.0), vocab, SEARCH), lines


def app_of(translator: Translator, pair: LanguagePair | None = None, batching: BatchConfig | None = None,
           checkpoint: str = "(in memory)", **config):
    """The app of a server whose catalogue holds `translator` alone (translating `pair`, default en -> de), loaded;
    config: ServeConfig's other fields (limits, access, observe)."""
    models = Models.from_sources([(pair or LanguagePair(), Loaded(translator, checkpoint))], batching)
    models.preload()
    return create_app(models, ServeConfig(**config))


def batcher_of(app):
    """The batcher of an app of one model (app_of)."""
    (entry,) = app.state.server.models.entries.values()
    return entry.batcher


class Send(dict):
    """A request body given as httpx's keyword arguments: Send(data={...}) a form, Send(files=...) multipart,
    Send(content=b"...", headers={...}) raw bytes."""


def call(app, requests: list[tuple[str, str, object]]) -> list[httpx.Response]:
    """Send (method, path, body) requests to `app` all at once (ASGI, no network); then drain its batcher. body:
    None, JSON (a dict or list), bytes (sent as application/json) or Send(...)."""
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            def send(method, path, body):
                if isinstance(body, Send):
                    return client.request(method, path, **body)
                if isinstance(body, bytes):
                    return client.request(method, path, content=body, headers={"Content-Type": "application/json"})
                return client.request(method, path, json=body)
            out = await asyncio.gather(*(send(*r) for r in requests))
        await app.state.server.models.close()
        return out
    return asyncio.run(go())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_listening(proc: subprocess.Popen, base: str, seconds: float = 120) -> None:
    """Return once the server process at `base` answers /health; fail if it exits or `seconds` pass first."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(base + "/health", timeout=1)
            return
        except httpx.TransportError:
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)


async def until(condition: Callable[[], bool], seconds: float = 60) -> None:
    """Return once condition() holds (checked on the event loop every 10 ms); fail if `seconds` pass first. A step
    that needs a state waits for it instead of sleeping a guess: on a loaded machine guesses run short."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the awaited state never came"
        await asyncio.sleep(0.01)


@contextmanager
def serve_process(translator: Translator, vocab_model: Path, folder: Path, *flags: str):
    """`aiayn serve` of `translator`'s model (saved as a run in `folder`) on a free loopback port, with `flags`:
    (the process, its base URL) once it answers /health; killed at the end if still running."""
    run = save_run(translator.model, vocab_model, folder / "run")
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--checkpoint", str(run), "--port", str(port),
                             "--log-level", "warning", *flags], env=env, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_listening(proc, base, 60)
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


class ServerThread:
    """uvicorn serving `app` on a free loopback port, in a thread (signals stay with the main thread)."""

    def __init__(self, app):
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)


