"""Cached input tokens (issue 45): the loopback server's OpenAI-style prefix cache reports them,
every path (``oai:``, ``litellm:``, a batch) stores them in the call row, and the recorded cost
is what the server billed, cached tokens at the cached rate."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from branchpoint.core.records import ModelCall
from branchpoint.core.store import Store, open_store
from branchpoint.gateway.batch import BatchAPI, batch_target, request_line
from branchpoint.gateway.completion import GenParams, Message, cache_usage
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.pricing import Price, Tokens, batch_price_of, price_of
from branchpoint.gateway.testing.openai_server import ServerThread, bill_usd
from branchpoint.gateway.testing.prefix_cache import PrefixCache, prompt_tokens

# a shared system prompt of 1,500 words: past OpenAI's 1,024-token threshold
SYSTEM = " ".join(f"rule{i}" for i in range(1500))
QUESTIONS = [f"question number {i} " + " ".join(f"w{i}x{j}" for j in range(40)) for i in range(6)]


def _messages(question: str) -> list[Message]:
    return [Message(role="system", content=SYSTEM), Message(role="user", content=question)]


def test_the_prefix_cache_serves_128_token_blocks_of_a_shared_prefix_from_1024() -> None:
    cache = PrefixCache()
    short = [("system", "a " * 1000)]
    assert cache.serve(prompt_tokens(short)) == (1000, 0)
    assert cache.serve(prompt_tokens(short)) == (1000, 0)  # under 1,024 tokens: never cached
    first = [("system", SYSTEM), ("user", "one two three")]
    assert cache.serve(prompt_tokens(first)) == (1503, 0)
    # the system prompt's 1,500 tokens are shared: 1,024 + 3 blocks of 128 = 1,408 served
    assert cache.serve(prompt_tokens([("system", SYSTEM), ("user", "four")])) == (1501, 1408)
    # the same words in another role are another prompt
    assert cache.serve(prompt_tokens([("user", SYSTEM)])) == (1500, 0)


def test_cache_usage_reads_openai_and_anthropic_usage() -> None:
    assert cache_usage(
        {"prompt_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 1024}}
    ) == (
        1024,
        0,
    )
    # litellm's Anthropic usage: the reads both in cached_tokens and cache_read_input_tokens
    anthropic = {
        "prompt_tokens": 3000,
        "prompt_tokens_details": {"cached_tokens": 2000},
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 500,
    }
    assert cache_usage(anthropic) == (2000, 500)
    assert cache_usage(None) == (0, 0)
    assert cache_usage({"prompt_tokens": 5}) == (0, 0)


def test_cached_and_written_tokens_are_priced_at_their_rates() -> None:
    price = Price(input=1e-6, output=2e-6, cached_input=0.1e-6, cache_write=1.25e-6)
    tokens = Tokens(input=3000, output=100, cached=2000, cache_write=500)
    assert tokens.usd(price) == pytest.approx(500e-6 + 200e-6 + 625e-6 + 200e-6)
    # no cached rate: a cached token costs what any input token does
    assert tokens.usd(Price(1e-6, 2e-6)) == pytest.approx(3000e-6 + 200e-6)
    given = price_of("oai:m", (1.0, 2.0, 0.25, None))
    assert given == Price(1e-6, 2e-6, 0.25e-6, None)
    assert batch_price_of("oai:m", (1.0, 2.0, 0.25)) == Price(0.5e-6, 1e-6, 0.125e-6, None)


def _store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "calls.db")


def _recorded(store: Store) -> tuple[float, int, int]:
    table = ModelCall.__table__  # type: ignore[attr-defined]
    with store.engine.connect() as conn:
        row = conn.execute(
            select(
                func.sum(table.c.cost), func.sum(table.c.tokens_cached), func.sum(table.c.tokens_in)
            )
        ).one()
    return float(row[0]), int(row[1]), int(row[2])


def _server() -> ServerThread:
    srv = ServerThread("scripted:echo", prefix_cache=True)
    srv.start()
    return srv


def _complete_all(gw: Gateway, spec: str, params: GenParams, run_id: str | None = None) -> None:
    async def go() -> None:
        try:
            for question in QUESTIONS:  # one after another: each finds the ones before cached
                await gw.complete(spec, _messages(question), params, run_id=run_id)
        finally:
            await gw.aclose()

    asyncio.run(go())


def test_oai_calls_record_cached_tokens_and_cost_what_was_billed(tmp_path: Path) -> None:
    srv = _server()
    store = _store(tmp_path)
    try:
        gw = Gateway(store, cache=False, prices={"oai:m": Price(1e-6, 2e-6, 0.25e-6)})
        _complete_all(gw, "oai:m", GenParams(api_base=srv.base_url))
        assert srv.server is not None
        billed = srv.server.billed
        cost, cached, tokens_in = _recorded(store)
        assert cached == billed["m"]["cached_tokens"] == 5 * 1408
        assert tokens_in == billed["m"]["prompt_tokens"]
        assert cost == pytest.approx(bill_usd(billed, 1.0, 2.0, 0.25), rel=0.01)
        assert cost < bill_usd(billed, 1.0, 2.0) * 0.5  # the cache is most of the input
    finally:
        store.close()
        srv.stop()


@pytest.mark.slow
def test_litellm_calls_record_cached_tokens_and_cost_what_was_billed(tmp_path: Path) -> None:
    srv = ServerThread("scripted:echo", prefix_cache=True, routes={"gpt-4o-mini": "scripted:echo"})
    srv.start()
    store = _store(tmp_path)
    try:
        spec = "litellm:openai/gpt-4o-mini"
        gw = Gateway(store, cache=False)
        _complete_all(gw, spec, GenParams(api_base=srv.base_url))
        price = price_of(spec)
        assert price is not None and price.cached_input is not None  # litellm's map has both
        assert srv.server is not None
        billed = srv.server.billed
        cost, cached, _ = _recorded(store)
        assert cached == billed["gpt-4o-mini"]["cached_tokens"] == 5 * 1408
        expected = bill_usd(billed, price.input * 1e6, price.output * 1e6, price.cached_input * 1e6)
        assert cost == pytest.approx(expected, rel=0.01)
    finally:
        store.close()
        srv.stop()


def test_batch_calls_record_cached_tokens_and_cost_what_was_billed(tmp_path: Path) -> None:
    srv = _server()
    store = _store(tmp_path)
    try:
        params = GenParams(api_base=srv.base_url)
        target = batch_target("oai:m", params)
        gw = Gateway(store, cache=False, prices={"oai:m": Price(1e-6, 2e-6, 0.25e-6)})

        async def go() -> None:
            api = BatchAPI(target)
            try:
                lines = [
                    request_line(f"r{i}", target, _messages(q), params)[0]
                    for i, q in enumerate(QUESTIONS)
                ]
                job = await api.submit(lines, {"k": "v"})
                while not job.done:
                    await asyncio.sleep(0.02)
                    job = await api.job(job.id)
                results = await api.results(job)
            finally:
                await api.aclose()
            for i, q in enumerate(QUESTIONS):
                got: Any = results[f"r{i}"]
                gw.record_batch_call(
                    f"call-{i}", "oai:m", _messages(q), params, got.completion, got.error,
                    batch_id=job.id, purpose="judge",
                )  # fmt: skip

        asyncio.run(go())
        assert srv.server is not None
        billed = srv.server.billed
        cost, cached, _ = _recorded(store)
        assert cached == billed["m"]["cached_tokens"] > 0
        # the batch API bills half of every rate, the cached one too
        assert cost == pytest.approx(bill_usd(billed, 0.5, 1.0, 0.125), rel=0.01)
    finally:
        store.close()
        srv.stop()


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_anthropic_models_get_cache_breakpoints_after_each_cache_prefix() -> None:
    from branchpoint.gateway.providers.litellm_provider import LiteLLMProvider

    system = Message(role="system", content="rules " * 10, cache_prefix=60)
    user = Message(role="user", content="transcript ... rate message 3", cache_prefix=14)
    provider = LiteLLMProvider()
    sent = provider.kwargs("anthropic/claude-3-5-haiku-20241022", [system, user], GenParams())
    ephemeral = {"type": "ephemeral"}
    assert sent["messages"][0]["content"] == [
        {"type": "text", "text": system.content, "cache_control": ephemeral}
    ]
    assert sent["messages"][1]["content"] == [
        {"type": "text", "text": "transcript ...", "cache_control": ephemeral},
        {"type": "text", "text": " rate message 3"},
    ]
    # the blocks joined are the text: the model reads what any other provider is sent
    assert "".join(b["text"] for b in sent["messages"][1]["content"]) == user.content
    # OpenAI caches prefixes by itself: plain text, no breakpoints
    plain = provider.kwargs("openai/gpt-4o-mini", [system, user], GenParams())
    assert [m["content"] for m in plain["messages"]] == [system.content, user.content]


def test_runs_and_the_live_view_show_the_share_of_input_a_cache_served(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from branchpoint.core.records import Run
    from branchpoint.study.monitor import SweepMonitor
    from branchpoint.tui.cli import app

    srv = _server()
    store = _store(tmp_path)
    try:
        with store.session() as s:
            s.add(Run(id="r1", status="completed"))
            s.add(Run(id="old", status="completed"))
            s.commit()
        gw = Gateway(store, cache=False, prices={"oai:m": Price(1e-6, 2e-6, 0.25e-6)})
        _complete_all(gw, "oai:m", GenParams(api_base=srv.base_url), run_id="r1")
        with store.engine.begin() as conn:  # a row from before schema 10: nothing reported
            conn.execute(
                ModelCall.__table__.insert(),  # type: ignore[attr-defined]
                [{"id": "x", "run_id": "old", "purpose": "target", "model": "oai:m",
                  "params": {}, "request_hash": "h", "messages": [], "tokens_in": 50}],
            )  # fmt: skip
        _, cached, tokens_in = _recorded(store)
        share = (cached - 0) / (tokens_in - 50)
        assert 0.7 < share < 0.9
        out = CliRunner().invoke(app, ["runs", "--db", store.url.removeprefix("sqlite:///")])
        assert out.exit_code == 0, out.output
        row = next(ln for ln in out.output.splitlines() if ln.split()[:1] == ["r1"])
        assert f"{share:.0%}" in row.split()
        old = next(ln for ln in out.output.splitlines() if ln.split()[:1] == ["old"])
        assert f"{share:.0%}" not in old.split()
        monitor = SweepMonitor(store, "r1", {})
        monitor.refresh()
        (role,) = monitor.snapshot().roles
        assert role.cached_share == pytest.approx(share)
    finally:
        store.close()
        srv.stop()


def test_the_report_section_shows_the_cache_share_and_unpriced_calls(tmp_path: Path) -> None:
    from branchpoint.analysis.report.spend import spend_section
    from branchpoint.core.records import Run

    srv = _server()
    store = _store(tmp_path)
    try:
        with store.session() as s:
            s.add(Run(id="r1", status="completed"))
            s.commit()
        gw = Gateway(store, cache=False, prices={"oai:m": Price(1e-6, 2e-6, 0.25e-6)})
        _complete_all(gw, "oai:m", GenParams(api_base=srv.base_url), run_id="r1")
        unpriced = Gateway(store, cache=False)  # no price for oai:other
        _complete_all(unpriced, "oai:other", GenParams(api_base=srv.base_url), run_id="r1")
        (section,) = spend_section(store, ["r1"])
        (_, table), *_ = section.tables
        rows = {r["model"]: r for r in table.to_dict("records")}
        cost, cached, tokens_in = _recorded(store)
        assert rows["oai:m"]["USD"] == f"{cost:.4f}"
        assert rows["oai:other"]["USD"] == "unpriced"
        # both models' calls were served from the cache alike
        assert rows["oai:m"]["cached"] == f"{cached / tokens_in:.0%}"
        assert any(f"({cached / tokens_in:.0%})" in t for t in section.text)
        assert spend_section(store, ["no-such-run"]) == []
    finally:
        store.close()
        srv.stop()


def test_a_plans_levels_assume_a_stated_cache_share_and_stay_bounds() -> None:
    from branchpoint.gateway.pricing import EXPECTED_CACHE_SHARE, PLAN_CACHE_SHARE

    tokens = Tokens(input=10_000, output=1_000)
    cached_rate = Price(1e-6, 2e-6, 0.25e-6)
    usd = {k: tokens.with_cache_share(s).usd(cached_rate) for k, s in PLAN_CACHE_SHARE.items()}
    assert usd["low"] < usd["expected"] < usd["high"]
    assert usd["high"] == pytest.approx(tokens.usd(cached_rate))  # no cache: the ceiling
    assert usd["low"] == pytest.approx(10_000 * 0.25e-6 + 1_000 * 2e-6)  # all cached: the floor
    share = EXPECTED_CACHE_SHARE
    assert usd["expected"] == pytest.approx(
        10_000 * ((1 - share) * 1e-6 + share * 0.25e-6) + 1_000 * 2e-6
    )
    # a model with no cached rate costs the same at every share
    plain = Price(1e-6, 2e-6)
    assert {
        round(tokens.with_cache_share(s).usd(plain), 12) for s in PLAN_CACHE_SHARE.values()
    } == {round(tokens.usd(plain), 12)}


def test_a_store_of_schema_10_gains_the_cached_token_columns(tmp_path: Path) -> None:
    from sqlalchemy import inspect, text

    from branchpoint.core.records import SCHEMA_VERSION

    path = tmp_path / "old.db"
    store = open_store(path)
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE model_calls DROP COLUMN tokens_cached"))
        conn.execute(text("ALTER TABLE model_calls DROP COLUMN tokens_cache_write"))
        conn.execute(text("UPDATE schema_info SET value = '10' WHERE key = 'schema_version'"))
    store.close()
    store = open_store(path)
    try:
        columns = {c["name"] for c in inspect(store.engine).get_columns("model_calls")}
        assert {"tokens_cached", "tokens_cache_write"} <= columns
        assert store.schema_version() == SCHEMA_VERSION == 11
    finally:
        store.close()
