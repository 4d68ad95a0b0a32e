"""What the server does, seen from outside: Prometheus metrics at GET /metrics, one JSON access-log line a request.

    Metrics      the app's own CollectorRegistry (not prometheus_client's global one: every app counts on its own,
                 so tests and processes holding several apps don't clash): requests by route, method and status, a
                 latency histogram, sentences and source tokens per decoded batch, translated sentences and tokens
                 (counters: PromQL's rate() makes them per second), the queue's depth and the model thread's busy
                 seconds (taken from the batcher after each request and batch, and at each scrape)
    metrics_shared_by_workers()   for worker processes (aiayn.serve.workers): around starting them, so that each
                 worker's metrics go to files in one folder and any worker's /metrics answers for all of them
                 (prometheus_client's multiprocess mode; forget_worker(pid) when one has died)
    Observer     ASGI middleware, the outermost: times every request, counts it, writes its log line
    AccessLog    JSON lines on stderr or appended to a file: time, method, path, status, latency_ms, client, key
                 (aiayn.serve.access.key_id: a short hash, never the key), sentences, characters; `text` only when
                 asked (--log-text)
    RequestInfo  what the access gate learnt of a request (key id, texts) and hands the log line in the ASGI scope

docs/serving-operations.md lists the metrics and the log's fields.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Match

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SENTENCE_BUCKETS = tuple(2.0 ** i for i in range(11))  # 1 .. 1024
TOKEN_BUCKETS = tuple(2.0 ** i for i in range(4, 16))  # 16 .. 32768
SHARED_DIR = "PROMETHEUS_MULTIPROC_DIR"  # set: prometheus_client writes every metric to files in this folder


@dataclass
class RequestInfo:
    """Filled by the access gate, read by the log line: whose key, which texts."""

    key_id: str | None = None
    texts: tuple[str, ...] = ()


def request_info(scope) -> RequestInfo:
    """The request's RequestInfo (made on first use), kept in its ASGI scope."""
    return scope.setdefault("aiayn.request", RequestInfo())


@dataclass(frozen=True)
class ObserveConfig:
    """Where the access log goes (metrics are always on)."""

    access_log: Path | None = None  # a file the lines are appended to
    log_to_stderr: bool = False  # without a file: the lines on stderr (`aiayn serve` at --log-level info)
    log_text: bool = False  # the texts themselves in each line


