"""Clients that misbehave, bounded in time and size at the connection (docs/serving-access.md "Clients that
misbehave").

uvicorn bounds idle keep-alive connections (timeout_keep_alive), the number of connections (limit_concurrency: more
get 503) and the size h11 buffers (h11_max_incomplete_event_size), but not how long a request may take to arrive:
a client sending its head or body a byte at a time, or opening a connection and sending nothing, holds it forever.
`guarded_protocol(read_timeout_s, max_connections)` is uvicorn's h11 protocol with checks of its own:

    read timeout   a request must have arrived whole (head and body) within read_timeout_s of its first byte (of the
                   connection's opening, for its first request): else 408 (when something was sent) and the
                   connection is closed; a request being answered has arrived, so decoding time never counts
    head size      a head over MAX_HEAD_BYTES gets 431 at once, without reading the rest
    not HTTP       a request line or head h11 cannot read gets 400, as JSON like every other error
    upgrades       an Upgrade header (WebSocket, h2c) is ignored: the server has no WebSocket route, and uvicorn's
                   refusal of one is an empty 403; the request is answered as plain HTTP (JSON 404, 405, ...)
    connections    a request while max_connections connections are open (or as many requests are being answered)
                   gets 503 + Retry-After, as JSON (uvicorn's limit_concurrency, which answers in plain text)

Bodies: a Content-Length over the route's limit gets 413 before any of the body is read, and a chunked body is cut
at the limit (aiayn.serve.bodies); a connection whose body was not read whole is closed after the answer: its
sending side at once, and the whole of it LINGER_S later or after LINGER_BYTES more (what the client sends meanwhile
is thrown away: closing with unread data would reset the connection, and the client could lose the answer).
"""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEAD_BYTES = 16 * 1024  # request line and headers; h11's own default bound
KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this long (uvicorn's timeout_keep_alive)
LINGER_S = 2.0  # how long an answered connection whose body was not read whole is drained before it is closed
LINGER_BYTES = 1024 * 1024  # and how much of it at most


def guarded_protocol(read_timeout_s: float, max_connections: int | None = None) -> type[H11Protocol]:
    """The protocol class to give uvicorn.Config(http=...) (with limit_concurrency None: the class bounds them)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"read_timeout_s": read_timeout_s,
                                                               "max_connections": max_connections})


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a read timeout and a head size limit (see the module docstring)."""

    read_timeout_s = 10.0
    max_connections: int | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.max_connections is not None:
            self.app = self._bounded(self.app)

    def _bounded(self, app):
        """`app` behind the bound on connections and requests in flight (uvicorn's rule: this connection counts,
        and this request's task is already among the tasks)."""
        most = self.max_connections

        async def bounded(scope, receive, send):
            if scope["type"] == "http" and (len(self.connections) >= most or len(self.tasks) > most):
                body = json.dumps({"error": f"the server has {most} connections open (max_connections); retry "
                                            "later", "limit": "max_connections", "max": most}).encode()
                await send({"type": "http.response.start", "status": 503, "headers": [
                    (b"content-type", b"application/json"), (b"retry-after", b"1"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
            await app(scope, receive, send)
        return bounded

    def _should_upgrade(self) -> bool:
        """Never: the request is answered as plain HTTP, without uvicorn's warnings (a client could fill the log)."""
        return False

    def send_400_response(self, msg: str) -> None:
        """A request line or head that is not HTTP: uvicorn's 400, as JSON."""
        body = json.dumps({"error": "the request is not HTTP/1.1 that can be read (its request line or headers "
                                    "are malformed)"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                      h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_bytes = 0  # bytes of the head being read
        self._tail = b""  # its last 3 bytes: the blank line that ends it may come split across reads
        self._received = False  # whether the request being read has sent anything
        self._read_timer = None
        self._lingering = False
        self._drained = 0  # bytes thrown away while lingering
        self._arm()  # a connection that sends nothing is closed after read_timeout_s too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._drained += len(data)
            if self._drained > LINGER_BYTES:
                self.transport.close()
            return
        if self.conn.their_state is h11.IDLE:  # reading a request's head (data may hold the start of its body)
            self._received = True
            joined = self._tail + data
            end = joined.find(b"\r\n\r\n")
            self._head_bytes += len(data) if end < 0 else end + 4 - len(self._tail)
            self._tail = joined[-3:]
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(431, f"the request's head (request line and headers) is larger than {MAX_HEAD_BYTES} "
                                  "bytes", limit="max_head_bytes", max=MAX_HEAD_BYTES)
                return
            if self._read_timer is None:
                self._arm()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._head_bytes, self._tail = 0, b""
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):  # arrived whole (or the connection is ending)
            self._disarm()
            self._received = False

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # answered before its body arrived whole (a 413, say): the rest of the body is not read
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._disarm()
            self._lingering = True
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)

    def _arm(self) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(self.read_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        if self._received and (self.cycle is None or self.cycle.response_complete or not self.cycle.response_started):
            self._refuse(408, f"the request did not arrive whole within {self.read_timeout_s:g} s",
                         limit="read_timeout_s", max=self.read_timeout_s)
        else:
            self.transport.close()

    def _refuse(self, status: int, message: str, **extra) -> None:
        """Answer `status` with a JSON error, outside h11 (it may not have seen a request yet), and close."""
        self._disarm()
        body = json.dumps({"error": message, **extra}).encode()
        reason = {408: "Request Timeout", 431: "Request Header Fields Too Large"}[status]
        self.transport.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nconnection: close\r\n"
                             f"content-length: {len(body)}\r\n\r\n".encode() + body)
        if self.cycle is not None and not self.cycle.response_complete:  # the app stops waiting for the body
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.close()
