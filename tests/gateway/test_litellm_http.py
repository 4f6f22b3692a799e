"""Real HTTP round trips through litellm (and the ``oai:`` fast path) to a server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlmodel import select

from branchpoint.core.records import ModelCall
from branchpoint.gateway.completion import GenParams, Message, ModelError
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.testing.openai_server import ServerThread

KEY = "sk-dummy-test-key-0123456789"


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return KEY


def rows(store) -> list[ModelCall]:  # type: ignore[no-untyped-def]
    with store.session() as s:
        return list(s.exec(select(ModelCall)).all())


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["litellm:openai/whatever", "oai:whatever"])
def test_round_trip_stores_call_without_key(
    spec: str, loopback_server: str, api_key: str, store
) -> None:  # type: ignore[no-untyped-def]
    msgs = [
        Message(role="system", content="you are kind"),
        Message(role="user", content="tell me three words"),
    ]

    async def go():  # type: ignore[no-untyped-def]
        gw = Gateway(store=store)
        try:
            return await gw.complete(
                spec,
                msgs,
                GenParams(api_base=loopback_server, temperature=0.3, max_tokens=2),
                purpose="target",
                conversation_id="conv-1",
            )
        finally:
            await gw.aclose()

    completion, call_id = asyncio.run(go())
    # The echo server repeats the last message, cut at max_tokens words: proof the params crossed HTTP.
    assert completion.text == "tell me"
    assert completion.finish_reason == "length"
    assert (completion.tokens_in, completion.tokens_out) == (7, 2)
    assert completion.reasoning == "thinking it over"
    assert completion.request_id and completion.request_id.startswith("chatcmpl-bp")
    (row,) = rows(store)
    assert row.id == call_id and row.model == spec and row.text == "tell me" and row.tokens_out == 2
    assert row.params["api_base"] == loopback_server and row.error is None
    assert KEY not in row.model_dump_json()


@pytest.mark.slow
def test_server_receives_key_from_environment(api_key: str) -> None:
    server = ServerThread(require_key=KEY)
    url = server.start()
    try:

        async def go(spec: str) -> str:
            gw = Gateway(backoff_s=0.001)
            try:
                return (
                    await gw.complete(
                        spec, [Message(role="user", content="hi")], GenParams(api_base=url)
                    )
                )[0].text
            finally:
                await gw.aclose()

        assert asyncio.run(go("litellm:openai/m")) == "hi"
        assert asyncio.run(go("oai:m")) == "hi"
        # A wrong key is not retried: 401 cannot get better by waiting.
        import os

        os.environ["OPENAI_API_KEY"] = "sk-wrong-key-abcdefghijk"
        before = server.server.requests
        for spec in ("litellm:openai/m", "oai:m"):
            with pytest.raises(ModelError) as info:
                asyncio.run(go(spec))
            assert "401" in str(info.value) and "abcdefghijk" not in str(info.value)
        assert server.server.requests - before == 2
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["litellm:openai/retry-a", "oai:retry-b"])
def test_429_with_retry_after_is_retried(
    spec: str, loopback_server: str, api_key: str, store
) -> None:  # type: ignore[no-untyped-def]
    # The server counts failures per model name and lives for the session: a name of this test's own.
    spec = f"{spec}-{store.engine.dialect.name}"
    params = GenParams(api_base=loopback_server, extra={"extra_headers": {"x-fail-first": "2"}})
    if spec.startswith("oai:"):
        params = GenParams(api_base=loopback_server)

    async def go():  # type: ignore[no-untyped-def]
        gw = Gateway(store=store, backoff_s=0.001)
        if spec.startswith("oai:"):
            # the raw client sends no custom headers; ask the server through a one-off provider subclass
            from branchpoint.gateway.providers.oai import OpenAICompatProvider

            class FailHeader(OpenAICompatProvider):
                def _client(self):  # type: ignore[no-untyped-def]
                    client = super()._client()
                    client.headers["x-fail-first"] = "2"
                    return client

            gw._providers["oai"] = FailHeader()
        t0 = time.perf_counter()
        try:
            c, _ = await gw.complete(spec, [Message(role="user", content="again")], params)
        finally:
            await gw.aclose()
        return c, time.perf_counter() - t0

    c, elapsed = asyncio.run(go())
    assert c.text == "again" and c.attempts == 3
    assert elapsed >= 0.55  # waited Retry-After (0.3 s) twice, not the 1 ms backoff
    (row,) = rows(store)
    assert row.attempts == 3 and row.error is None
    assert "extra_headers" not in row.params.get("extra", {})


def test_unreachable_server_fails_with_recorded_reason(store) -> None:  # type: ignore[no-untyped-def]
    async def go() -> None:
        gw = Gateway(store=store, max_attempts=2, backoff_s=0.001)
        try:
            await gw.complete(
                "oai:m",
                [Message(role="user", content="hi")],
                GenParams(api_base="http://127.0.0.1:9/v1"),
            )
        finally:
            await gw.aclose()

    with pytest.raises(ModelError, match="after 2 attempts"):
        asyncio.run(go())
    (row,) = rows(store)
    assert row.attempts == 2 and "127.0.0.1:9" in row.error
