"""Migration 9 -> 10 (issue 47): a store made before replays, languages and adaptive personas
gains conversations.origin, .replay, .language and turns.persona_plan; its conversations read
as designed and English, its turns with no tactic."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlmodel import select

from branchpoint.core.records import SCHEMA_VERSION, Conversation, Run, Turn, utcnow
from branchpoint.core.store import open_store


def test_a_store_at_version_9_gains_the_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = open_store(path)
    with store.session() as s:
        s.add(Run(id="r"))
        s.commit()
        s.add(Conversation(id="c", run_id="r", scenario_id="x", scenario_hash="h",
                           variant_id="v", target="t"))  # fmt: skip
        s.commit()
        s.add(Turn(id="c:0", conversation_id="c", index=0, exchange=1, role="user", content="hi",
                   created_at=utcnow()))  # fmt: skip
        s.commit()
    store.close()
    con = sqlite3.connect(path)
    with con:  # the store as version 9 made it
        for table, column in [("conversations", "origin"), ("conversations", "replay"),
                              ("conversations", "language"), ("turns", "persona_plan")]:  # fmt: skip
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        con.execute("UPDATE schema_info SET value = '9' WHERE key = 'schema_version'")
    con.close()
    store = open_store(path)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        with store.session() as s:
            conv = s.exec(select(Conversation)).one()
            turn = s.exec(select(Turn)).one()
        assert (conv.origin, conv.replay, conv.language) == (None, None, None)
        assert turn.persona_plan is None and turn.content == "hi"
    finally:
        store.close()
