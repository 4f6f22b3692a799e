"""The OpenAI Batch API client (``branchpoint/gateway/batch.py``) against the loopback server's batch
endpoints over real HTTP, and batch prices (``branchpoint/gateway/pricing.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from branchpoint.core.errors import UserError
from branchpoint.gateway.batch import BatchAPI, BatchJob, batch_target, request_line
from branchpoint.gateway.completion import GenParams, Message, ModelError
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.pricing import BATCH_FACTOR, Price, batch_price_of, price_of
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.gateway.testing.openai_server import ServerThread


def _server(**kw: Any) -> ServerThread:
    model = ScriptedModel(
        rules=[("boom", ModelError("no answer to this one"))],
        default=lambda messages, params: f"re: {messages[-1].content}",
    )
    thread = ServerThread(
        "scripted:echo", models={"scripted:m": model}, routes={"m": "scripted:m"}, **kw
    )
    thread.start()
    return thread


def test_a_batch_is_answered_line_by_line_failed_lines_in_the_error_file() -> None:
    srv = _server(batch_delay_s=0.2)
    try:
        params = GenParams(api_base=srv.base_url, temperature=0)
        target = batch_target("oai:m", params)
        lines = [
            request_line(f"r{i}", target, [Message(role="user", content=text)], params)[0]
            for i, text in enumerate(["hello", "boom", "bye"])
        ]
        assert orjson.loads(lines[0])["body"] == {
            "model": "m",
            "messages": [{"role": "user", "content": "hello"}],
            "temperature": 0,
        }

        async def go() -> tuple[list[BatchJob], dict[str, Any]]:
            api = BatchAPI(target)
            try:
                job = await api.submit(lines, {"k": "v"})
                seen = [job]
                while not job.done:
                    await asyncio.sleep(0.05)
                    job = await api.job(job.id)
                    seen.append(job)
                found = await api.find("k", "v")
                assert found is not None and found.id == job.id
                assert await api.find("k", "other") is None
                return seen, await api.results(job)
            finally:
                await api.aclose()

        seen, results = asyncio.run(go())
        assert seen[0].status == "in_progress" and seen[-1].status == "completed"
        assert (seen[-1].total, seen[-1].completed, seen[-1].failed) == (3, 2, 1)
        assert results["r0"].completion is not None and results["r0"].completion.text == "re: hello"
        assert results["r2"].completion is not None and results["r2"].completion.tokens_in > 0
        assert results["r1"].completion is None
        assert "HTTP 500" in (results["r1"].error or "") and "no answer" in (
            results["r1"].error or ""
        )
        assert srv.server is not None and srv.server.batch is not None
        assert srv.server.batch.created == 1
    finally:
        srv.stop()


def test_specs_without_a_batch_api_are_refused() -> None:
    with pytest.raises(UserError, match="has no batch API"):
        batch_target("litellm:anthropic/claude-3-5-haiku-20241022", GenParams())
    with pytest.raises(UserError, match="needs an api_base"):
        batch_target("oai:m", GenParams())
    openai = batch_target("litellm:openai/gpt-4o-mini", GenParams())
    assert (openai.api_base, openai.model) == ("https://api.openai.com/v1", "gpt-4o-mini")


@pytest.mark.slow
def test_batch_prices() -> None:
    # litellm's map has OpenAI's batch prices: half the list price
    mini = batch_price_of("litellm:openai/gpt-4o-mini")
    listed = price_of("litellm:openai/gpt-4o-mini")
    assert mini is not None and listed is not None
    assert mini.input == pytest.approx(listed.input / 2) and mini.output == pytest.approx(
        listed.output / 2
    )
    # a given price: BATCH_FACTOR of it, or the factor given
    assert batch_price_of("oai:m", (1.0, 2.0)) == Price(1e-6 * BATCH_FACTOR, 2e-6 * BATCH_FACTOR)
    assert batch_price_of("oai:m", (1.0, 2.0), 0.4) == Price(0.4e-6, 0.8e-6)
    assert batch_price_of("oai:unknown-model") is None
    assert batch_price_of("scripted:x") == Price(0.0, 0.0)
    gw = Gateway()
    gw.prices["oai:m"] = Price(1e-6, 2e-6)
    assert gw.batch_price("oai:m") == Price(0.5e-6, 1e-6)
    gw.batch_factors["oai:m"] = 0.25
    assert gw.batch_price("oai:m") == Price(0.25e-6, 0.5e-6)
