"""serve's observability (aiayn.serve.observe): /metrics in Prometheus' text format counts what the requests did
(by route and status, latency, batch sizes, translated sentences and tokens, queue, busy time), each app with its own
registry, and the access log writes one JSON line per request with its fields (the texts only when asked)."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
from helpers import tiny_model  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from serving import app_of, batcher_of  # noqa: E402

from aiayn.data import Vocab  # noqa: E402
from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.serve.observe import SHARED_DIR, ObserveConfig  # noqa: E402


@pytest.fixture(scope="module")
def setup(copy_data):
    vocab = Vocab.load(copy_data / "vocab.model")
    translator = Translator(tiny_model(len(vocab), eos_bias=1.0), vocab, SearchConfig(beam=2, max_len_b=10))
    return translator, (copy_data / "test.src.txt").read_text().splitlines()


def send(app, requests: list[tuple[str, str, object]], concurrent: bool = True) -> list[httpx.Response]:
    """(method, path, json) requests, all at once or one after another; the batcher closed after them."""
    async def go():
        transport = httpx.ASGITransport(app, client=("10.1.2.3", 4567))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            calls = [(lambda m=m, p=p, b=b: c.request(m, p, json=b)) for m, p, b in requests]
            out = await asyncio.gather(*(f() for f in calls)) if concurrent else [await f() for f in calls]
        await app.state.server.models.close()
        return out
    return asyncio.run(go())


def samples(text: str) -> dict[tuple, float]:
    """(sample name, sorted labels) -> value, through prometheus_client's own parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_what_happened(setup):
    translator, lines = setup
    app = app_of(translator)
    texts = [lines[0:3], lines[3:4], lines[4:9]]
    responses = send(app, [("POST", "/translate", {"q": t}) for t in texts] +
                     [("POST", "/translate", {"q": ""}), ("GET", "/nowhere", None), ("GET", "/health", None)])
    assert [r.status_code for r in responses] == [200, 200, 200, 422, 404, 200]
    scrape = send(app, [("GET", "/metrics", None)])[0]
    assert scrape.status_code == 200 and scrape.headers["content-type"].startswith("text/plain")
    got = samples(scrape.text)

    def requests(route, status, method="POST"):
        return got.get(("aiayn_http_requests_total", (("method", method), ("route", route), ("status", status))), 0)
    assert (requests("/translate", "200"), requests("/translate", "422")) == (3, 1)
    assert (requests("other", "404", "GET"), requests("/health", "200", "GET")) == (1, 1)
    assert got[("aiayn_http_request_duration_seconds_count", (("route", "/translate"),))] == 4

    sentences = [s for t in texts for s in t]
    source_tokens = sum(len(ids) for ids in translator.encode(sentences))
    translated_tokens = sum(len(hs[0].tokens) for hs in translator.translate_nbest(sentences))
    assert got[("aiayn_translated_sentences_total", ())] == len(sentences) == got[("aiayn_batch_sentences_sum", ())]
    assert got[("aiayn_batch_source_tokens_sum", ())] == source_tokens
    assert got[("aiayn_translated_tokens_total", ())] == translated_tokens
    batches = batcher_of(app).stats
    assert got[("aiayn_batch_sentences_count", ())] == batches["batches"] >= 1
    busy = got[("aiayn_model_busy_seconds_total", ())]
    assert busy == pytest.approx(batches["model_busy_s"]) and busy > 0
    assert got[("aiayn_queue_depth_sentences", ())] == 0


def test_each_app_has_its_own_registry(setup):
    translator, lines = setup
    first, second = app_of(translator), app_of(translator)
    send(first, [("POST", "/translate", {"q": lines[0]})] * 2)
    send(second, [("POST", "/translate", {"q": lines[1]})])
    key = ("aiayn_http_requests_total", (("method", "POST"), ("route", "/translate"), ("status", "200")))
    assert samples(send(first, [("GET", "/metrics", None)])[0].text)[key] == 2
    assert samples(send(second, [("GET", "/metrics", None)])[0].text)[key] == 1


def test_queue_depth_is_read_at_scrape_time(setup):
    translator, lines = setup
    app = app_of(translator)

    async def go():
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            batcher_of(app)._queued = 7  # as if 7 sentences were waiting
            text = (await c.get("/metrics")).text
            batcher_of(app)._queued = 0
            return text
    assert samples(asyncio.run(go()))[("aiayn_queue_depth_sentences", ())] == 7


@pytest.mark.parametrize("log_text", [False, True])
def test_access_log_lines_are_json_with_the_fields(setup, tmp_path, log_text):
    translator, lines = setup
    log = tmp_path / "access.jsonl"
    app = app_of(translator, observe=ObserveConfig(access_log=log, log_text=log_text))
    send(app, [("POST", "/translate", {"q": lines[:2]}), ("GET", "/health", None)], concurrent=False)
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2
    post, get = records
    fields = {"time", "method", "path", "status", "latency_ms", "client", "key", "sentences", "characters"}
    assert set(post) == fields | ({"text"} if log_text else set())
    assert (post["method"], post["path"], post["status"], post["client"], post["key"]) == \
        ("POST", "/translate", 200, "10.1.2.3", None)
    assert (post["sentences"], post["characters"]) == (2, len(lines[0]) + len(lines[1]))
    assert post["latency_ms"] >= 0 and post["time"].endswith("+00:00")
    assert (get["path"], get["status"], get["sentences"]) == ("/health", 200, 0)
    if log_text:
        assert post["text"] == lines[:2]
    else:
        assert lines[0] not in log.read_text(encoding="utf-8")


def test_access_log_on_stderr_only_when_asked(setup, capsys):
    translator, lines = setup
    send(app_of(translator), [("GET", "/health", None)])
    assert capsys.readouterr().err == ""
    send(app_of(translator, observe=ObserveConfig(log_to_stderr=True)), [("GET", "/health", None)])
    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line)["path"] == "/health"



WORKER = """
import asyncio, sys
import httpx
sys.path.insert(0, sys.argv[1])
from helpers import tiny_model
from aiayn.data import Vocab
from aiayn.decoding.search import SearchConfig
from serving import app_of
from aiayn.decoding.translator import Translator

vocab = Vocab.load(sys.argv[2] + "/vocab.model")
lines = open(sys.argv[2] + "/test.src.txt").read().splitlines()
app = app_of(Translator(tiny_model(len(vocab), eos_bias=1.0), vocab, SearchConfig(beam=2, max_len_b=10)))

async def go():
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c:
        for line in lines[:int(sys.argv[3])]:
            assert (await c.post("/translate", json={"q": line})).status_code == 200
    await app.state.server.models.close()
asyncio.run(go())
"""


def test_workers_sharing_a_folder_answer_for_all(setup, copy_data, tmp_path, monkeypatch):
    """Worker processes whose metrics share a folder (metrics_shared_by_workers): any /metrics sums them all."""
    import os
    import subprocess
    import sys

    from helpers import REPO

    env = {**os.environ, SHARED_DIR: str(tmp_path)}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(REPO / "tests"), str(copy_data), str(n)], env=env)
               for n in (2, 3)]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    translator, lines = setup
    app = app_of(translator)  # this process counts in memory; its /metrics reads the workers' files
    monkeypatch.setenv(SHARED_DIR, str(tmp_path))
    got = samples(app.state.metrics.exposition().decode())
    key = ("aiayn_http_requests_total", (("method", "POST"), ("route", "/translate"), ("status", "200")))
    assert got[key] == 5 and got[("aiayn_translated_sentences_total", ())] == 5
    assert got[("aiayn_batch_sentences_count", ())] >= 2
