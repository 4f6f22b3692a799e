"""A lean HTTP/1.1 client for ``oai:``: POST a JSON body, read the answer, keep the connection.

aiohttp's ClientSession does a great deal per request that a sweep against one OpenAI-compatible
server never uses (cookies, redirects, tracing signals, proxies, a request and a response object
of many parts): measured, most of the client CPU of an ``oai:`` call. This client writes the
request in one buffer and parses the response on an ``asyncio.Protocol``: status line, headers,
then a ``Content-Length`` body, a chunked one, or one that ends with the connection. Connections
are kept alive and reused per (scheme, host, port); ``https`` uses the default TLS context.

A request sent on a reused connection that the server had closed meanwhile (it answers nothing,
the connection ends) is sent once more on a new connection, as HTTP clients do for idle
connections; any other failure is a ``ConnectionError`` (``OSError``) for the caller to map.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

_MAX_HEAD = 64 * 1024  # bytes of status line and headers
_MAX_BODY = 256 * 1024 * 1024


class HTTPProtocolError(ConnectionError):
    """The server's answer is not HTTP/1.1 as this client reads it."""


class _Stale(ConnectionError):
    """A reused connection ended before any byte of the answer: safe to send again."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated header keeps its last value
    body: bytes


class _Connection(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self._waiter: asyncio.Future[Response] | None = None
        self._buf = bytearray()
        self._got_bytes = False
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self._headers: dict[str, str] = {}
        self._length: int | None = None  # Content-Length; None: chunked or until close
        self._chunked = False
        self._until_close = False
        self._keep_alive = True
        self._head_done = False
        self._body = bytearray()

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self._fail(HTTPProtocolError("data from the server with no request waiting"))
            return
        self._got_bytes = True
        self._buf += data
        try:
            self._parse()
        except HTTPProtocolError as exc:
            self._fail(exc)

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._head_done and self._until_close:
            waiter.set_result(self._response())
        elif not self._got_bytes and self.reused:
            waiter.set_exception(_Stale("connection closed by the server while idle"))
        else:
            reason = f": {exc}" if exc else ""
            waiter.set_exception(
                ConnectionError(f"server closed the connection before the answer ended{reason}")
            )

    # -- requests ---------------------------------------------------------------------------------

    async def request(self, data: bytes) -> Response:
        assert self.transport is not None
        self._waiter = self.loop.create_future()
        self._buf.clear()
        self._got_bytes = False
        self._reset()
        self.transport.write(data)
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()

    def _response(self) -> Response:
        return Response(self._status, self._headers, bytes(self._body))

    def _parse(self) -> None:
        buf = self._buf
        if not self._head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise HTTPProtocolError("response headers too long")
                return
            self._head(bytes(buf[:end]))
            del buf[: end + 4]
            if 100 <= self._status < 200:  # 100 Continue and the like: the answer follows
                self._reset()
                self._parse()
                return
        if self._chunked:
            if self._chunks():
                self._done()
            return
        self._body += buf
        buf.clear()
        if len(self._body) > _MAX_BODY:
            raise HTTPProtocolError("response body too long")
        if self._length is not None and len(self._body) >= self._length:
            if len(self._body) > self._length:
                raise HTTPProtocolError("more bytes than Content-Length")
            self._done()

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HTTPProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self._status = int(parts[1])
        headers = self._headers
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise HTTPProtocolError(f"malformed header line: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        self._head_done = True
        connection = headers.get("connection", "").lower()
        self._keep_alive = (
            "keep-alive" in connection if parts[0] == "HTTP/1.0" else "close" not in connection
        )
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = True
        elif "content-length" in headers:
            try:
                self._length = int(headers["content-length"])
            except ValueError:
                raise HTTPProtocolError("malformed Content-Length") from None
        elif self._status in (204, 304):
            self._length = 0
        else:
            self._until_close = True
            self._keep_alive = False

    def _chunks(self) -> bool:
        """Move whole chunks from the buffer to the body; True once the last chunk is in."""
        buf = self._buf
        while True:
            eol = buf.find(b"\r\n")
            if eol < 0:
                return False
            size_text = bytes(buf[:eol]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HTTPProtocolError("malformed chunk size") from None
            if size == 0:
                end = buf.find(b"\r\n\r\n", eol)  # trailers, if any, end with an empty line
                if end < 0:
                    return False
                del buf[: end + 4]
                return True
            if len(buf) < eol + 2 + size + 2:
                return False
            self._body += buf[eol + 2 : eol + 2 + size]
            del buf[: eol + 2 + size + 2]
            if len(self._body) > _MAX_BODY:
                raise HTTPProtocolError("response body too long")

    def _done(self) -> None:
        waiter = self._waiter
        if self._buf:  # bytes past the answer: the connection cannot be trusted
            self._keep_alive = False
        if not self._keep_alive:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(self._response())


def _target(url: str) -> tuple[tuple[str, str, int], str]:
    """(scheme, host, port) and the request's first lines (``POST path`` and ``Host``)."""
    split = urlsplit(url)
    scheme = split.scheme.lower()
    if scheme not in ("http", "https") or not split.hostname:
        raise ConnectionError(f"unsupported URL {url!r} (expected http:// or https://)")
    host = split.hostname
    port = split.port or (443 if scheme == "https" else 80)
    path = (split.path or "/") + (f"?{split.query}" if split.query else "")
    netloc = host if split.port is None else f"{host}:{split.port}"
    if ":" in host:  # an IPv6 literal goes in brackets in the Host header
        netloc = f"[{host}]" + (f":{split.port}" if split.port is not None else "")
    return (scheme, host, port), f"POST {path} HTTP/1.1\r\nHost: {netloc}"


class HTTPClient:
    """Keep-alive connections per server, at most ``limit`` open at once."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self.headers: dict[str, str] = {}  # sent with every request (a request's own win)
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        self._slots: asyncio.Semaphore | None = None
        self._ssl: ssl.SSLContext | None = None
        # url -> its connection key and request line with Host: every call of a sweep posts
        # to one or two URLs, and parsing each again was a percent of the engine's CPU
        self._targets: dict[str, tuple[tuple[str, str, int], str]] = {}

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> Response:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= 1024:
                self._targets.clear()
            target = self._targets[url] = _target(url)
        key, head = target
        lines = [head, f"Content-Length: {len(body)}"]
        merged = {**self.headers, **headers} if self.headers else headers
        lines += [f"{k}: {v}" for k, v in merged.items()]
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            for _ in range(3):  # a stale idle connection is replaced, a few times at most
                conn = await self._connection(key)
                try:
                    response = await conn.request(data)
                except _Stale:
                    conn.close()
                    continue
                except BaseException:  # failed, timed out or cancelled: never reuse it
                    conn.close()
                    raise
                if not conn.closed:
                    conn.reused = True
                    self._idle.setdefault(key, deque()).append(conn)
                return response
            raise ConnectionError("the server closed every kept-alive connection")

    async def _connection(self, key: tuple[str, str, int]) -> _Connection:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            tls = self._ssl
        _, protocol = await loop.create_connection(
            lambda: _Connection(loop), host, port, ssl=tls, server_hostname=host if tls else None
        )
        return protocol

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
