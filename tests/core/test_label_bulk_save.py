"""``save_labels`` in bulk (one upsert per batch): it replaces as a merge did, keeps the later of
two rows with one key, and stores all or none."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func
from sqlmodel import select

from branchpoint.core.human_labels import LabelRow, iter_labels, save_label, save_labels
from branchpoint.core.records import Conversation, HumanLabel, Run


def _conversation(store: Any) -> None:
    with store.session() as s:
        s.add(Run(id="r", status="completed"))
        s.flush()
        s.add(
            Conversation(
                id="c", run_id="r", scenario_id="s", scenario_hash="h", variant_id="v", target="t"
            )
        )
        s.commit()


def _row(verdict: str, annotator: str = "alice", turn: int | None = 1, **kw: Any) -> LabelRow:
    return LabelRow(
        conversation_id=kw.pop("conversation_id", "c"),
        turn_index=turn,
        rubric_id="teen",
        criterion_id="no_diagnosis",
        annotator=annotator,
        verdict=verdict,
        **kw,
    )


def test_bulk_save_replaces_earlier_labels_and_keeps_the_later_of_two_rows(store: Any) -> None:
    _conversation(store)
    save_label(store, _row("pass", note="first look"))
    n = save_labels(
        store,
        [
            _row("fail", note="second look", confidence="high", blind=True),
            _row("pass", annotator="bob"),
            _row("pass", annotator="bob", turn=None, time_spent_s=3.5),
            _row("fail", annotator="bob"),  # the same key as the second row: this one wins
        ],
    )
    assert n == 4
    by_key = {(r.annotator, r.turn_index): r for r in iter_labels(store)}
    assert len(by_key) == 3
    alice = by_key[("alice", 1)]
    assert (alice.verdict, alice.note, alice.confidence, alice.blind) == (
        "fail",
        "second look",
        "high",
        True,
    )
    assert by_key[("bob", 1)].verdict == "fail"
    assert by_key[("bob", None)].time_spent_s == 3.5
    with store.session() as s:
        turn_ids = {r.annotator + str(r.turn_index): r.turn_id for r in s.exec(select(HumanLabel))}
    assert turn_ids == {"alice1": "c:1", "bob1": "c:1", "bobNone": None}


def test_bulk_save_stores_none_when_one_row_cannot_be_stored(store: Any) -> None:
    _conversation(store)
    rows = [_row("pass", annotator=f"a{i}") for i in range(10)]
    rows.append(_row("pass", conversation_id="no-such-conversation"))
    with pytest.raises(Exception):  # noqa: B017 - the driver's IntegrityError, SQLite or PostgreSQL
        save_labels(store, rows)
    with store.session() as s:
        assert s.execute(select(func.count()).select_from(HumanLabel)).scalar_one() == 0
