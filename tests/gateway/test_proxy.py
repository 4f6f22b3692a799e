"""``oai:`` behind a proxy: HTTP_PROXY / HTTPS_PROXY / NO_PROXY honoured as common HTTP clients do.

A forward proxy on 127.0.0.1 (absolute-form requests for http://, CONNECT tunnels for https://)
records what it is asked; the servers behind it are the project's loopback server and, for TLS, a
raw server with a certificate made for the test."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from test_http1 import _call  # the oai: provider's calls, each result or its ModelError

from branchpoint.gateway.completion import Completion, ModelError
from branchpoint.gateway.providers.proxied import proxy_for

REPO = Path(__file__).resolve().parents[2]
ANSWER = {
    "id": "x1",
    "choices": [{"message": {"content": "through"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}


class Loop:
    """An event loop in a thread, for servers that must answer while the test blocks."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout=30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


async def _head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def _length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def _start_proxy(seen: list[str]) -> int:
    """A forward proxy: records each request line it is sent, forwards or tunnels it."""

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (head := await _head(reader)) is not None:
            line = head.split(b"\r\n", 1)[0].decode()
            seen.append(line)
            method, target, _version = line.split(" ")
            if method == "CONNECT":
                host, port = target.rsplit(":", 1)
                up_r, up_w = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
                return
            # absolute-form: http://host:port/path -> the origin, in origin-form
            rest = target.split("://", 1)[1]
            hostport, path = rest.split("/", 1)
            host, port = hostport.rsplit(":", 1)
            body = await reader.readexactly(_length(head))
            up_r, up_w = await asyncio.open_connection(host, int(port))
            first = f"{method} /{path} HTTP/1.1".encode()
            up_w.write(first + head[len(line) :] + body)
            await up_w.drain()
            answer = await _head(up_r)
            assert answer is not None
            writer.write(answer + await up_r.readexactly(_length(answer)))
            await writer.drain()
            up_w.close()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    return int(server.sockets[0].getsockname()[1])


@pytest.fixture
def loop() -> Iterator[Loop]:
    running = Loop()
    yield running
    running.stop()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_the_environment_chooses_the_proxy_per_scheme_and_no_proxy_exempts(
    clean_env: pytest.MonkeyPatch,
) -> None:
    assert proxy_for("http://127.0.0.1:8000/v1/chat/completions") is None
    clean_env.setenv("https_proxy", "http://proxy.lab:3128")
    assert proxy_for("https://api.example.com/v1") == "http://proxy.lab:3128"
    assert proxy_for("http://api.example.com/v1") is None  # no proxy for that scheme
    clean_env.setenv("NO_PROXY", "localhost,.example.com")
    assert proxy_for("https://api.example.com/v1") is None
    assert proxy_for("https://api.other.org/v1") == "http://proxy.lab:3128"
    clean_env.setenv("NO_PROXY", "*")
    assert proxy_for("https://api.other.org/v1") is None
    clean_env.setenv("NO_PROXY", "")
    clean_env.setenv("HTTP_PROXY", "127.0.0.1:3128")  # no scheme: an http proxy, as curl reads it
    assert proxy_for("http://api.other.org/v1") == "http://127.0.0.1:3128"


def test_http_calls_go_through_the_proxy(
    loopback_server: str, loop: Loop, clean_env: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    port = loop.run(_start_proxy(seen))
    clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    out = _call(loopback_server, 2)
    assert all(isinstance(c, Completion) and c.text for c in out), out
    target = f"POST {loopback_server}/chat/completions HTTP/1.1"
    assert seen == [target, target]  # both calls, absolute-form, to the server behind it


def test_no_proxy_sends_straight_to_the_server(
    loopback_server: str, loop: Loop, clean_env: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    port = loop.run(_start_proxy(seen))
    clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    clean_env.setenv("NO_PROXY", "127.0.0.1")
    out = _call(loopback_server, 2)
    assert all(isinstance(c, Completion) for c in out), out
    assert seen == []


def test_a_dead_proxy_is_a_retryable_error_that_names_no_credentials(
    loopback_server: str, clean_env: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clean_env.setenv("HTTP_PROXY", f"http://alice:s3cret-pw@127.0.0.1:{port}")
    (out,) = _call(loopback_server)
    assert isinstance(out, ModelError) and out.retryable, out
    assert "s3cret-pw" not in str(out)


async def _tls_server(cert: Path, key: Path) -> int:
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (head := await _head(reader)) is not None:
            await reader.readexactly(_length(head))
            body = json.dumps(ANSWER).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=context)
    return int(server.sockets[0].getsockname()[1])


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command for a test certificate"
)
def test_https_goes_through_a_connect_tunnel(
    tmp_path: Path, loop: Loop, clean_env: pytest.MonkeyPatch
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    seen: list[str] = []
    proxy = loop.run(_start_proxy(seen))
    origin = loop.run(_tls_server(cert, key))
    # A child process: TLS trust comes from SSL_CERT_FILE, which a TLS context reads when made.
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_http1 import _call
        (out,) = _call("https://127.0.0.1:{origin}/v1")
        print(type(out).__name__, getattr(out, "text", out))
        """
    )
    env = {
        **os.environ,
        "SSL_CERT_FILE": str(cert),
        "HTTPS_PROXY": f"http://127.0.0.1:{proxy}",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "Completion through", done.stdout + done.stderr
    assert seen == [f"CONNECT 127.0.0.1:{origin} HTTP/1.1"]
