"""Human labels in the store: the schema 3 columns (with the migration of an older store), and the
labelling queues."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from fixtures.tui.helpers import small_teen_store
from sqlalchemy import inspect, text

from branchpoint.core.human_labels import (
    LabelItem,
    LabelRow,
    design_population,
    iter_labels,
    labelled,
    realism_queue,
    sample_queue,
    save_label,
)
from branchpoint.core.records import (
    JUDGMENT_FAILING_INDEX,
    JUDGMENT_FAILURE_INDEX,
    SCHEMA_VERSION,
    Conversation,
    HumanLabel,
    Run,
)
from branchpoint.core.store import open_store

NEW_COLUMNS = ("time_spent_s", "blind", "confidence", "design_id")


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


def _population(db: Path, by_criterion: bool = False) -> dict[tuple[str, ...], set[tuple]]:
    import sqlite3

    strata: dict[tuple[str, ...], set[tuple]] = {}
    for cid, turn, rubric, crit, target, cond in sqlite3.connect(db).execute(
        "SELECT DISTINCT j.conversation_id, j.turn_index, j.rubric_id, j.criterion_id, c.target, "
        "c.condition FROM judgments j JOIN conversations c ON c.id = j.conversation_id "
        "WHERE j.applicable AND j.verdict IS NOT NULL AND j.verdict != 'error' "
        "AND j.turn_index IS NOT NULL"
    ):
        key = (target, cond, crit) if by_criterion else (target, cond)
        strata.setdefault(key, set()).add((cid, turn, rubric, crit))
    return strata


def test_the_sample_is_a_seeded_stored_design_stratified_by_target_and_condition(
    tmp_path: Path,
) -> None:
    import sqlite3

    db = tmp_path / "t.db"
    store = small_teen_store(db)
    strata = _population(db)
    assert len(strata) == 4  # two targets x two conditions
    queue = sample_queue(store, n=12, seed=1)
    assert len(queue) == len(set(queue)) == 12
    where = {key: s for s, keys in strata.items() for key in keys}
    drawn = Counter(
        where[(it.conversation_id, it.turn_index, it.rubric_id, it.criterion_id)] for it in queue
    )
    assert drawn == {s: 3 for s in strata}  # equal shares per target x condition
    assert queue != sample_queue(store, n=12, seed=2)
    design = queue[0].design_id
    assert design is not None and all(it.design_id == design for it in queue)
    rows = (
        sqlite3.connect(db)
        .execute(
            "SELECT stratum, inclusion_probability FROM label_design_items WHERE design_id = ?",
            (design,),
        )
        .fetchall()
    )
    assert all(p is None for _, p in rows)  # not counted while the labeller waits
    # judged after the draw began: not in the population the design was drawn from
    sqlite3.connect(db).execute(
        "UPDATE judgments SET created_at = '2999-01-01 00:00:00' WHERE rowid IN "
        "(SELECT min(rowid) FROM judgments WHERE applicable AND verdict != 'error' "
        "AND turn_index IS NOT NULL)"
    ).connection.commit()
    counted = design_population(store, design)
    assert sum(v["population"] for v in counted.values()) == sum(map(len, strata.values())) - 1
    rows = (
        sqlite3.connect(db)
        .execute(
            "SELECT stratum, inclusion_probability FROM label_design_items WHERE design_id = ?",
            (design,),
        )
        .fetchall()
    )
    assert {(st, round(p, 12)) for st, p in rows} == {
        (st, round(3 / counted[st]["population"], 12)) for st, _ in rows
    }
    # stored: reopening is a lookup of the same draw, even after the store changed
    sqlite3.connect(db).execute("DELETE FROM judgments WHERE rowid % 2 = 0").connection.commit()
    assert sample_queue(store, n=12, seed=1) == queue
    store.close()


def test_the_sample_by_criterion_has_a_stratum_per_target_condition_and_criterion(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    strata = _population(db, by_criterion=True)
    queue = sample_queue(store, n=len(strata), seed=0, by_criterion=True)
    where = {key: s for s, keys in strata.items() for key in keys}
    drawn = Counter(
        where[(it.conversation_id, it.turn_index, it.rubric_id, it.criterion_id)] for it in queue
    )
    assert drawn == {s: 1 for s in strata}
    store.close()


def test_strata_read_whole_give_the_same_kind_of_draw(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The path other databases take (and SQLite for strata too rare for random rowids): each
    stratum's items read in a stable order and sampled, equal shares, no repeats."""
    import branchpoint.core.human_labels as hl

    monkeypatch.setattr(hl, "TRIES_PER_ITEM", 0)
    monkeypatch.setattr(hl, "_RowidSampler", None)  # never used when no tries are left
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    strata = _population(db, by_criterion=True)
    queue = sample_queue(store, n=2 * len(strata), seed=4, by_criterion=True)
    where = {key: s for s, keys in strata.items() for key in keys}
    drawn = Counter(
        where[(it.conversation_id, it.turn_index, it.rubric_id, it.criterion_id)] for it in queue
    )
    assert drawn == {s: min(2, len(k)) for s, k in strata.items()}
    assert len(set(queue)) == len(queue)
    store.close()


@pytest.mark.slow
def test_every_item_of_a_stratum_is_equally_likely_even_when_two_judges_share_a_key(
    tmp_path: Path,
) -> None:
    """Random rowids with rejection: over many seeds each item of a stratum is drawn about
    equally often, also when half the keys have a second judge's row (drawn twice as often
    without the 1/m correction)."""
    import sqlite3

    db = tmp_path / "t.db"
    store = small_teen_store(db)
    conn = sqlite3.connect(db)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(judgments)")]
    rows = conn.execute("SELECT * FROM judgments WHERE rowid % 2 = 0").fetchall()
    i_id, i_judge = cols.index("id"), cols.index("judge")
    for r in rows:
        r = list(r)
        r[i_id] += "-second"
        r[i_judge] = "second-judge"
        conn.execute(f"INSERT INTO judgments VALUES ({', '.join('?' * len(r))})", r)
    conn.commit()
    strata = _population(db)
    stratum, keys = sorted(strata.items())[0]
    doubled = {
        (c, t, r, k)
        for c, t, r, k in conn.execute(
            "SELECT conversation_id, turn_index, rubric_id, criterion_id FROM judgments "
            "WHERE judge = 'second-judge'"
        )
    }
    hits: Counter[tuple] = Counter()
    n_seeds = 400
    for seed in range(n_seeds):
        for it in sample_queue(store, n=4 * 4, seed=seed):
            key = (it.conversation_id, it.turn_index, it.rubric_id, it.criterion_id)
            if key in keys:
                hits[key] += 1
    expected = n_seeds * 4 / len(keys)
    single = [hits[k] for k in keys if k not in doubled]
    double = [hits[k] for k in keys if k in doubled]
    assert single and double
    mean_single, mean_double = sum(single) / len(single), sum(double) / len(double)
    assert abs(mean_single / expected - 1) < 0.15 and abs(mean_double / expected - 1) < 0.15
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