class Metrics:
    """The app's metrics (module docstring); `observe_batch` is the batcher's on_batch hook."""

    def __init__(self, app) -> None:
        self.app, self._busy_seen = app, 0.0
        self.registry = r = CollectorRegistry()
        self.requests = Counter("aiayn_http_requests", "HTTP requests answered, by route, method and status",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("aiayn_http_request_duration_seconds", "Time from a request's arrival to the end "
                                 "of its answer, by route", ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_sentences = Histogram("aiayn_batch_sentences", "Sentences per decoded batch",
                                         buckets=SENTENCE_BUCKETS, registry=r)
        self.batch_tokens = Histogram("aiayn_batch_source_tokens", "Source tokens per decoded batch (EOS counted, "
                                      "padding not)", buckets=TOKEN_BUCKETS, registry=r)
        self.sentences = Counter("aiayn_translated_sentences", "Sentences translated", registry=r)
        self.tokens = Counter("aiayn_translated_tokens", "Tokens of the best translations produced", registry=r)
        self.queue = Gauge("aiayn_queue_depth_sentences", "Sentences queued or decoding (all workers together)",
                           multiprocess_mode="livesum", registry=r)
        self.busy = Counter("aiayn_model_busy_seconds", "Seconds the model thread spent decoding batches (rate(): "
                            "its busy share; with N workers, between 0 and N)", registry=r)

    def observe_batch(self, sentences: int, source_tokens: int, translated_tokens: int) -> None:
        self.batch_sentences.observe(sentences)
        self.batch_tokens.observe(source_tokens)
        self.sentences.inc(sentences)
        self.tokens.inc(translated_tokens)
        self.note_batcher()

    def note_batcher(self) -> None:
        """The queue's depth now, and the busy seconds added since last time (from the batcher's counters)."""
        models = self.app.state.server.models  # every model's batcher, summed
        self.queue.set(models.queued)
        busy = models.stats["model_busy_s"]
        self.busy.inc(busy - self._busy_seen if busy >= self._busy_seen else busy)  # less: a new batcher
        self._busy_seen = busy

    def exposition(self) -> bytes:
        """The text format: this app's metrics, or every worker's where they share a folder."""
        self.note_batcher()
        if SHARED_DIR not in os.environ:
            return generate_latest(self.registry)
        everyone = CollectorRegistry()
        multiprocess.MultiProcessCollector(everyone)
        return generate_latest(everyone)


@contextmanager
def metrics_shared_by_workers() -> Iterator[str]:
    """Around starting worker processes (in the main process, before any of them imports prometheus_client): their
    metrics go to files in a new temporary folder, removed at the end, and each worker's /metrics sums them all."""
    with tempfile.TemporaryDirectory(prefix="aiayn-metrics-") as folder:
        os.environ[SHARED_DIR] = folder
        try:
            yield folder
        finally:
            del os.environ[SHARED_DIR]


def forget_worker(pid: int) -> None:
    """A worker has died: its queue depth no longer counts (its counters do: what it did, it did)."""
    if SHARED_DIR in os.environ:
        multiprocess.mark_process_dead(pid)


class AccessLog:
    """One JSON object a line, on stderr (looked up at each write) or appended to a file: each line in one write,
    so that worker processes appending to the same file never interleave their lines."""

    def __init__(self, config: ObserveConfig) -> None:
        self.log_text = config.log_text
        self.enabled = config.access_log is not None or config.log_to_stderr
        self._fd = os.open(config.access_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640) \
            if config.access_log else None
        if self._fd is not None:
            weakref.finalize(self, os.close, self._fd)

    def write(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        if self._fd is not None:
            data = line.encode("utf-8")
            while data:
                data = data[os.write(self._fd, data):]
        else:
            sys.stderr.write(line)
            sys.stderr.flush()


def route_label(scope) -> str:
    """The route's path template (bounded label values), or "other" for paths no route serves."""
    route = scope.get("route")
    if route is None and "app" in scope:  # refused before routing: find the route it was meant for
        route = next((r for r in scope["app"].router.routes if r.matches(scope)[0] != Match.NONE), None)
    return getattr(route, "path", None) or "other"


class Observer:
    """The ASGI middleware: time, count and log every HTTP request."""

    def __init__(self, app, metrics: Metrics, log: AccessLog) -> None:
        self.app, self.metrics, self.log = app, metrics, log

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        info, start, status = request_info(scope), time.perf_counter(), 500

        async def send_noting_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            seconds = time.perf_counter() - start
            route = route_label(scope)
            self.metrics.requests.labels(route, scope["method"], str(status)).inc()
            self.metrics.latency.labels(route).observe(seconds)
            self.metrics.note_batcher()
            if self.log.enabled:
                self.log.write(self._record(scope, info, status, seconds))

    def _record(self, scope, info: RequestInfo, status: int, seconds: float) -> dict:
        record = {"time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                  "method": scope["method"], "path": scope["path"], "status": status,
                  "latency_ms": round(seconds * 1000, 1), "client": (scope.get("client") or [None])[0],
                  "key": info.key_id, "sentences": len(info.texts), "characters": sum(map(len, info.texts))}
        if self.log.log_text:
            record["text"] = list(info.texts)
        return record


async def metrics_route(request: Request) -> Response:
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def install_observability(app, config: ObserveConfig) -> Metrics:
    """GET /metrics, the batcher's on_batch hook, and the Observer as the outermost middleware (call it after
    every other add_middleware, so that it sees their refusals too)."""
    metrics = app.state.metrics = Metrics(app)
    log = AccessLog(config)
    if log.enabled:  # this line replaces uvicorn's own (set before uvicorn configures logging, which keeps it)
        logging.getLogger("uvicorn.access").disabled = True
    app.state.server.models.on_batch = metrics.observe_batch
    app.add_api_route("/metrics", metrics_route, methods=["GET"], include_in_schema=True,
                      response_class=PlainTextResponse,  # what OpenAPI says it answers: text, not JSON
                      summary="Prometheus metrics (text format): requests, latency, batches, queue, busy time")
    app.add_middleware(Observer, metrics=metrics, log=log)
    return metrics
