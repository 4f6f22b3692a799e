"""Every model call of a run can be rebuilt from the store, although a call stores only what is new.

A run against the loopback OpenAI-compatible server (real HTTP), with a system prompt and a fork:
each call's messages come back from its stored parts (prompt texts by hash, references to turns),
and hashing them with the call's model and params gives its stored ``request_hash``. The store
then grows with the turns, not with their square.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlmodel import select

from branchpoint.core.call_requests import call_messages
from branchpoint.core.records import SCHEMA_VERSION, ModelCall, PromptText
from branchpoint.gateway.cache import request_hash
from branchpoint.gateway.completion import GenParams, Message
from branchpoint.simulator.runner import RunConfig, run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "engine"


def _run(store: Any, url: str, max_turns: int, run_id: str) -> None:
    config = RunConfig(
        scenarios=[str(FIX / "on_event.yaml")],
        targets=["oai:echo"],
        target_params={"api_base": url, "temperature": 0.7},
        simulators=["oai:echo"],
        simulator_params={"api_base": url},
        conditions=["teen_aware"],
        replicates=2,
        max_turns=max_turns,
        run_id=run_id,
    )
    result = asyncio.run(run(config, store=store))
    assert result.conversations, "the run made no conversations"


def _rebuilt_hash(session: Any, call: ModelCall) -> str:
    messages = [Message(**m) for m in call_messages(session, call)]
    params = GenParams(**{k: v for k, v in call.params.items() if k in GenParams.model_fields})
    return request_hash(call.model, messages, params)


def test_every_call_is_rebuilt_byte_for_byte_from_its_stored_parts(
    store: Any, loopback_server: str
) -> None:
    _run(store, loopback_server, 6, "rebuild")
    with store.session() as s:
        calls = s.exec(select(ModelCall).where(ModelCall.run_id == "rebuild")).all()
        assert len(calls) > 20
        by_reference = [c for c in calls if c.prompt is not None]
        # the persona's and the chatbot's calls all refer to turns; none copies its messages
        assert len(by_reference) == len(calls)
        assert all(c.messages == [] for c in by_reference)
        assert any(p.get("turns") for c in by_reference for p in c.prompt or [])
        for call in calls:
            assert _rebuilt_hash(s, call) == call.request_hash, call.id
        # the system prompt of the condition and the persona's prompts are stored once each
        texts = s.exec(select(PromptText)).all()
        assert len({t.hash for t in texts}) == len(texts) >= 2
        # a rebuilt list is the real one: the chatbot saw the system prompt, then the turns
        target = next(c for c in calls if c.purpose == "target")
        rebuilt = call_messages(s, target)
        assert rebuilt[0]["role"] == "system" and len(rebuilt[0]["content"]) > 100


def test_an_old_store_migrates_and_its_calls_still_read(
    tmp_path: Path, loopback_server: str
) -> None:
    from branchpoint.core.store import open_store

    path = tmp_path / "old.db"
    store = open_store(path)
    store.close()
    # what a schema-4 store looked like: no prompt column, and a call with its messages whole
    with open_store(path).engine.begin() as con:
        con.execute(text("ALTER TABLE model_calls DROP COLUMN prompt"))
        con.execute(text("UPDATE schema_info SET value = '4' WHERE key = 'schema_version'"))
        con.execute(
            text(
                "INSERT INTO model_calls (id, purpose, model, params, request_hash, messages, text,"
                " tokens_in, tokens_out, latency_s, cached, attempts, created_at) VALUES ('old',"
                " 'target', 'oai:echo', '{}', :h, :m, 'hi', 0, 0, 0, 0, 1, '2026-01-01')"
            ),
            {
                "h": request_hash("oai:echo", [Message(role="user", content="hi")], GenParams()),
                "m": '[{"role": "user", "content": "hi"}]',
            },
        )
    store = open_store(path)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        with store.session() as s:
            old = s.get(ModelCall, "old")
            assert old is not None and old.prompt is None
            assert call_messages(s, old) == [{"role": "user", "content": "hi"}]
            assert _rebuilt_hash(s, old) == old.request_hash
        _run(store, loopback_server, 3, "after-migration")
        with store.session() as s:
            new = s.exec(select(ModelCall).where(ModelCall.run_id == "after-migration")).all()
            assert new and all(c.prompt is not None for c in new)
            assert all(_rebuilt_hash(s, c) == c.request_hash for c in new)
    finally:
        store.close()


def test_store_growth_is_linear_in_turns(tmp_path: Path, loopback_server: str) -> None:
    from branchpoint.core.store import open_store

    sizes = {}
    for turns in (5, 10):
        store = open_store(tmp_path / f"g{turns}.db")
        try:
            _run(store, loopback_server, turns, f"g{turns}")
            with store.engine.connect() as con:
                sizes[turns] = con.execute(
                    text("SELECT sum(length(prompt)) + sum(length(messages)) FROM model_calls")
                ).scalar_one()
        finally:
            store.close()
    # twice the exchanges, about twice the bytes of call rows (the square would be four times)
    assert sizes[10] <= 2.5 * sizes[5], sizes
