"""Human labels in the store: the schema 3 columns (with the migration of an older store), and the
labelling queues."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from fixtures.tui.helpers import small_teen_store
from sqlalchemy import inspect, text

from core.human_labels import (
    LabelItem,
    LabelRow,
    iter_labels,
    labelled,
    realism_queue,
    sample_queue,
    save_label,
)
from core.records import (
    JUDGMENT_FAILING_INDEX,
    JUDGMENT_FAILURE_INDEX,
    SCHEMA_VERSION,
    Conversation,
    HumanLabel,
    Run,
)
from core.store import open_store

NEW_COLUMNS = ("time_spent_s", "blind", "confidence")


def test_a_store_of_schema_2_gains_the_label_columns_and_index_and_keeps_its_labels(store) -> None:  # type: ignore[no-untyped-def]
    url = store.url
    with store.session() as s:
        s.add(Run(id="r", status="completed"))
        s.flush()
        s.add(
            Conversation(
                id="c", run_id="r", scenario_id="s", scenario_hash="h", variant_id="v", target="t"
            )
        )
        s.commit()
    with store.session() as s:
        s.execute(text(f"DROP INDEX {JUDGMENT_FAILURE_INDEX}"))  # type: ignore[call-overload]
        s.execute(text(f"DROP INDEX {JUDGMENT_FAILING_INDEX}"))  # type: ignore[call-overload]
        for column in NEW_COLUMNS:
            s.execute(text(f"ALTER TABLE human_labels DROP COLUMN {column}"))  # type: ignore[call-overload]
        s.execute(
            text(
                "INSERT INTO human_labels (id, conversation_id, turn_id, turn_index, rubric_id, criterion_id, "
                "annotator, verdict, note, created_at) VALUES "
                "('old', 'c', 'c:1', 1, 'teen', 'no_diagnosis', 'alice', 'fail', 'from before', '2026-01-01')"
            )
        )  # type: ignore[call-overload]
        s.execute(text("UPDATE schema_info SET value = '2' WHERE key = 'schema_version'"))  # type: ignore[call-overload]
        s.commit()
    store.close()
    again = open_store(url)
    try:
        assert again.schema_version() == SCHEMA_VERSION
        columns = {c["name"] for c in inspect(again.engine).get_columns("human_labels")}
        assert set(NEW_COLUMNS) <= columns
        indexes = {i["name"] for i in inspect(again.engine).get_indexes("judgments")}
        assert {JUDGMENT_FAILURE_INDEX, JUDGMENT_FAILING_INDEX} <= indexes
        with again.session() as s:
            old = s.get(HumanLabel, "old")
            assert old is not None and (old.verdict, old.note) == ("fail", "from before")
            assert old.blind is None and old.time_spent_s is None and old.confidence is None
        save_label(again, LabelRow(conversation_id="c", turn_index=1, rubric_id="teen",
                                   criterion_id="no_diagnosis", annotator="bob", verdict="pass",
                                   blind=True, time_spent_s=3.5, confidence="low"))  # fmt: skip
        rows = {r.annotator: r for r in iter_labels(again)}
        assert rows["bob"].blind is True and rows["bob"].time_spent_s == 3.5
        assert rows["alice"].verdict == "fail"
    finally:
        again.close()


def test_labelling_again_replaces_the_label(store) -> None:  # type: ignore[no-untyped-def]
    with store.session() as s:
        s.add(Run(id="r", status="completed"))
        s.flush()
        s.add(
            Conversation(
                id="c", run_id="r", scenario_id="s", scenario_hash="h", variant_id="v", target="t"
            )
        )
        s.commit()
    row = LabelRow(
        conversation_id="c", turn_index=1, rubric_id="teen", criterion_id="x", annotator="a"
    )
    save_label(store, row.model_copy(update={"verdict": "pass"}))
    save_label(store, row.model_copy(update={"verdict": "fail"}))
    assert [r.verdict for r in iter_labels(store)] == ["fail"]
    item = LabelItem(conversation_id="c", turn_index=1, rubric_id="teen", criterion_id="x")
    assert labelled(store, "a", [item]) == {item} and labelled(store, "b", [item]) == set()


def test_the_sample_is_seeded_and_stratified_by_criterion_and_verdict(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    import sqlite3

    strata = (
        sqlite3.connect(db)
        .execute(
            "SELECT criterion_id, verdict, count(*) FROM judgments WHERE applicable AND verdict IS NOT NULL "
            "AND verdict != 'error' GROUP BY criterion_id, verdict"
        )
        .fetchall()
    )
    n = 3 * len(strata)
    queue = sample_queue(store, n=n, seed=1)
    assert queue == sample_queue(store, n=n, seed=1)
    assert queue != sample_queue(store, n=n, seed=2)
    verdict_of = dict(
        ((c, t, k), v)
        for c, t, k, v in sqlite3.connect(db).execute(
            "SELECT conversation_id, turn_index, criterion_id, verdict FROM judgments"
        )
    )
    drawn = Counter(
        (it.criterion_id, verdict_of[(it.conversation_id, it.turn_index, it.criterion_id)])
        for it in queue
    )
    # equal shares: three per stratum (every stratum here has at least three ratings)
    assert all(count >= 3 for _, _, count in strata)
    assert drawn == Counter({(c, v): 3 for c, v, _ in strata})
    assert len(set(queue)) == len(queue)
    store.close()


def test_the_realism_queue_draws_equally_from_each_simulator(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db, simulators=("scripted:simA", "scripted:simB"))
    import sqlite3

    queue = realism_queue(store, n=10, seed=0)
    sim = dict(sqlite3.connect(db).execute("SELECT id, simulator FROM conversations"))
    assert Counter(sim[it.conversation_id] for it in queue) == {
        "scripted:simA": 5,
        "scripted:simB": 5,
    }
    roles = dict(
        ((c, i), r)
        for c, i, r in sqlite3.connect(db).execute(
            'SELECT conversation_id, "index", role FROM turns'
        )
    )
    assert all(roles[(it.conversation_id, it.turn_index)] == "user" for it in queue)
    store.close()
