"""The lean HTTP/1.1 client of ``oai:`` against raw servers on 127.0.0.1 that answer each way
HTTP allows (Content-Length, chunked, until close), drop idle connections, or answer garbage."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from branchpoint.gateway.completion import GenParams, Message, ModelError
from branchpoint.gateway.providers.http1 import HTTPClient
from branchpoint.gateway.providers.oai import OpenAICompatProvider

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]

ANSWER = {
    "id": "x1",
    "choices": [{"message": {"content": "héllo"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await reader.readexactly(length)


async def _serve(handler: Handler) -> tuple[asyncio.Server, str, list[bytes]]:
    seen: list[bytes] = []
    count = 0

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        while True:
            request = await _read_request(reader)
            if request is None:
                break
            seen.append(request)
            count += 1
            await handler(reader, writer, count)
            if writer.is_closing():
                break
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1", seen


def _body() -> bytes:
    return json.dumps(ANSWER).encode()


async def _length(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> None:
    body = _body()
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
    w.write(b"Content-Length: %d\r\n\r\n" % len(body))
    # split across writes: the parser must wait for the rest
    w.write(body[:5])
    await w.drain()
    await asyncio.sleep(0.01)
    w.write(body[5:])
    await w.drain()


async def _chunked(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> None:
    body = _body()
    w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for i in range(0, len(body), 7):
        piece = body[i : i + 7]
        w.write(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece))
        await w.drain()
    w.write(b"0\r\nX-Trailer: t\r\n\r\n")
    await w.drain()


async def _until_close(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + _body())
    await w.drain()
    w.close()


async def _drops_idle(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> None:
    await _length(_r, w, _n)
    w.close()  # no "Connection: close": the client keeps it and finds it gone on the next call


async def _garbage(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> None:
    w.write(b"SPDY/9 what\r\n\r\n")
    await w.drain()


async def _throttle(_r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
    if n == 1:
        msg = b'{"error": {"message": "slow down"}}'
        w.write(b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 2\r\n")
        w.write(b"Content-Length: %d\r\n\r\n%s" % (len(msg), msg))
        await w.drain()
    else:
        await _length(_r, w, n)


def _call(url: str, calls: int = 1) -> list[object]:
    async def go() -> list[object]:
        provider = OpenAICompatProvider()
        out: list[object] = []
        params = GenParams(api_base=url, seed=1, extra={"api_key_env": "BP_TEST_NO_SUCH_KEY"})
        for i in range(calls):
            try:
                out.append(
                    await provider.complete("m", [Message(role="user", content=f"hi {i}")], params)
                )
            except ModelError as exc:
                out.append(exc)
        await provider.aclose()
        return out

    return asyncio.run(go())


@pytest.mark.parametrize("handler", [_length, _chunked, _until_close, _drops_idle])
def test_each_way_of_ending_an_answer_is_read_and_connections_reused(handler: Handler) -> None:
    async def go() -> tuple[list[str], list[bytes]]:
        server, url, seen = await _serve(handler)
        async with server:
            provider = OpenAICompatProvider()
            params = GenParams(api_base=url, seed=1)
            texts = []
            for i in range(3):
                c = await provider.complete("m", [Message(role="user", content=f"q{i}")], params)
                assert (c.tokens_in, c.tokens_out, c.request_id) == (3, 1, "x1")
                texts.append(c.text)
            await provider.aclose()
        return texts, seen

    texts, seen = asyncio.run(go())
    assert texts == ["héllo"] * 3
    assert len(seen) == 3  # a dropped idle connection is replaced: each request sent once
    first = seen[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    sent = json.loads(first.split(b"\r\n\r\n", 1)[1])
    assert sent["messages"] == [{"role": "user", "content": "q0"}] and sent["seed"] == 1


def test_a_garbled_answer_and_a_refused_connection_are_retryable_errors() -> None:
    async def garbled() -> ModelError:
        server, url, _ = await _serve(_garbage)
        async with server:
            provider = OpenAICompatProvider()
            with pytest.raises(ModelError) as info:
                await provider.complete(
                    "m", [Message(role="user", content="x")], GenParams(api_base=url)
                )
            await provider.aclose()
        return info.value

    exc = asyncio.run(garbled())
    assert exc.retryable and "HTTPProtocolError" in exc.reason and "status line" in exc.reason

    async def free_port() -> int:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = int(server.sockets[0].getsockname()[1])
        server.close()
        await server.wait_closed()
        return port

    port = asyncio.run(free_port())
    (refused,) = _call(f"http://127.0.0.1:{port}/v1")
    assert isinstance(refused, ModelError) and refused.retryable
    assert "ConnectionRefusedError" in refused.reason


def test_an_http_error_keeps_its_status_body_and_retry_after() -> None:
    async def go() -> list[object]:
        server, url, _ = await _serve(_throttle)
        async with server:
            return await asyncio.to_thread(_call, url, 2)

    first, second = asyncio.run(go())
    assert isinstance(first, ModelError)
    assert first.status == 429 and first.retryable and first.retry_after == 2.0
    assert "slow down" in first.reason
    assert not isinstance(second, ModelError)  # the connection is still good after an error


def test_a_cancelled_request_does_not_leave_its_connection_for_the_next() -> None:
    async def slow(_r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            await asyncio.sleep(0.5)  # the client has given up by then
        await _length(_r, w, n)

    async def go() -> str:
        server, url, _ = await _serve(slow)
        async with server:
            client = HTTPClient()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await client.post(url + "/chat/completions", b"{}", {})
            response = await client.post(url + "/chat/completions", b"{}", {})
            client.close()
        return json.loads(response.body)["id"]

    # had the first connection been reused, the late answer to the first request would be read
    # as the second's (or the parser would fail on it)
    assert asyncio.run(go()) == "x1"


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "prompt", None])
def test_the_request_bytes_are_json_dumps_of_the_body(mode: str | None) -> None:
    provider = OpenAICompatProvider()
    text = 'a "quote" \\ é 😀 \n\t \x00 \u2028 end'
    history = [Message(role="system", content="s" * 500)] + [
        Message(role="user" if i % 2 else "assistant", content=f"{text} {i}") for i in range(6)
    ]
    params = [
        GenParams(),
        GenParams(temperature=0.7, seed=3, max_tokens=9, stop=["x"], extra={"z": {"é": [1.5]}}),
        GenParams(json_schema={"type": "object"}, extra={"api_key": "never-sent"}),
    ]
    for p in params:
        for messages in (history, history[:1], []):
            for _ in range(2):  # the second time from the kept fragments
                sent = provider.payload("mødel", messages, p, mode)  # type: ignore[arg-type]
                body = provider.body("mødel", messages, p, mode)  # type: ignore[arg-type]
                assert sent == json.dumps(body).encode()
                assert b"never-sent" not in sent


@pytest.mark.parametrize(
    ("url", "key", "head"),
    [
        (
            "http://127.0.0.1:8000/v1/chat",
            ("http", "127.0.0.1", 8000),
            "POST /v1/chat HTTP/1.1\r\nHost: 127.0.0.1:8000",
        ),
        (
            "HTTPS://api.example.org/v1?x=1",
            ("https", "api.example.org", 443),
            "POST /v1?x=1 HTTP/1.1\r\nHost: api.example.org",
        ),
        ("http://[::1]:9/", ("http", "::1", 9), "POST / HTTP/1.1\r\nHost: [::1]:9"),
        ("http://localhost", ("http", "localhost", 80), "POST / HTTP/1.1\r\nHost: localhost"),
    ],
)
def test_request_target_and_host_header(url: str, key: tuple[str, str, int], head: str) -> None:
    from branchpoint.gateway.providers.http1 import _target

    assert _target(url) == (key, head)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "http:///no-host", "127.0.0.1:8000/v1"])
def test_unsupported_url_is_a_connection_error_every_time(url: str) -> None:
    async def main() -> None:
        client = HTTPClient()
        for _ in range(2):  # a refused URL is not remembered as a target
            with pytest.raises(ConnectionError, match="unsupported URL"):
                await client.post(url, b"{}", {})

    asyncio.run(main())
