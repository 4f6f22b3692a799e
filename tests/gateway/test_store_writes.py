"""The writer thread's statements, run through the driver (a plan compiled once per statement),
store exactly what SQLAlchemy's own execution of them stores."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from branchpoint.core.records import Conversation, ModelCall, PromptText, Run, Turn
from branchpoint.core.store import Store, open_store
from branchpoint.gateway import write_behind
from branchpoint.gateway.write_behind import (
    RANK_CONVERSATION,
    RANK_MODEL_CALL,
    RANK_PROGRESS,
    RANK_PROMPT_TEXT,
    RANK_TURN,
    Write,
    column_defaults,
    upsert,
)
from branchpoint.simulator.turn_writer import _INSERT_TURN, _PROGRESS, _STATUS

AT = datetime(2026, 12, 3, 11, 40, 58, 123456, tzinfo=UTC)
LATER = datetime(2026, 12, 3, 11, 41, 0, 7, tzinfo=UTC)
TABLES = ("runs", "conversations", "turns", "model_calls", "prompt_texts")


def _writes(store: Store) -> list[Write]:
    conv = Conversation.__table__  # type: ignore[attr-defined]
    calls = ModelCall.__table__  # type: ignore[attr-defined]
    texts = PromptText.__table__  # type: ignore[attr-defined]
    conversations = [
        column_defaults(
            Conversation,
            id=f"c{i}",
            run_id="r",
            scenario_id="s",
            scenario_hash="h",
            variant_id="v",
            target="oai:bot",
            simulator="oai:persona",
            choices={"disclosure": "open", "ü": ["ünïcode", 1, None]},
            target_params={"temperature": 0.0, "seed": 7},
            created_at=AT,
            updated_at=AT,
        )
        for i in range(2)
    ]
    turn_defaults = column_defaults(Turn, id="", conversation_id="", index=0, exchange=0, role="")
    turns = [
        turn_defaults
        | {
            "id": f"c{i}:{j}",
            "conversation_id": f"c{i}",
            "index": j,
            "exchange": j // 2,
            "role": "persona" if j % 2 == 0 else "target",
            "content": f"line {j} \u2014 \U0001f600 'quoted' \"double\"\n",
            "latency_s": 0.25 * j,
            "tokens_in": 3 * j,
            "created_at": AT,
            "origin_turn_id": "c0:" + str(j) if i else None,
        }
        for i in range(2)
        for j in range(3)
    ]
    call = column_defaults(ModelCall, id="m1", purpose="target", request_hash="k") | {
        "model": "oai:bot",
        "run_id": "r",
        "conversation_id": "c0",
        "params": {"seed": 7, "nested": {"a": [1.5, None, True]}},
        "prompt": [{"role": "system", "text": "t1"}, {"turns": "c0", "count": 2, "flip": False}],
        "messages": [],
        "text": "a reply",
        "reasoning": None,
        "cost": None,
        "latency_s": 0.1,
        "created_at": AT,
    }
    text_rows = [{"hash": "t1", "kind": "system_prompt", "text": "You are...", "created_at": AT}]
    return [
        Write([(RANK_CONVERSATION, upsert(store, conv, ["id"], []), conversations)]),
        Write(
            [
                (RANK_TURN, _INSERT_TURN, turns),
                (RANK_PROGRESS, _PROGRESS, [{"b_id": "c0", "b_n": 3, "b_at": LATER}]),
            ]
        ),
        Write(
            [
                (RANK_PROMPT_TEXT, upsert(store, texts, ["hash"], []), text_rows),
                (RANK_MODEL_CALL, insert(calls), [call]),
            ]
        ),
        # the same text again: kept as it is, not doubled
        Write([(RANK_PROMPT_TEXT, upsert(store, texts, ["hash"], []), text_rows)]),
        Write(
            [
                (
                    RANK_PROGRESS,
                    _STATUS,
                    [
                        {
                            "b_id": "c1",
                            "b_status": "failed",
                            "b_reason": "error",
                            "b_error": "x",
                            "b_at": LATER,
                        }
                    ],
                )
            ]
        ),
    ]


def _stored(path: Path, monkeypatch: pytest.MonkeyPatch, *, driver: bool) -> dict[str, Any]:
    if not driver:
        monkeypatch.setattr(write_behind, "_driver_plan", lambda *_: None)
    store = open_store(path)
    try:
        with store.session() as s:
            s.add(Run(id="r", config={"k": 1}, created_at=AT, updated_at=AT))
            s.commit()
        with store.engine.begin() as conn:
            write_behind._execute(conn, _writes(store))
    finally:
        store.close()
    monkeypatch.undo()
    db = sqlite3.connect(path)
    try:
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}
    finally:
        db.close()


def test_driver_writes_store_what_sqlalchemy_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_behind._PLANS.clear()
    by_driver = _stored(tmp_path / "driver.db", monkeypatch, driver=True)
    # every statement went through the driver: a plan was made for each, none refused
    planned = [p for p in write_behind._PLANS.values() if p is not None]
    assert len(planned) == 6 and None not in write_behind._PLANS.values()
    by_sqlalchemy = _stored(tmp_path / "sqlalchemy.db", monkeypatch, driver=False)
    assert by_driver == by_sqlalchemy
    assert len(by_driver["turns"]) == 6 and len(by_driver["prompt_texts"]) == 1
    statuses = {row[0]: row for row in by_driver["conversations"]}
    assert "failed" in statuses["c1"] and "running" in statuses["c0"]


def test_rows_that_leave_a_defaulted_column_out_take_sqlalchemys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a column default is SQLAlchemy's to fill, per row: no driver plan for such rows
    store = open_store(tmp_path / "d.db")
    try:
        assert (
            write_behind._driver_plan(
                _INSERT_TURN, store.engine.dialect, ("id", "conversation_id", "index")
            )
            is None
        )
    finally:
        store.close()


def test_a_commit_wakes_the_loop_once_for_all_the_writes_it_settles(tmp_path: Path) -> None:
    # Each wake-up from the writer thread is a system call and a hand-over of the GIL: the
    # awaited writes of one commit are settled together, and each still gets its own outcome.
    import asyncio

    conv = Conversation.__table__  # type: ignore[attr-defined]
    store = open_store(tmp_path / "w.db")
    writer = write_behind.BatchWriter(store)
    row = column_defaults(
        Conversation, id="c", run_id="r", scenario_id="s", scenario_hash="h", variant_id="v"
    ) | {"target": "oai:bot", "created_at": AT, "updated_at": AT}

    async def main() -> tuple[int, list[BaseException | None]]:
        loop = asyncio.get_running_loop()
        wakeups = 0
        threadsafe = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal wakeups
            wakeups += 1
            return threadsafe(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        stmt = upsert(store, conv, ["id"], [])
        futures = [
            writer.committed([(RANK_CONVERSATION, stmt, [row | {"id": f"c{i}"}])])
            for i in range(20)
        ]
        # one bad write among them (no such run: the foreign key) fails alone
        bad = writer.committed([(RANK_TURN, _INSERT_TURN, [{"id": "x"}])])
        outcomes = await asyncio.gather(*futures, bad, return_exceptions=True)
        return wakeups, outcomes

    try:
        with store.session() as s:
            s.add(Run(id="r", config={}, created_at=AT, updated_at=AT))
            s.commit()
        wakeups, outcomes = asyncio.run(main())
    finally:
        store.close()
    assert outcomes[:20] == [None] * 20
    assert isinstance(outcomes[20], Exception)
    assert writer.writes == 21 and wakeups == 1
