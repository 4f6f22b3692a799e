"""A lean HTTP/1.1 server on an asyncio protocol: what the loopback chat server listens with.

Benchmarks drive the loopback server at thousands of requests a second on the same two cores as
the client they measure; aiohttp's web server spent about 0.4 ms of CPU a request there, enough
to make the server the bottleneck. This one parses a request line, headers and a body
(Content-Length or chunked), calls one handler per request (or takes a reply made at once from
``fast`` and holds it back on a timer), and keeps the connection alive, at a small fraction of
that. It serves 127.0.0.1 only, for tests and benchmarks: no TLS, no
pipelining beyond answering requests in order, no request streaming.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import cast

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024


@dataclass
class Request:
    method: str
    path: str  # without the query string
    headers: dict[str, str]  # names in lower case
    body: bytes


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Reply]]
# A reply made at once: the reply, the seconds to hold it back, and what to call once it is sent
Ready = tuple[Reply, float, Callable[[], None] | None]
# Answers what it can at once (None: the handler answers), without a task of its own per request
FastHandler = Callable[[Request], Ready | None]


def _head(reply: Reply, keep_alive: bool) -> bytes:
    try:
        reason = HTTPStatus(reply.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [
        f"HTTP/1.1 {reply.status} {reason}",
        f"Content-Type: {reply.content_type}",
        f"Content-Length: {len(reply.body)}",
        "Connection: keep-alive" if keep_alive else "Connection: close",
        *(f"{k}: {v}" for k, v in reply.headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _bug(exc: Exception) -> Reply:
    return Reply(500, f"{type(exc).__name__}: {exc}".encode(), "text/plain")


class _BadRequest(Exception):
    pass


class _Protocol(asyncio.Protocol):
    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False  # a request is being answered: the next waits in buf
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None  # a ready reply held back
        self.sent: Callable[[], None] | None = None  # that reply's callback

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio.Transport; they have its methods
        self.transport = cast(asyncio.Transport, transport)
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None
        if self.task is not None:
            self.task.cancel()  # e.g. a hung answer whose client gave up
        self._drop_held()

    def _drop_held(self) -> None:
        """Cancel a held-back reply; its callback still runs, as a cancelled handler's
        ``finally`` does."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
            self._sent()

    def _sent(self) -> None:
        sent, self.sent = self.sent, None
        if sent is not None:
            sent()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        try:
            parsed = self._parse()
        except _BadRequest as exc:
            self._write(Reply(400, str(exc).encode(), "text/plain"), keep_alive=False)
            return
        if parsed is None:
            return
        request, keep_alive = parsed
        self.busy = True
        loop = asyncio.get_running_loop()
        fast = self.server.fast
        try:
            ready = fast(request) if fast is not None else None
        except Exception as exc:  # the handler's bug, answered as _answer answers it
            ready = _bug(exc), 0.0, None
        if ready is None:
            self.task = loop.create_task(self._answer(request, keep_alive))
            return
        reply, delay, self.sent = ready
        # a timer, not a task sleeping: at thousands of requests a second the task, its
        # coroutines and its sleep were a fifth of this server's CPU
        self.timer = loop.call_later(max(delay, 0.0), self._deliver, reply, keep_alive)

    def _deliver(self, reply: Reply, keep_alive: bool) -> None:
        self.timer = None
        self._write(reply, keep_alive)
        self._sent()
        self._ready_for_next(keep_alive)

    def _parse(self) -> tuple[Request, bool] | None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                raise _BadRequest("request head too large")
            return None
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            raise _BadRequest(f"bad request line {lines[0][:100]!r}") from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise _BadRequest(f"bad header line {line[:100]!r}")
            headers[name.strip().lower()] = value.strip()
        start = end + 4
        if "chunked" in headers.get("transfer-encoding", "").lower():
            decoded = _dechunk(self.buf, start)
            if decoded is None:
                return None
            body, consumed = decoded
        else:
            try:
                length = int(headers.get("content-length", "0") or 0)
            except ValueError:
                raise _BadRequest("bad Content-Length") from None
            if length > MAX_BODY:
                raise _BadRequest("request body too large")
            if len(self.buf) < start + length:
                return None
            body, consumed = bytes(self.buf[start : start + length]), start + length
        del self.buf[:consumed]
        connection = headers.get("connection", "").lower()
        keep_alive = connection != "close" and (version != "HTTP/1.0" or connection == "keep-alive")
        return Request(method, target.split("?", 1)[0], headers, body), keep_alive

    async def _answer(self, request: Request, keep_alive: bool) -> None:
        try:
            reply = await self.server.handler(request)
        except asyncio.CancelledError:
            return
        except Exception as exc:  # the handler's bug: answered, not a dropped connection
            reply = _bug(exc)
        self._write(reply, keep_alive)
        self.task = None
        self._ready_for_next(keep_alive)

    def _ready_for_next(self, keep_alive: bool) -> None:
        self.busy = False
        if keep_alive and self.transport is not None and self.buf:
            self._next()

    def _write(self, reply: Reply, keep_alive: bool) -> None:
        if self.transport is None:
            return
        self.transport.write(_head(reply, keep_alive) + reply.body)
        if not keep_alive:
            self.transport.close()


def _dechunk(buf: bytearray, start: int) -> tuple[bytes, int] | None:
    """A chunked body from ``buf[start:]`` and the bytes it used, or None while incomplete."""
    body = bytearray()
    pos = start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        try:
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        except ValueError:
            raise _BadRequest("bad chunk size") from None
        if size == 0:
            trailer_end = buf.find(b"\r\n\r\n", eol)
            if buf[eol : eol + 4] == b"\r\n\r\n":
                return bytes(body), eol + 4
            if trailer_end < 0:
                return None
            return bytes(body), trailer_end + 4
        if len(buf) < eol + 2 + size + 2:
            return None
        body += buf[eol + 2 : eol + 2 + size]
        if len(body) > MAX_BODY:
            raise _BadRequest("request body too large")
        pos = eol + 2 + size + 2


class HTTPServer:
    """``await HTTPServer(handler).start(host, port)``; ``await server.cleanup()`` closes it.

    ``fast``, where given, sees each request first and may answer it at once (``Ready``)."""

    def __init__(self, handler: Handler, fast: FastHandler | None = None) -> None:
        self.handler = handler
        self.fast = fast
        self.connections: set[_Protocol] = set()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Protocol(self), host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def cleanup(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if conn.task is not None:
                conn.task.cancel()
            conn._drop_held()
            if conn.transport is not None:
                conn.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
