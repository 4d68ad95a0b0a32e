"""serve's access control (aiayn.serve.access): API keys from body, form or header, the keys file read again when it
changes, per-minute budgets per key and per address (429 + Retry-After), bodies replayed to the route unchanged and
still bounded, CORS only for named origins, the warning for a server exposed without keys, keys kept out of logs."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from helpers import tiny_model  # noqa: E402
from serving import app_of  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from aiayn.data import Vocab  # noqa: E402
from aiayn.decoding.search import SearchConfig  # noqa: E402
from aiayn.decoding.translator import Translator  # noqa: E402
from aiayn.errors import UsageError  # noqa: E402
from aiayn.serve.access import (  # noqa: E402
    AccessConfig,
    Budgets,
    KeyFile,
    exposure_warning,
    install_access,
    key_id,
    parse_keys,
)
from aiayn.serve.buckets import LocalBuckets, SharedBuckets  # noqa: E402
from aiayn.serve.observe import ObserveConfig  # noqa: E402

ALICE, BOB = "alice-3f9c2e7d1b8a4c6e", "bob-8d1e5a2c9f7b3e40"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


async def _echo(request):
    """What the route sees: the body's bytes exactly (the gate must hand them on untouched)."""
    body = await request.body()
    return JSONResponse({"body": body.decode("latin-1")})


async def _ok(request):
    return JSONResponse({"ok": True})


def echo_app(config: AccessConfig, clock=None, max_body_bytes: int = 1000) -> Starlette:
    app = Starlette(routes=[Route("/work", _echo, methods=["POST"]), Route("/health", _ok),
                            Route("/metrics", _ok)])
    install_access(app, config, max_body_bytes, clock=clock or Clock())
    return app


