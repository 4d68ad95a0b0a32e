"""Who may use the server, and how much: API keys, per-minute budgets, CORS (`install_access(app, config, ...)`).

    KeyFile      the --api-keys file: one key a line, optionally `req=N chars=N` (that key's budgets a minute),
                 `#` comments; read again when it changes (size or mtime, checked at most once a second): no restart
    Budgets      token buckets, one per key (or per client address while keys are off), for requests and characters:
                 each holds a minute's budget and refills continuously; an empty one -> 429 + Retry-After. The
                 buckets live in aiayn.serve.buckets' tables: shared memory across --workers (one budget a client)
    AccessGate   ASGI middleware in front of the routes. A POST (the routes that do work) has its body read here
                 (at most max_body_bytes + one chunk) to find `api_key` (JSON or form) and to count the texts, then
                 replayed to the route unchanged, so the route reads it as if nobody had; a key may also come as
                 `Authorization: Bearer KEY` or `X-API-Key: KEY`. GETs (the page, /health, /info, /docs) stay open;
                 /metrics needs the --metrics-key-file key where one is set, else any API key while keys are on;
                 /admin/ routes check their own key (aiayn.serve.reload).
    exposure_warning(host, keys_on)   the line `aiayn serve` prints when it binds beyond loopback without keys

A key never leaves this module: it is looked up by its SHA-256, and logs name it by `key_id` (a short hash).
Every refusal is JSON {"error": message, "limit"?, "max"?}, as the routes' errors are.
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
import json
import math
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from urllib.parse import parse_qsl

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse

from aiayn.errors import UsageError
from aiayn.serve.buckets import MINUTE, Bucket, LocalBuckets, SharedBuckets
from aiayn.serve.observe import request_info


@dataclass(frozen=True)
class AccessConfig:
    """Keys, budgets and CORS of a server (all off by default: a loopback server open to its own machine)."""

    api_keys: Path | None = None  # the keys file; None: no keys needed
    req_limit: int = 0  # requests a minute per key (per address while keys are off); 0: no limit
    char_limit: int = 0  # characters of text a minute, likewise
    cors_origins: tuple[str, ...] = ()  # origins whose pages may call the API ("*": any); none: no CORS headers
    metrics_key_file: Path | None = None  # a file holding the one key /metrics takes; None: /metrics as said above

    def __post_init__(self) -> None:
        if self.req_limit < 0 or self.char_limit < 0:
            raise ValueError(f"--req-limit and --char-limit must be >= 0 (0: no limit): {self}")


@dataclass(frozen=True)
class Key:
    """One key's identity for logs and its own budgets (None: the server's --req-limit / --char-limit)."""

    id: str
    req_limit: int | None = None
    char_limit: int | None = None


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_id(key: str) -> str:
    """How logs name a key: 10 hex digits of its SHA-256 (use long random keys, e.g. secrets.token_urlsafe(32))."""
    return "key-" + key_digest(key)[:10]


def parse_keys(text: str, where: str) -> dict[str, Key]:
    """digest -> Key for every line `KEY [req=N] [chars=N] [# comment]` (blank and `#` lines skipped)."""
    keys: dict[str, Key] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = list(itertools.takewhile(lambda word: not word.startswith("#"), line.split()))
        if not words:
            continue
        key, limits = words[0], {}
        for word in words[1:]:
            name, _, value = word.partition("=")
            if name not in ("req", "chars") or not value.isdigit():
                raise UsageError(f"{where} line {number}: {word!r} is not req=N or chars=N (a key has no spaces; "
                                 "the words after it are its own budgets a minute)")
            limits[name] = int(value)
        digest = key_digest(key)
        if digest in keys:
            raise UsageError(f"{where} line {number}: this key is on an earlier line too")
        keys[digest] = Key(key_id(key), limits.get("req"), limits.get("chars"))
    return keys


class KeyFile:
    """The keys of a file, read again when it changes; a file that turns unreadable or wrong keeps the last keys
    (and says so on stderr). An empty file at start is an error; emptied later, it refuses every key."""

    def __init__(self, path: Path, check_every_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.path, self.check_every_s, self.clock = Path(path), check_every_s, clock
        try:
            self._stamp, self.keys = self._read()
        except OSError as e:
            raise UsageError(f"cannot read the keys file {self.path}: {e.strerror}") from None
        if not self.keys:
            raise UsageError(f"the keys file {self.path} holds no key: write one key a line")
        self._checked = clock()

    def lookup(self, key: str) -> Key | None:
        self._reload_if_changed()
        return self.keys.get(key_digest(key))

    def _read(self) -> tuple[tuple, dict[str, Key]]:
        stat = self.path.stat()
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino), parse_keys(self.path.read_text("utf-8"), str(self.path))

    def _reload_if_changed(self) -> None:
        now = self.clock()
        if now - self._checked < self.check_every_s:
            return
        self._checked = now
        try:
            stat = self.path.stat()
            if (stat.st_mtime_ns, stat.st_size, stat.st_ino) != self._stamp:
                self._stamp, self.keys = self._read()
        except (OSError, UnicodeDecodeError, UsageError) as e:
            print(f"aiayn serve: the keys file was not read again ({e}); the keys read before stay in force",
                  file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Refusal:
    """A request turned away: status, message, and the limit it hit."""

    status: int
    message: str
    limit: str | None = None
    max: int | None = None
    retry_after_s: int | None = None

    def response(self) -> JSONResponse:
        extra = {"limit": self.limit, "max": self.max} if self.limit else {}
        headers = {"Retry-After": str(self.retry_after_s)} if self.retry_after_s else None
        return JSONResponse({"error": self.message, **extra}, status_code=self.status, headers=headers)


class Budgets:
    """Token buckets for requests and characters a minute, one pair per client (a key's id or an address).

    A bucket starts full (a minute's budget) and refills at budget/60 a second. `table` keeps them
    (aiayn.serve.buckets): LocalBuckets in one process (the default), SharedBuckets across worker processes."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, table: LocalBuckets | SharedBuckets | None = None):
        self.clock = clock
        self.table = table if table is not None else LocalBuckets()

    def charge(self, client: str, req_limit: int, char_limit: int, chars: int) -> Refusal | None:
        """Take one request and `chars` characters from the client's buckets, or say why not (limits 0: none)."""
        if not req_limit and not char_limit:
            return None
        if char_limit and chars > char_limit:
            return Refusal(413, f"the request has {chars} characters, more than this client may send in a minute "
                                f"(char_limit {char_limit})", "char_limit", char_limit)
        with self.table.locked():
            now = self.clock()
            where, b = self.table.find(client, now)
            b = b or Bucket(req_limit, char_limit, now)
            elapsed = now - b.stamp  # refilled up to now
            b.requests = min(req_limit, b.requests + elapsed * req_limit / MINUTE)
            b.chars = min(char_limit, b.chars + elapsed * char_limit / MINUTE)
            b.stamp = now
            waits = {}
            if req_limit and b.requests < 1:
                waits["req_limit"] = ((1 - b.requests) * MINUTE / req_limit, req_limit, "requests")
            if char_limit and b.chars < chars:
                waits["char_limit"] = ((chars - b.chars) * MINUTE / char_limit, char_limit, "characters")
            if not waits:
                b.requests -= 1
                b.chars -= chars
            self.table.put(where, b)
        if waits:
            limit, (wait, most, what) = max(waits.items(), key=lambda kv: kv[1][0])
            seconds = max(1, math.ceil(wait - 1e-6))  # 1e-6: rounding noise must not add a second
            return Refusal(429, f"over the budget of {most} {what} a minute ({limit}); retry after {seconds} s",
                           limit, most, seconds)
        return None


def client_address(scope) -> str:
    """The client's address for per-address budgets; IPv6 by its /64 (one host usually holds a whole /64)."""
    host = (scope.get("client") or ("unknown", 0))[0]
    if ":" not in host:  # IPv4 (or a name)
        return host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else host


def exposure_warning(host: str, keys_on: bool) -> str | None:
    """The warning for a server other machines can reach with no keys (None: loopback, or keys on)."""
    if keys_on or host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return None
    except ValueError:  # a host name other than localhost: it may resolve to anything
        pass
    return (f"aiayn serve: warning: --host {host} is reachable from other machines and there is no --api-keys "
            "file: anyone who can reach it can translate")


@dataclass
class BodyFields:
    """What the access gate reads from a body: the key and the texts (q)."""

    api_key: str | None = None
    texts: tuple[str, ...] = ()


def _form_fields(pairs) -> dict:
    """A form as a dict: a field given once is its value, a repeated one the list of its values (`q=a&q=b`)."""
    fields: dict = {}
    for name, value in pairs:
        fields[name] = [*fields[name], value] if isinstance(fields.get(name), list) else \
            [fields[name], value] if name in fields else value
    return fields


def body_fields(body: bytes, content_type: str) -> BodyFields:
    """api_key and q from a JSON, urlencoded or multipart body, read as the routes read them (anything else, or a
    broken body: neither; the route says what is wrong with it)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/x-www-form-urlencoded" and not body.lstrip().startswith(b"{"):  # not curl -d '{...}'
        fields = _form_fields(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    elif kind == "multipart/form-data":
        message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode("latin-1") +
                                                       b"\r\n\r\n" + body)
        parts = message.iter_parts() if message.is_multipart() else ()
        try:
            fields = _form_fields((part.get_param("name", header="content-disposition"), part.get_content())
                                  for part in parts if part.get_filename() is None)
        except (LookupError, ValueError):  # a part in an unknown charset or of a kind that has no content manager
            return BodyFields()
    else:
        try:
            fields = json.loads(body)
        except (ValueError, RecursionError):
            return BodyFields()
    if not isinstance(fields, dict):
        return BodyFields()
    key, q = fields.get("api_key"), fields.get("q")
    texts = [q] if isinstance(q, str) else q if isinstance(q, list) else []
    return BodyFields(key if isinstance(key, str) and key else None, tuple(t for t in texts if isinstance(t, str)))


async def peek_body(receive, max_bytes: int, length: str | None):
    """(body, complete, receive'): the body read up to max_bytes (one chunk more at most), and a receive that hands
    the route the same messages again, then the rest of the stream. complete: the whole body, within max_bytes."""
    messages, size, more = [], 0, True
    if not (length and length.isdigit() and int(length) > max_bytes):
        while more and size <= max_bytes:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":  # the client went away
                break
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
    complete = not more and size <= max_bytes and messages[-1]["type"] == "http.request"
    body = b"".join(m.get("body", b"") for m in messages) if complete else b""
    pending = deque(messages)

    async def replay():
        return pending.popleft() if pending else await receive()
    return body, complete, replay


def presented_key(headers: Headers, fields: BodyFields) -> str | None:
    """The key a request carries: Authorization: Bearer, X-API-Key, or api_key in the body, in that order."""
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return headers.get("x-api-key", "").strip() or fields.api_key


# routes that check a key of their own (--admin-key; /translate_file reads its key after the file and charges the
# file's text, aiayn.serve.files): neither API keys nor budgets here
OWN_KEYS = ("/admin/", "/translate_file")
MISSING_KEY = ("this server needs an API key: send it as api_key in the body (LibreTranslate's way), or as an "
               "Authorization: Bearer KEY or X-API-Key: KEY header")


class AccessGate:
    """The ASGI middleware: keys and budgets for POSTs, a key for /metrics, bodies replayed (module docstring)."""

    def __init__(self, app, config: AccessConfig, max_body_bytes: int, keys: KeyFile | None,
                 metrics_keys: KeyFile | None, budgets: Budgets):
        self.app, self.config, self.max_body_bytes = app, config, max_body_bytes
        self.keys, self.metrics_keys, self.budgets = keys, metrics_keys, budgets

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refusal = None
        if scope["path"] == "/metrics":
            refusal = self._check_metrics(Headers(scope=scope))
        elif scope["method"] == "POST" and not scope["path"].startswith(OWN_KEYS):
            refusal, receive = await self._check_work(scope, receive)
        if refusal is not None:
            return await refusal.response()(scope, receive, send)
        await self.app(scope, receive, send)

    def _check_metrics(self, headers: Headers) -> Refusal | None:
        keys = self.metrics_keys or self.keys
        if keys is None:
            return None
        key = presented_key(headers, BodyFields())
        if key is None or keys.lookup(key) is None:
            return Refusal(403, "/metrics needs its key: send it as an Authorization: Bearer KEY header"
                           if key is None else "the key is not valid for /metrics")
        return None

    async def _check_work(self, scope, receive):
        """(refusal or None, the receive the route must use) for a POST."""
        headers, info = Headers(scope=scope), request_info(scope)
        body, complete, receive = await peek_body(receive, self.max_body_bytes, headers.get("content-length"))
        fields = body_fields(body, headers.get("content-type", "")) if complete else BodyFields()
        info.texts = fields.texts
        req_limit, char_limit = self.config.req_limit, self.config.char_limit
        if self.keys is None:
            if not req_limit and not char_limit:
                return None, receive
            client = "address " + client_address(scope)
        else:
            key = presented_key(headers, fields)
            if key is None and not complete:
                return Refusal(413, f"the body is larger than max_body_bytes {self.max_body_bytes}",
                               "max_body_bytes", self.max_body_bytes), receive
            found = None if key is None else self.keys.lookup(key)
            if found is None:
                return Refusal(403, MISSING_KEY if key is None else "the API key is not valid"), receive
            info.key_id = client = found.id
            req_limit = req_limit if found.req_limit is None else found.req_limit
            char_limit = char_limit if found.char_limit is None else found.char_limit
        chars = sum(len(t) for t in fields.texts)
        return self.budgets.charge(client, req_limit, char_limit, chars), receive


def install_access(app, config: AccessConfig, max_body_bytes: int, clock: Callable[[], float] = time.monotonic,
                   buckets: LocalBuckets | SharedBuckets | None = None):
    """Put the access gate (and CORS, where origins are named, outside it: preflights and refusals get CORS
    headers too) in front of the app's routes; returns the gate's KeyFile (None: no keys). buckets: where the
    budgets live (SharedBuckets: one budget per client across worker processes; default: this process's own)."""
    keys = KeyFile(config.api_keys, clock=clock) if config.api_keys else None
    metrics_keys = KeyFile(config.metrics_key_file, clock=clock) if config.metrics_key_file else None
    app.add_middleware(AccessGate, config=config, max_body_bytes=max_body_bytes, keys=keys,
                       metrics_keys=metrics_keys, budgets=Budgets(clock, buckets))
    if config.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type", "Authorization", "X-API-Key"],
                           expose_headers=["Retry-After"], max_age=600)
    return keys
