"""serve: every error of every route is LibreTranslate's JSON {"error": ...}, on a server of one model and one of
several alike: overload 503 + Retry-After, time-outs 504, a request larger than the whole queue 413, JSON nested
deeper than anyone writes 400, an option a model's engine does not have 422 in the API's words, a fault of the
server's own a JSON 500; and at the connection, a request line that is not HTTP a JSON 400 (a real server)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager

import httpx
import pytest

pytest.importorskip("fastapi")
from serving import REPO, SEARCH, call, free_port, save_run, tiny_model, wait_until_listening  # noqa: E402

from aiayn.data import Vocab  # noqa: E402
from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.serve import BatchConfig, LanguagePair, Models, create_app  # noqa: E402
from aiayn.serve.engines import Loaded  # noqa: E402

ONE = [("en", "de")]
MANY = [("en", "de"), ("de", "en"), ("en", "es")]  # de -> es goes through en
SHAPES = {"one": ONE, "many": MANY}


@pytest.fixture(scope="module")
def vocab(copy_data):
    return Vocab.load(copy_data / "vocab.model")


@pytest.fixture(scope="module")
def lines(copy_data):
    return (copy_data / "test.src.txt").read_text().splitlines()


def app_with(vocab, pairs, batching: BatchConfig | None = None, **config):
    """An app around in-memory tiny models, one per pair, each loaded."""
    from aiayn.serve.config import ServeConfig

    models = Models.from_sources([(LanguagePair(*pair), Loaded(Translator(tiny_model(len(vocab), seed=n,
                                                                                     eos_bias=1.0), vocab, SEARCH)))
                                  for n, pair in enumerate(pairs)], batching)
    models.preload()
    return create_app(models, ServeConfig(**config))


def is_json_error(r: httpx.Response) -> bool:
    return r.headers["content-type"] == "application/json" and isinstance(r.json().get("error"), str) and \
        bool(r.json()["error"])


def nested(depth: int) -> bytes:
    """A JSON object whose q is `depth` lists within each other: 2 bytes a level."""
    return b'{"q": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("budgets", [False, True], ids=["open", "budgets"])
@pytest.mark.parametrize("shape", SHAPES)
def test_json_nested_3000_levels_is_a_400_on_every_route(vocab, shape, budgets):
    """6 KB of brackets: deeper than Python's JSON parser recurses; a 400 naming the depth, not a RecursionError;
    with a budget of characters a minute too (the access gate reads the body first, to count its characters)."""
    from aiayn.serve.access import AccessConfig

    app = app_with(vocab, SHAPES[shape], access=AccessConfig(char_limit=10_000) if budgets else AccessConfig())
    body = nested(3000)
    assert len(body) < 7000
    got = call(app, [("POST", path, body) for path in ("/translate", "/detect", "/attention")])
    for r in got:
        assert r.status_code == 400 and is_json_error(r) and "nested more than" in r.json()["error"], r.text


@pytest.mark.parametrize("shape", SHAPES)
def test_more_sentences_than_the_queue_holds_is_a_413(vocab, lines, shape):
    """At the default limits, 64 texts of 111 sentences each ("Go home. " x 111, 999 characters): 7,104 sentences,
    more than max_queue 1024 ever holds: 413 (retrying could never succeed), never a 500 nor a 503. Through a pivot
    (the many-model server's de -> es) too."""
    app = app_with(vocab, SHAPES[shape])
    texts = ["Go home. " * 111] * 64
    source, target = SHAPES[shape][-1]
    asked = [("POST", "/translate", {"q": texts, "source": source, "target": target})]
    if shape == "many":
        asked.append(("POST", "/translate", {"q": texts, "source": "de", "target": "es"}))
    for r in call(app, asked):
        assert r.status_code == 413 and is_json_error(r), r.text
        assert r.json()["limit"] == "max_queue" and r.json()["max"] == 1024
        assert "7104 sentences" in r.json()["error"]


@pytest.mark.parametrize("shape", SHAPES)
def test_overload_is_a_json_503_with_retry_after(vocab, lines, shape):
    """max_queue 4, 10 requests at once (3 sentences each, several pairs on the many-model server): each answer a
    200 or a JSON 503 with Retry-After, at least one of each."""
    pairs = SHAPES[shape]
    app = app_with(vocab, pairs, BatchConfig(max_queue=4))
    text = "Go home. " * 3  # three sentences (aiayn.serve.segments)
    asked = [("POST", "/translate", {"q": text, "source": pairs[k % len(pairs)][0],
                                     "target": pairs[k % len(pairs)][1]}) for k in range(10)]
    got = call(app, asked)
    statuses = sorted({r.status_code for r in got})
    assert statuses == [200, 503], [r.text for r in got]
    for r in got:
        if r.status_code == 503:
            assert is_json_error(r) and r.headers["retry-after"] == "1" and r.json()["limit"] == "max_queue"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_timeout_is_a_json_504(vocab, lines, shape):
    """timeout_s 0.1 and 64 sentences: 504 naming the limit (the models are slower than that on 64 sentences)."""
    pairs = SHAPES[shape]
    app = app_with(vocab, pairs, BatchConfig(timeout_s=0.1))
    texts = [f"{lines[k % len(lines)]}." for k in range(64)]
    (r,) = call(app, [("POST", "/translate", {"q": texts, "source": pairs[-1][0], "target": pairs[-1][1],
                                              "alternatives": 3})])
    assert r.status_code == 504 and is_json_error(r) and r.json()["limit"] == "timeout_s", r.text


@pytest.mark.parametrize("shape", SHAPES)
def test_a_fault_of_the_server_is_a_json_500(vocab, lines, shape):
    """An exception nobody expected (here: the model thread fails) is a JSON 500 that says the log has the rest."""
    pairs = SHAPES[shape]
    app = app_with(vocab, pairs)
    for entry in app.state.server.models.entries.values():
        entry.translator.search_ids = lambda *a, **k: 1 / 0

    async def go():
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            r = await client.post("/translate", json={"q": lines[0], "source": pairs[0][0], "target": pairs[0][1]})
        await app.state.server.models.close()
        return r
    r = asyncio.run(go())
    assert r.status_code == 500 and is_json_error(r), r.text
    assert "ZeroDivisionError" in r.json()["error"]


def raw(port: int, data: bytes) -> tuple[int, dict, bytes]:
    """Send `data` on a new connection; the status, headers and body of the answer (read until the server
    closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
    return int(status_line.split()[1]), headers, body


@pytest.fixture(scope="module")
def argos_package(vocab, tmp_path_factory):
    """An Argos package (aiayn export --to argos) of a tiny random model, en -> de."""
    pytest.importorskip("ctranslate2")
    pytest.importorskip("spacy")
    from aiayn.export.argos import export_argos

    folder = tmp_path_factory.mktemp("argos")
    return export_argos(tiny_model(len(vocab), seed=7, eos_bias=1.0), vocab, folder / "translate-en_de-1_0.argosmodel",
                        "en", "de")


@pytest.mark.parametrize("shape", SHAPES)
def test_sampling_an_argos_pair_is_a_422_in_the_api_s_words(vocab, lines, argos_package, shape):
    """"sampling": true for a pair an Argos package serves (CTranslate2 decodes it): a 422 naming the field, the
    pair and what to send, no command-line flag; on the many-model server, through a pivot whose second leg is the
    package too (refused before the first leg decodes), while the aiayn run's pair samples."""
    from aiayn.serve.engines import ModelSource

    power = SearchConfig(beam=4, max_len_b=10, lp="power", alpha=1.0)
    catalogue = [(LanguagePair("en", "de"), ModelSource(str(argos_package), power))]
    if shape == "many":
        catalogue.append((LanguagePair("es", "en"), Loaded(Translator(tiny_model(len(vocab), seed=3, eos_bias=1.0),
                                                                      vocab, power))))
    models = Models.from_sources(catalogue)
    models.preload()
    app = create_app(models)
    asked = [("POST", "/translate", {"q": lines[0], "source": "en", "target": "de", "sampling": True}),
             ("POST", "/translate", {"q": lines[0], "source": "en", "target": "de", "sampling": False}),
             ("POST", "/translate", {"q": lines[0], "source": "en", "target": "de"})]
    if shape == "many":
        asked += [("POST", "/translate", {"q": lines[0], "source": "es", "target": "de", "sampling": True}),
                  ("POST", "/translate", {"q": lines[0], "source": "es", "target": "en", "sampling": True})]
    refused, plain, default, *rest = call(app, asked)
    for r in [refused, *rest[:1]]:
        assert r.status_code == 422 and is_json_error(r), r.text
        said = r.json()["error"]
        assert said.startswith("sampling: the en->de model is an Argos package") and "--" not in said, said
    assert plain.status_code == default.status_code == 200 and plain.json() == default.json()
    if shape == "many":
        assert rest[1].status_code == 200, rest[1].text
        assert models.entry(LanguagePair("es", "en")).batcher.stats["requests"] == 1  # the pivot's leg never ran


@contextmanager
def aiayn_serve(runs: dict, *flags: str):
    """`aiayn serve --workers 1` of `runs` ({(src, tgt): run}) as a process on a free loopback port: its base URL
    and port once it answers /health; then SIGTERM, and its log (stderr)."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    given = [a for (src, tgt), run in runs.items() for a in ("--checkpoint", f"{src}:{tgt}={run}")]
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", *given, "--port", str(port), "--workers", "1",
                             "--beam", "2", "--max-len-b", "10", "--log-level", "warning", *flags], env=env,
                            stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    log = []
    try:
        wait_until_listening(proc, base, 120)
        yield base, port, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            log.append(proc.communicate(timeout=60)[1])
        except subprocess.TimeoutExpired:
            proc.kill()
            log.append(proc.communicate()[1])


@pytest.mark.parametrize("shape", SHAPES)
def test_a_real_server_answers_json_at_every_layer(vocab, copy_data, tmp_path, shape):
    """`aiayn serve --max-queue 4 --workers 1` as a process, of one model or of several (one of which cannot load):
    a request line that is not HTTP, a WebSocket upgrade, a route that does not exist, a method it does not take, the
    documented 500 of a model that cannot load, and 10 concurrent requests (each a 200 or a JSON 503 with
    Retry-After): every error JSON {"error": ...}; nothing in the log is a traceback."""
    runs = {pair: save_run(tiny_model(len(vocab), seed=n, eos_bias=1.0), copy_data / "vocab.model",
                           tmp_path / "-".join(pair)) for n, pair in enumerate(SHAPES[shape])}
    if shape == "many":
        broken = tmp_path / "en-it"
        (broken / "checkpoints").mkdir(parents=True)
        (broken / "checkpoints" / "step_00000010.safetensors").write_bytes(b"not a checkpoint")
        (broken / "vocab.model").write_bytes((copy_data / "vocab.model").read_bytes())
        runs["en", "it"] = broken
    with aiayn_serve(runs, "--max-queue", "4") as (base, port, log):
        for garbage in (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"HELLO\r\n\r\n",
                        b"GET / HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n"):
            status, headers, body = raw(port, garbage)
            assert status == 400 and headers["content-type"] == "application/json", (garbage, body)
            assert "not HTTP/1.1" in json.loads(body)["error"]
        upgrade = (b"GET /translate HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\n"
                   b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        status, headers, body = raw(port, upgrade)  # no WebSocket route: answered as plain HTTP (uvicorn: empty 403)
        assert status == 405 and headers["content-type"] == "application/json", body
        missing = httpx.get(base + "/nowhere", timeout=60)
        wrong = httpx.get(base + "/translate", timeout=60)
        assert (missing.status_code, wrong.status_code) == (404, 405) and is_json_error(missing) and \
            is_json_error(wrong)
        if shape == "many":
            r = httpx.post(base + "/translate", json={"q": "x", "source": "en", "target": "it"}, timeout=60)
            assert r.status_code == 500 and is_json_error(r) and "could not be loaded" in r.json()["error"]

        async def crowd():
            pairs = SHAPES[shape]
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                return await asyncio.gather(*(client.post("/translate", json={
                    "q": "Go home. " * 3, "source": pairs[k % len(pairs)][0], "target": pairs[k % len(pairs)][1]})
                    for k in range(10)))
        got = asyncio.run(crowd())
        assert {r.status_code for r in got} == {200, 503}, [r.text for r in got]
        assert all(is_json_error(r) and r.headers["retry-after"] == "1" for r in got if r.status_code == 503)
    assert "Traceback" not in log[0], log[0][-3000:]


def test_a_client_gone_mid_body_is_no_fault_of_the_server(vocab):
    """A client that goes away before its body arrived whole (or is cut off by the read timeout): a 400 JSON, not a
    500 (whose traceback a client could repeat into the log)."""
    app = app_with(vocab, ONE)
    sent = []

    async def go():
        arrived = iter([{"type": "http.request", "body": b'{"q": "al', "more_body": True}, {"type": "http.disconnect"}])

        async def receive():
            return next(arrived)

        async def send(message):
            sent.append(message)
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
                 "path": "/translate", "raw_path": b"/translate", "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json"), (b"content-length", b"100")],
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80)}
        await app(scope, receive, send)
        await app.state.server.models.close()
    asyncio.run(go())
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    assert start["status"] == 400 and (b"content-type", b"application/json") in start["headers"]
    assert "went away" in json.loads(body)["error"]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sampling_field_without_sampling_is_a_422_in_the_api_s_words(vocab, lines, shape):
    """top_k, top_p, temperature or seed without "sampling": true: a 422 naming the fields and what to send (no
    command-line flag), before anything is decoded; with "sampling": true they are read."""
    pairs = SHAPES[shape]
    app = app_with(vocab, pairs)
    base = {"q": lines[0], "source": pairs[-1][0], "target": pairs[-1][1]}
    one, two, sampled = call(app, [("POST", "/translate", {**base, "top_k": 3}),
                                   ("POST", "/translate", {**base, "top_p": 0.5, "seed": 2}),
                                   ("POST", "/translate", {**base, "top_k": 3, "seed": 2, "sampling": True})])
    assert one.status_code == 422 and one.json()["error"] == ('top_k: only sampling reads it; send "sampling": true '
                                                              "as well, or leave it out"), one.text
    assert two.status_code == 422 and two.json()["error"].startswith("top_p, seed: only sampling reads them")
    assert sampled.status_code == 200, sampled.text
    assert app.state.server.models.stats["requests"] == 1
