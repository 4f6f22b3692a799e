"""``p`` on a persona turn of the transcript screen (issue 47): the dialog takes a message, the
replay runs in a worker against the same target over real HTTP (the loopback server), and the
compare screen opens with the replay beside its original."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.tui.helpers import settle
from sqlmodel import select

from branchpoint.core.records import Conversation
from branchpoint.core.store import open_store
from branchpoint.gateway.testing.openai_server import ServerThread
from branchpoint.simulator.runner import RunConfig, run
from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.screens.compare import CompareScreen

pytestmark = pytest.mark.anyio
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "engine" / "at_turn.yaml"


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[tuple[Any, str]]:
    server = ServerThread(model="scripted:echo")
    server.start()
    db = str(tmp_path / "t.db")
    config = RunConfig(
        scenarios=[str(FIX)], targets=["oai:echo"], target_params={"api_base": server.base_url},
        simulators=["oai:echo"], simulator_params={"api_base": server.base_url}, max_turns=3,
        db=db,
    )  # fmt: skip
    result = asyncio.run(run(config))
    store = open_store(db)
    with store.session() as s:
        original = next(
            c for c in s.exec(select(Conversation).where(Conversation.run_id == result.run_id))
            if c.parent_id is None
        )  # fmt: skip
    try:
        yield store, original.id
    finally:
        store.close()
        server.stop()


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
async def test_p_on_a_persona_turn_replays_it_and_opens_compare(stored) -> None:  # type: ignore[no-untyped-def]
    store, original = stored
    app = BranchpointApp(store, conversation=original, annotator="clin1")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("p")  # turn 0 is the persona's opening
        await settle(pilot)
        await pilot.press("escape")  # cancelled: nothing is made
        await settle(pilot)
        await pilot.press("j")  # the chatbot's turn: refused with a note
        await pilot.press("p")
        await settle(pilot)
        await pilot.press("j", "p")  # turn 2, the persona's
        await settle(pilot)
        await pilot.press(*"WHAT IF", "enter")
        await settle(pilot, rounds=10)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        # the replay and the arm it replays, side by side
        with store.session() as s:
            (r,) = s.exec(select(Conversation).where(Conversation.origin == "replay"))
        assert set(screen.chosen) == {r.id, original}
    with store.session() as s:
        replays = list(s.exec(select(Conversation).where(Conversation.origin == "replay")))
    assert len(replays) == 1
    (r,) = replays
    assert r.parent_id == original and r.fork_turn == 2
    assert r.replay is not None and r.replay["annotator"] == "clin1"
