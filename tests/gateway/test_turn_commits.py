"""A turn's commit overlaps the conversation's next model call, and a failed commit still fails
the conversation (``branchpoint.simulator.turn_writer``): real store (SQLite and PostgreSQL), slow or failing
commits injected into the write-behind thread."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fixtures.engine.helpers import conversations, run_engine, turns_of, write_scenario

from branchpoint.gateway import write_behind
from branchpoint.gateway.completion import Message
from branchpoint.gateway.providers.scripted import ScriptedModel

COMMIT_S = 0.1  # each commit takes this long: far longer than a scripted call


def _turn_ids(group: list[write_behind.Write]) -> list[str]:
    return [
        row["id"]
        for write in group
        for rank, _stmt, rows in write.ops
        if rank == write_behind.RANK_TURN
        for row in rows
    ]


def test_the_next_call_goes_out_before_the_last_turn_is_committed(
    store: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    committed: dict[str, float] = {}  # turn id -> when its commit ended
    calls: list[tuple[int, float]] = []  # (index of the user turn answered, when the call began)
    commit = write_behind.BatchWriter._commit_group

    def slow_commit(self: write_behind.BatchWriter, group: list[write_behind.Write]) -> None:
        time.sleep(COMMIT_S)
        commit(self, group)
        committed.update(dict.fromkeys(_turn_ids(group), time.monotonic()))

    def bot(messages: list[Message], params: Any) -> str:
        history = [m for m in messages if m.role != "system"]
        calls.append((len(history) - 1, time.monotonic()))
        return "ok, tell me more"

    monkeypatch.setattr(write_behind.BatchWriter, "_commit_group", slow_commit)
    path = write_scenario(tmp_path, max_turns=4)
    result, _ = run_engine(store, path, bot=ScriptedModel(default=bot))
    (conv,) = conversations(store, result.run_id)
    assert conv.status == "completed" and conv.n_turns == 8
    assert [t.index for t in turns_of(store, conv.id)] == list(range(8))
    # The chatbot's call for each exchange went out while the persona's turn it answers was still
    # being committed; waiting for each commit first would have put it after.
    early = [i for i, at in calls if at < committed[f"{conv.id}:{i}"]]
    assert len(calls) == 4 and len(early) == 4, (calls, committed)


def test_a_turn_that_fails_to_commit_fails_the_conversation_and_nothing_after_it_is_stored(
    store: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    execute = write_behind._execute

    def failing_execute(conn: Any, group: list[write_behind.Write]) -> None:
        if any(i.endswith(":3") for i in _turn_ids(group)):
            raise RuntimeError("disk quota exceeded (injected)")
        execute(conn, group)

    monkeypatch.setattr(write_behind, "_execute", failing_execute)
    path = write_scenario(tmp_path, max_turns=4)
    result, _ = run_engine(store, path)
    (conv,) = conversations(store, result.run_id)
    assert (conv.status, conv.stop_reason) == ("failed", "simulator_error")
    assert "disk quota exceeded (injected)" in (conv.error or "")
    # turn 3 never committed; the conversation's next turn waited for it and was never written
    assert [t.index for t in turns_of(store, conv.id)] == [0, 1, 2]
    assert conv.n_turns == 3
