"""The loopback server's own HTTP/1.1 layer, spoken to over raw sockets: what clients other than
branchpoint's send (chunked bodies, several requests on one connection, HTTP/1.0) is answered."""

from __future__ import annotations

import json
import socket
import time

import pytest

from branchpoint.gateway.testing.http_server import Ready, Request
from branchpoint.gateway.testing.openai_server import ServerThread


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
    return host, int(port)


@pytest.fixture
def server() -> tuple[str, int]:
    thread = ServerThread()
    yield _address(thread.start())
    thread.stop()


class _Replies:
    """Replies read off one connection, in order; bytes of the next one read early are kept."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(10)  # a missing answer fails the test instead of hanging it
        self.sock = sock
        self.data = b""

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, "connection closed before the reply ended"
        self.data += chunk

    def next(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.data:
            self._more()
        head, _, rest = self.data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        self.data = rest
        while len(self.data) < length:
            self._more()
        body, self.data = self.data[:length], self.data[length:]
        return status, headers, body


def _chat(content: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()


def test_keep_alive_serves_requests_in_order_on_one_connection(server: tuple[str, int]) -> None:
    with socket.create_connection(server) as sock:
        # both requests in one send: the second waits in the buffer until the first is answered
        payload = b""
        for word in ("first", "second"):
            body = _chat(word)
            payload += (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        sock.sendall(payload)
        reader = _Replies(sock)
        replies = [reader.next() for _ in range(2)]
    assert [json.loads(b)["choices"][0]["message"]["content"] for _, _, b in replies] == [
        "first",
        "second",
    ]
    assert all(h["connection"] == "keep-alive" for _, h, _ in replies)


def test_chunked_body_split_across_sends(server: tuple[str, int]) -> None:
    body = _chat("chunked hello")
    half = len(body) // 2
    chunks = f"{half:x}\r\n".encode() + body[:half] + b"\r\n"
    chunks += f"{len(body) - half:x}\r\n".encode() + body[half:] + b"\r\n0\r\n\r\n"
    head = b"POST /chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    with socket.create_connection(server) as sock:
        data = head + chunks
        for i in range(0, len(data), 7):  # the parser must wait for the rest, not fail
            sock.sendall(data[i : i + 7])
        status, _, reply = _Replies(sock).next()
    assert status == 200
    assert json.loads(reply)["choices"][0]["message"]["content"] == "chunked hello"


def test_http10_closes_and_errors_are_answered(server: tuple[str, int]) -> None:
    with socket.create_connection(server) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.0\r\n\r\n")
        status, headers, body = _Replies(sock).next()
        assert status == 200 and headers["connection"] == "close"
        assert json.loads(body)["data"][0]["id"] == "scripted:echo"
        assert sock.recv(10) == b""  # closed by the server
    for request, expected in (
        (b"GET /nowhere HTTP/1.1\r\n\r\n", 404),
        (b"GET /v1/chat/completions HTTP/1.1\r\n\r\n", 405),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 3\r\n\r\nnot", 400),
        (b"NONSENSE\r\n\r\n", 400),
    ):
        with socket.create_connection(server) as sock:
            sock.sendall(request)
            assert _Replies(sock).next()[0] == expected, request


def _post(sock: socket.socket, body: bytes, *headers: str) -> None:
    extra = "".join(f"{h}\r\n" for h in headers)
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(body)}"
        "\r\n\r\n".encode()
        + body
    )


def test_a_reply_made_at_once_is_the_reply_chat_makes() -> None:
    """A plain chat is answered by ``ChatServer.ready`` (a timer holds it back for the delay);
    a header that only ``chat`` reads sends the same request down the general path. Both
    answer the same, after the delay, and count alike."""
    thread = ServerThread(delay_s=0.2, reasoning="thinking")
    address = _address(thread.start())
    assert thread._runner is not None
    http = thread._runner.http
    fast, answered = http.fast, []
    assert fast is not None

    def seen(request: Request) -> Ready | None:
        ready = fast(request)
        answered.append(ready is not None)
        return ready

    http.fast = seen
    try:
        answers = []
        for headers in ((), ("x-fail-first: 0",)):
            with socket.create_connection(address) as sock:
                started = time.monotonic()
                _post(sock, _chat("same words"), *headers)
                status, _, body = _Replies(sock).next()
                assert status == 200
                assert time.monotonic() - started >= 0.2
                reply = json.loads(body)
                del reply["id"], reply["created"]
                answers.append(reply)
        assert answered == [True, False]  # at once, then down chat()
        assert answers[0] == answers[1]
        assert answers[0]["choices"][0]["message"] == {
            "role": "assistant",
            "content": "same words",
            "reasoning_content": "thinking",
        }
        assert thread.server is not None
        assert thread.server.requests == 2 and thread.server.counts["ok"] == 2
        assert thread.server.formats == ["text", "text"]
        assert thread.server.in_flight == 0
    finally:
        thread.stop()


def test_a_held_reply_whose_client_left_is_no_longer_in_flight() -> None:
    thread = ServerThread(delay_s=2.0)
    address = _address(thread.start())
    try:
        assert thread.server is not None
        with socket.create_connection(address) as sock:
            _post(sock, _chat("never read"))
            deadline = time.monotonic() + 5
            while thread.server.in_flight == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert thread.server.in_flight == 1
        deadline = time.monotonic() + 1.5  # well before the 2 s delay would have ended
        while thread.server.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert thread.server.in_flight == 0
        assert thread.server.last_at is not None
    finally:
        thread.stop()