def send(app, *requests: dict, client: tuple[str, int] = ("10.0.0.1", 5000)) -> list[httpx.Response]:
    """Each request's httpx keyword arguments (method, url, json, data, files, headers, content), sent in order."""
    async def go():
        transport = httpx.ASGITransport(app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            out = []
            for r in requests:
                request = c.build_request(**{"method": "POST", **r})
                request.read()  # so that tests can compare what was sent with what the route saw
                out.append(await c.send(request))
        if server := getattr(app.state, "server", None):  # the batcher ends on the loop it started on
            await server.models.close()
        return out
    return asyncio.run(asyncio.wait_for(go(), 30))  # a route left waiting for its body fails, not hangs


@pytest.fixture
def keys_file(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text(f"# the team's keys\n{ALICE}   # Alice, default budgets\n\n  {BOB} req=2 chars=50\n")
    return path


def test_keys_file_lines_comments_and_per_key_budgets(keys_file):
    keys = parse_keys(keys_file.read_text(), "keys.txt")
    assert sorted((k.id, k.req_limit, k.char_limit) for k in keys.values()) == \
        sorted([(key_id(ALICE), None, None), (key_id(BOB), 2, 50)])
    assert ALICE not in key_id(ALICE) and key_id(ALICE) != key_id(BOB)
    with pytest.raises(UsageError, match="line 2: 'req=many' is not req=N"):
        parse_keys(f"{ALICE}\n{BOB} req=many\n", "keys.txt")
    with pytest.raises(UsageError, match="line 2: this key is on an earlier line"):
        parse_keys(f"{ALICE}\n{ALICE} req=3\n", "keys.txt")
    empty = keys_file.with_name("empty.txt")
    empty.write_text("# nobody yet\n")
    with pytest.raises(UsageError, match="holds no key"):
        KeyFile(empty)


@pytest.mark.parametrize("request_kwargs", [
    {"json": {"q": "hi", "api_key": ALICE}},
    {"data": {"q": "hi", "api_key": ALICE}},  # a form, as LibreTranslate's Python client sends
    {"files": {"q": (None, "hi"), "api_key": (None, ALICE)}},  # multipart/form-data
    {"json": {"q": "hi"}, "headers": {"Authorization": f"Bearer {ALICE}"}},
    {"json": {"q": "hi"}, "headers": {"X-API-Key": ALICE}},
], ids=["json", "form", "multipart", "bearer", "x-api-key"])
def test_a_valid_key_passes_and_the_route_reads_the_same_body(keys_file, request_kwargs):
    app = echo_app(AccessConfig(api_keys=keys_file))
    missing, wrong, valid = send(app, {"url": "/work", "json": {"q": "hi"}},
                                 {"url": "/work", "json": {"q": "hi", "api_key": "guess"}},
                                 {"url": "/work", **request_kwargs})
    assert missing.status_code == 403 and "api_key" in missing.json()["error"]
    assert wrong.status_code == 403 and wrong.json() == {"error": "the API key is not valid"}
    assert valid.status_code == 200
    sent = valid.request.content.decode("latin-1")
    assert sent and valid.json()["body"] == sent  # replayed byte for byte


def test_gets_stay_open_and_metrics_takes_its_own_key(keys_file, tmp_path):
    scrape = tmp_path / "metrics.token"
    scrape.write_text("prometheus-7c1d9e2f\n")
    app = echo_app(AccessConfig(api_keys=keys_file, metrics_key_file=scrape))
    health, bare, user, own = send(app, {"method": "GET", "url": "/health"}, {"method": "GET", "url": "/metrics"},
                                   {"method": "GET", "url": "/metrics", "headers": {"X-API-Key": ALICE}},
                                   {"method": "GET", "url": "/metrics",
                                    "headers": {"Authorization": "Bearer prometheus-7c1d9e2f"}})
    assert health.status_code == 200
    assert (bare.status_code, user.status_code, own.status_code) == (403, 403, 200)
    keys_only = echo_app(AccessConfig(api_keys=keys_file))  # no metrics key: any API key reads /metrics
    assert [r.status_code for r in send(keys_only, {"method": "GET", "url": "/metrics"},
                                        {"method": "GET", "url": "/metrics", "headers": {"X-API-Key": BOB}})] \
        == [403, 200]
    assert send(echo_app(AccessConfig()), {"method": "GET", "url": "/metrics"})[0].status_code == 200


def test_the_keys_file_is_read_again_when_it_changes(keys_file, capsys):
    clock = Clock()
    app = echo_app(AccessConfig(api_keys=keys_file), clock)
    carol = "carol-5b2e8f1a7c3d9e64"
    as_carol = {"url": "/work", "json": {"q": "hi"}, "headers": {"X-API-Key": carol}}
    as_alice = {"url": "/work", "json": {"q": "hi"}, "headers": {"X-API-Key": ALICE}}
    assert send(app, as_carol)[0].status_code == 403
    keys_file.write_text(f"{carol}\n")
    os.utime(keys_file, ns=(os.stat(keys_file).st_atime_ns, os.stat(keys_file).st_mtime_ns + 10**9))
    assert [r.status_code for r in send(app, as_carol, as_alice)] == [403, 200]  # checked at most once a second
    clock.now += 1.5
    assert [r.status_code for r in send(app, as_carol, as_alice)] == [200, 403]  # no restart: Alice is out
    keys_file.write_text(f"{carol} req=lots\n")  # a broken file keeps the keys in force
    clock.now += 1.5
    assert send(app, as_carol)[0].status_code == 200
    assert "not read again" in capsys.readouterr().err


@pytest.fixture(params=["local", "shared"])
def table(request):
    """Each budget test runs on both bucket tables: one process's, and the shared memory workers use."""
    return LocalBuckets() if request.param == "local" else SharedBuckets(multiprocessing.get_context("spawn"))


def test_budgets_refill_a_minute_s_worth_a_minute(table):
    clock = Clock()
    budgets = Budgets(clock, table)
    assert [budgets.charge("a", 3, 0, 0) for _ in range(3)] == [None] * 3
    refusal = budgets.charge("a", 3, 0, 0)
    assert (refusal.status, refusal.limit, refusal.max, refusal.retry_after_s) == (429, "req_limit", 3, 20)
    assert budgets.charge("b", 3, 0, 0) is None  # another client has its own bucket
    clock.now += 19
    assert budgets.charge("a", 3, 0, 0).retry_after_s == 1
    clock.now += 1
    assert budgets.charge("a", 3, 0, 0) is None
    assert budgets.charge("c", 0, 100, 60) is None
    refusal = budgets.charge("c", 0, 100, 60)  # 40 left: 20 characters short, at 100/60 a second -> 12 s
    assert (refusal.status, refusal.limit, refusal.retry_after_s) == (429, "char_limit", 12)
    assert budgets.charge("c", 0, 100, 101).status == 413  # could never pass
    clock.now += 60  # a minute idle: full again, whatever the table did with the bucket
    assert [budgets.charge("a", 3, 0, 0) for _ in range(4)][-1].status == 429


def _charge_in_another_process(table, client, n):
    budgets = Budgets(table=table)
    sys.exit(0 if all(budgets.charge(client, 5, 0, 0) is None for _ in range(n)) else 1)


def test_shared_buckets_are_one_budget_across_processes():
    """What one worker takes from a client's budget, another worker sees (a spawned process stands in for one)."""
    ctx = multiprocessing.get_context("spawn")
    table = SharedBuckets(ctx)
    worker = ctx.Process(target=_charge_in_another_process, args=(table, "10.0.0.7", 3))  # as serve's workers get it
    worker.start()
    worker.join(300)
    assert worker.exitcode == 0
    budgets = Budgets(table=table)
    assert [budgets.charge("10.0.0.7", 5, 0, 0) is None for _ in range(3)] == [True, True, False]
    assert budgets.charge("10.0.0.8", 5, 0, 0) is None  # another client: its own bucket


def test_shared_buckets_reuse_idle_slots_and_take_over_the_stalest_when_full():
    clock = Clock()
    table = SharedBuckets(multiprocessing.get_context("spawn"), slots=8)
    budgets = Budgets(clock, table)
    for i in range(8):  # 8 clients fill the table, each with one request of 2 left
        clock.now += 1
        assert budgets.charge(f"c{i}", 2, 0, 0) is None
    assert len(table) == 8
    assert budgets.charge("c7", 2, 0, 0) is None and budgets.charge("c7", 2, 0, 0).status == 429  # c7 kept its own
    clock.now += 1
    assert budgets.charge("new", 2, 0, 0) is None  # a ninth client takes over the stalest bucket (c0's)...
    assert len(table) == 8 and budgets.charge("c0", 2, 0, 0) is None  # ...so c0 starts again full
    clock.now += 61  # all idle a minute: every slot free again, no client over budget
    assert all(budgets.charge(f"d{i}", 1, 0, 0) is None for i in range(20)) and len(table) == 8


def test_429_with_retry_after_per_key_and_per_address(keys_file):
    by_key = echo_app(AccessConfig(api_keys=keys_file, req_limit=3))
    alice = {"url": "/work", "json": {"q": "hi", "api_key": ALICE}}
    bob = {"url": "/work", "json": {"q": "hi", "api_key": BOB}}  # req=2 of his own
    statuses = [r.status_code for r in send(by_key, alice, alice, alice, bob, bob, bob, alice)]
    assert statuses == [200, 200, 200, 200, 200, 429, 429]
    refused = send(by_key, alice)[0]
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["limit"] == "req_limit" and refused.json()["max"] == 3
    # the same key from another address shares its budget
    assert send(by_key, bob, client=("10.9.9.9", 1))[0].status_code == 429

    by_address = echo_app(AccessConfig(char_limit=10))
    five = {"url": "/work", "json": {"q": ["abc", "de"]}}
    assert [r.status_code for r in send(by_address, five, five, five)] == [200, 200, 429]
    assert send(by_address, five, client=("10.0.0.2", 1))[0].status_code == 200
    assert send(by_address, five, client=("2001:db8::1", 1))[0].status_code == 200
    assert send(by_address, five, five, client=("2001:db8::2", 1))[1].status_code == 429  # one /64, one bucket


@pytest.mark.parametrize("how", ["urlencoded", "multipart"])
def test_a_repeated_form_field_counts_every_text(how):
    """q=abc&q=de is the list ["abc", "de"] to the routes, so the character budget counts all of it (5)."""
    app = echo_app(AccessConfig(char_limit=10))
    def form(*texts):
        return {"url": "/work", "data": {"q": list(texts)}} if how == "urlencoded" else \
            {"url": "/work", "files": [("q", (None, t)) for t in texts]}
    request, fewer = form("abc", "de"), form("abc")
    assert [r.status_code for r in send(app, request, request, request)] == [200, 200, 429]  # 5 + 5 + 5 > 10
    fresh = echo_app(AccessConfig(char_limit=10))
    assert [r.status_code for r in send(fresh, fewer, fewer, fewer)] == [200, 200, 200]  # 3 + 3 + 3 <= 10


def test_bodies_stay_bounded_with_keys_on(keys_file):
    """A body over max_body_bytes is not read in full to look for a key: 413, after about max_body_bytes."""
    app = echo_app(AccessConfig(api_keys=keys_file), max_body_bytes=1000)
    big = {"q": "x" * 2000, "api_key": ALICE}
    assert send(app, {"url": "/work", "json": big})[0].status_code == 413
    assert send(app, {"url": "/work", "json": big, "headers": {"X-API-Key": ALICE}})[0].status_code == 200  # echo's

    received, sent = [], []

    async def endless_body():
        received.append(1)
        return {"type": "http.request", "body": b"x" * 100, "more_body": True}

    async def collect(message):
        sent.append(message)
    scope = {"type": "http", "method": "POST", "path": "/work", "headers": [], "query_string": b"",
             "client": ("10.0.0.1", 1), "server": ("test", 80), "scheme": "http", "root_path": "", "app": app}
    gate = app.build_middleware_stack()
    asyncio.run(gate(scope, endless_body, collect))
    assert sent[0]["status"] == 413 and len(received) <= 11


@pytest.fixture(scope="module")
def translator(copy_data):
    vocab = Vocab.load(copy_data / "vocab.model")
    return Translator(tiny_model(len(vocab), eos_bias=1.0), vocab, SearchConfig(beam=2, max_len_b=10)), \
        (copy_data / "test.src.txt").read_text().splitlines()


def test_keys_with_the_real_routes_and_never_in_logs(translator, keys_file, tmp_path, capsys, caplog):
    model, lines = translator
    log = tmp_path / "access.jsonl"
    app = app_of(model, access=AccessConfig(api_keys=keys_file),
                     observe=ObserveConfig(access_log=log, log_to_stderr=True, log_text=True))
    ok, header, missing, wrong = send(app, {"url": "/translate", "json": {"q": lines[0], "api_key": ALICE}},
                                      {"url": "/translate", "json": {"q": lines[1]},
                                       "headers": {"Authorization": f"Bearer {BOB}"}},
                                      {"url": "/translate", "json": {"q": lines[0]}},
                                      {"url": "/translate", "json": {"q": lines[0], "api_key": ALICE + "x"}})
    assert ok.status_code == 200 and ok.json()["translatedText"] == model.translate(lines[:1])[0]
    assert header.status_code == 200 and (missing.status_code, wrong.status_code) == (403, 403)
    written = log.read_text()
    records = [json.loads(line) for line in written.splitlines()]
    assert [(r["status"], r["key"]) for r in records] == \
        [(200, key_id(ALICE)), (200, key_id(BOB)), (403, None), (403, None)]
    assert records[0]["text"] == [lines[0]]
    captured = capsys.readouterr()
    everything = written + captured.out + captured.err + caplog.text + "".join(r.text for r in (ok, missing, wrong))
    assert key_id(ALICE) in everything
    for key in (ALICE, BOB, ALICE + "x"):
        assert key not in everything


def test_cors_headers_only_for_named_origins(keys_file):
    page = {"Origin": "https://page.example"}
    closed = echo_app(AccessConfig())
    assert "access-control-allow-origin" not in send(closed, {"method": "GET", "url": "/health", "headers": page})[
        0].headers
    app = echo_app(AccessConfig(api_keys=keys_file, cors_origins=("https://page.example",)))
    preflight, refused, other = send(
        app, {"method": "OPTIONS", "url": "/work", "headers": {**page, "Access-Control-Request-Method": "POST",
                                                               "Access-Control-Request-Headers": "X-API-Key"}},
        {"url": "/work", "json": {"q": "hi"}, "headers": page},
        {"method": "GET", "url": "/health", "headers": {"Origin": "https://elsewhere.example"}})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == page["Origin"]
    assert "x-api-key" in preflight.headers["access-control-allow-headers"].lower()
    assert refused.status_code == 403 and refused.headers["access-control-allow-origin"] == page["Origin"]
    assert "access-control-allow-origin" not in other.headers


@pytest.mark.parametrize("host, keys_on, warns", [
    ("127.0.0.1", False, False), ("localhost", False, False), ("::1", False, False), ("127.0.0.2", False, False),
    ("0.0.0.0", False, True), ("::", False, True), ("192.168.1.5", False, True), ("myhost.example", False, True),
    ("0.0.0.0", True, False),
])
def test_warning_when_exposed_without_keys(host, keys_on, warns):
    line = exposure_warning(host, keys_on)
    assert (line is not None) == warns
    if warns:
        assert host in line and "--api-keys" in line and "\n" not in line


def test_the_command_s_flags_make_the_configs(keys_file, tmp_path, capsys):
    from aiayn.cli import build_parser
    from aiayn.cli.serve import access_options

    def options(*flags):
        return access_options(build_parser().parse_args(["serve", "--checkpoint", "run", *flags]))
    got = options("--api-keys", str(keys_file), "--req-limit", "30", "--char-limit", "5000", "--cors-origins",
                  "https://a.example, http://b.example:8080", "--access-log", str(tmp_path / "a.log"),
                  "--log-text", "--host", "0.0.0.0")
    assert got["access"] == AccessConfig(api_keys=keys_file, req_limit=30, char_limit=5000,
                                         cors_origins=("https://a.example", "http://b.example:8080"))
    assert got["observe"] == ObserveConfig(access_log=tmp_path / "a.log", log_to_stderr=True, log_text=True)
    assert capsys.readouterr().err == ""  # keys on: no warning
    assert options("--host", "0.0.0.0", "--log-level", "warning")["observe"].log_to_stderr is False
    assert "0.0.0.0 is reachable" in capsys.readouterr().err
    with pytest.raises(UsageError, match="not an origin"):
        options("--cors-origins", "https://a.example/")
    with pytest.raises(UsageError, match="cannot read the keys file"):
        options("--api-keys", str(tmp_path / "missing.txt"))
    with pytest.raises(SystemExit):
        options("--req-limit", "-1")


@pytest.mark.parametrize("content_type, body", [
    ("multipart/form-data; boundary=xx", b'--xx\r\nContent-Disposition: form-data; name="q"\r\n'
                                         b'Content-Type: text/plain; charset=bogus\r\n\r\nhi\r\n--xx--\r\n'),
    ("multipart/form-data; boundary=xx", b'--xx\r\nContent-Type: multipart/mixed; boundary=yy\r\n'
                                         b'Content-Disposition: form-data; name="q"\r\n\r\n'
                                         b'--yy\r\n\r\nz\r\n--yy--\r\n--xx--'),
    ("application/json", b'{"q": ["a", 1'), ("application/json", b"\xff\xfe{"), ("text/plain", b"[" * 100_000),
])
def test_bodies_the_gate_cannot_read_reach_the_route_unchanged(keys_file, content_type, body):
    app = echo_app(AccessConfig(api_keys=keys_file, char_limit=100), max_body_bytes=200_000)
    answer = send(app, {"url": "/work", "content": body, "headers": {"Content-Type": content_type,
                                                                       "X-API-Key": ALICE}})[0]
    assert answer.status_code == 200 and answer.json()["body"] == body.decode("latin-1")


def test_the_page_asks_for_a_key_and_sends_it(translator, keys_file):
    """With --api-keys the page shows its key field (/info says a key is required); without a key the server's 403
    is shown; once a key is typed, translations come (sent as X-API-Key, never in the page's URL)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from serving import ServerThread, browser

    model, lines = translator
    driver = browser()
    try:
        with ServerThread(app_of(model, access=AccessConfig(api_keys=keys_file))) as base:
            driver.get(base + "/")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: d.find_element(By.ID, "api-key").is_displayed())
            driver.find_element(By.ID, "src").send_keys(lines[0])
            wait.until(lambda d: d.find_element(By.ID, "status").text == "HTTP 403")
            assert "needs an API key" in driver.find_element(By.ID, "translation").text
            driver.find_element(By.ID, "api-key").send_keys(ALICE)
            wait.until(lambda d: d.find_element(By.ID, "translation").get_attribute("data-src") == lines[0])
            assert driver.find_element(By.ID, "translation").text == model.translate(lines[:1])[0]
            assert ALICE not in driver.current_url
        with ServerThread(app_of(model)) as base:  # no keys: no key field
            driver.get(base + "/")
            wait.until(lambda d: d.find_element(By.ID, "model-info").text)
            assert not driver.find_element(By.ID, "api-key").is_displayed()
    finally:
        driver.quit()
