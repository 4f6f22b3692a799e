"""The cache key covers the endpoint: two servers answering under one model name are two models.

Two loopback OpenAI-compatible servers, both serving ``oai:echo``, the second with replies of its
own. A run against each reaches its own server (the second is not answered from the first's
cached replies), and a re-run with the first server's params is answered from the cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from branchpoint.core.records import ModelCall
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.gateway.testing.openai_server import ServerThread
from branchpoint.simulator.runner import RunConfig, run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "engine"


@pytest.fixture
def two_servers() -> Iterator[tuple[ServerThread, ServerThread]]:
    first = ServerThread()
    second = ServerThread(models={"scripted:echo": ScriptedModel(default="the second server")})
    first.start()
    second.start()
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()


def _run(store: Any, url: str, run_id: str) -> list[ModelCall]:
    config = RunConfig(
        scenarios=[str(FIX / "on_event.yaml")],
        targets=["oai:echo"],
        target_params={"api_base": url, "seed": 11},  # seeded: the target's calls are cacheable
        simulators=["scripted:echo"],
        conditions=["teen_aware"],
        max_turns=3,
        run_id=run_id,
    )
    asyncio.run(run(config, store=store))
    with store.session() as s:
        calls = s.exec(
            select(ModelCall).where(ModelCall.run_id == run_id, ModelCall.purpose == "target")
        ).all()
    assert calls, f"{run_id} made no target calls"
    return list(calls)


def _requests(server: ServerThread) -> int:
    assert server.server is not None
    return server.server.requests


def test_each_server_answers_its_own_runs_and_a_rerun_is_served_from_the_cache(
    store: Any, two_servers: tuple[ServerThread, ServerThread]
) -> None:
    first, second = two_servers
    a = _run(store, first.base_url, "first")
    assert _requests(first) == len(a) and _requests(second) == 0
    assert not any(c.cached for c in a)

    b = _run(store, second.base_url, "second")
    assert _requests(second) == len(b), "the second server's run was answered from the cache"
    assert not any(c.cached for c in b)
    assert all(c.text == "the second server" for c in b)
    assert _requests(first) == len(a)

    again = _run(store, first.base_url + "/", "first-again")  # the same server, spelt with a /
    assert all(c.cached for c in again)
    assert {c.text for c in again} == {c.text for c in a}
    assert (_requests(first), _requests(second)) == (len(a), len(b))
