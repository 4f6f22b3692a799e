"""The store's read layer (``branchpoint.core.read``) on real stores: a synthetic SQLite store with known
verdicts, the same rows copied into PostgreSQL, and a store that a writer holds open."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import insert, select
from sqlmodel import SQLModel

from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store
from branchpoint.core import read
from branchpoint.core.errors import UserError
from branchpoint.core.read import fast, turns
from branchpoint.core.read.sqlite_file import compile_sqlite
from branchpoint.core.records import Conversation, HumanLabel, ModelCall, Run
from branchpoint.core.store import Store, open_store

DESIGN = TeenDesign(
    n_scenarios=5,
    targets=("scripted:a", "scripted:b"),
    n_exchanges=4,
    reasoning=True,
    p_error=0.05,
)
RUN = DESIGN.run_id
KEYS = ["conversation_id", "rubric_id", "criterion_id", "judge"]
COUNTS = ["n_rated", "n_fail", "n_partial", "n_error", "n_other", "n_scored"]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("read") / "teen.db"
    truth = write_teen_store(path, DESIGN, seed=5)
    return path, truth


def _copy_into(source: Path, store: Store) -> None:
    """Every row of a SQLite store into another store (PostgreSQL), through the records' tables."""
    lite = open_store(source)
    try:
        with lite.engine.connect() as src, store.engine.begin() as dst:
            for table in SQLModel.metadata.sorted_tables:
                if table.name == "schema_info":
                    continue
                rows = [dict(r._mapping) for r in src.execute(select(table))]
                if rows:
                    dst.execute(insert(table), rows)
    finally:
        lite.close()


def _sorted(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return (frame.sort_values(by, kind="stable") if by else frame).reset_index(drop=True)


# --------------------------------------------------------------------------- judgments


def test_judgment_rows_are_the_stored_verdicts_with_their_turn(
    synthetic: tuple[Path, dict[str, Any]],
) -> None:
    path, truth = synthetic
    rows = read.judgment_rows(path)
    judg = truth["judgments"]
    assert len(rows) == len(judg)
    assert rows["verdict"].value_counts().to_dict() == judg["verdict"].value_counts().to_dict()
    # The exchange and role come from the joined turn, not from the judgment row.
    assert (rows["exchange"] == (rows["turn_index"] + 1) // 2).all()
    assert set(rows["turn_role"]) == {"assistant"}
    with_text = read.judgment_rows(path, [RUN], include_text=True)
    assert set(with_text["turn_content"]) == {"chatbot reply"}
    assert read.judgment_rows(path, judge="nobody").empty
    assert read.judgment_rows(path, [], rubric=DESIGN.rubric_id).empty
    one = judg["criterion_id"].iloc[0]
    assert len(read.judgment_rows(path, [RUN], rubric=DESIGN.rubric_id, judge=DESIGN.judge)) == len(
        judg
    )
    assert (read.judgment_rows(path)["criterion_id"] == one).sum() == (
        judg["criterion_id"] == one
    ).sum()


def _pandas_counts(rows: pd.DataFrame) -> pd.DataFrame:
    v = rows["verdict"]
    rated = rows["applicable"].astype(bool) & v.notna() & (v != "error")
    work = rows[KEYS].copy()
    work["n_rated"] = rated.astype(int)
    work["n_fail"] = (rated & (v == "fail")).astype(int)
    work["n_partial"] = (rated & (v == "partial")).astype(int)
    work["n_error"] = (v == "error").astype(int)
    work["n_other"] = (rated & ~v.isin(["pass", "partial", "fail"])).astype(int)
    work["n_scored"] = (rated & v.isin(["pass", "partial", "fail"])).astype(int)
    work["score_sum"] = np.where(rated, v.map({"pass": 1.0, "partial": 0.5, "fail": 0.0}), 0.0)
    work["score_sum"] = work["score_sum"].fillna(0.0)
    return _sorted(work.groupby(KEYS).sum().reset_index(), KEYS)


def test_sql_counts_and_the_sqlite_fast_path_equal_counts_made_from_the_rows(
    synthetic: tuple[Path, dict[str, Any]],
) -> None:
    path, _ = synthetic
    expected = _pandas_counts(read.judgment_rows(path))
    assert expected["n_error"].sum() > 0 and expected["n_partial"].sum() > 0
    for got in (read.criterion_counts(path), read.sqlite_criterion_counts(path)):
        got = _sorted(got, KEYS)
        assert len(got) == len(expected)
        for col in [*KEYS, *COUNTS]:
            assert (got[col].to_numpy() == expected[col].to_numpy()).all(), col
        assert np.allclose(got["score_sum"], expected["score_sum"])
        assert set(got["risk_area"]) == set(DESIGN.criteria.values())


def test_fast_path_without_indexes_and_with_interleaved_rows_counts_the_same(
    synthetic: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "bare.db"
    shutil.copy(synthetic[0], path)
    con = sqlite3.connect(path)
    with con:
        # An older store without the indexes the fast path hints at, rows of conversations mixed.
        con.execute("DROP INDEX ix_judgments_criterion_id")
        con.execute("DROP INDEX ix_judgments_conversation_id")
        con.execute("CREATE TEMP TABLE j2 AS SELECT * FROM judgments")
        con.execute("DELETE FROM judgments")
        con.execute("INSERT INTO judgments SELECT * FROM j2 ORDER BY random()")
    con.close()
    got = _sorted(read.sqlite_criterion_counts(path, chunk_rows=97), KEYS)
    expected = _sorted(read.criterion_counts(synthetic[0]), KEYS)
    for col in [*KEYS, *COUNTS]:
        assert (got[col].to_numpy() == expected[col].to_numpy()).all(), col


def test_empty_store_gives_empty_counts_with_the_columns(tmp_path: Path) -> None:
    open_store(tmp_path / "empty.db").close()
    got = read.sqlite_criterion_counts(str(tmp_path / "empty.db"))
    assert got.empty and list(got.columns) == [*fast.COUNT_KEYS, *fast.COUNT_COLUMNS]
    assert read.criterion_counts(tmp_path / "empty.db").empty


def test_export_chunks_come_in_write_order(synthetic: tuple[Path, dict[str, Any]]) -> None:
    path, truth = synthetic
    chunks = list(read.iter_judgment_rows(path, [RUN], chunksize=100))
    assert [len(c) for c in chunks[:-1]] == [100] * (len(chunks) - 1)
    ids = pd.concat(chunks)["judgment_id"].tolist()
    con = sqlite3.connect(path)
    in_rowid_order = [r[0] for r in con.execute("SELECT id FROM judgments ORDER BY rowid")]
    con.close()
    assert ids == in_rowid_order and len(ids) == len(truth["judgments"])


def test_turn_failures_flag_turns_of_conversations_with_reasoning(
    synthetic: tuple[Path, dict[str, Any]],
) -> None:
    path, truth = synthetic
    got = _sorted(read.turn_failures(path), ["conversation_id", "turn_index"])
    judg = truth["judgments"]
    # 1: some verdict is fail; 0: verdicts, none fail; empty: no verdict on that turn at all.
    f = np.where(judg["verdict"] == "fail", 1.0, np.where(judg["verdict"].notna(), 0.0, np.nan))
    want = judg.assign(f=f).groupby(["conversation_id", "turn_index"])["f"].max().reset_index()
    assert len(got) == len(want) and want["f"].isna().any()
    assert np.array_equal(got["any_fail"].to_numpy(float), want["f"].to_numpy(), equal_nan=True)


def test_failing_examples_are_failures_of_the_criterion_by_id(
    synthetic: tuple[Path, dict[str, Any]],
) -> None:
    path, truth = synthetic
    crit = "no_diagnosis"
    got = read.failing_examples(path, [RUN], rubric=DESIGN.rubric_id, criterion=crit, limit=4)
    assert len(got) == 4 and set(got["criterion_id"]) == {crit}
    rows = read.judgment_rows(path)
    failing = rows[(rows["verdict"] == "fail") & (rows["criterion_id"] == crit)]
    first = sorted(failing["judgment_id"])[:4]
    assert got["turn_index"].tolist() == [int(i.split(":")[1]) for i in first]


def test_judged_units_and_their_verdicts(synthetic: tuple[Path, dict[str, Any]]) -> None:
    path, truth = synthetic
    store = open_store(path)
    try:
        cids = sorted(truth["conversations"]["conversation_id"])
        units = read.judged_units(store, cids, "rh", [DESIGN.judge])
        judg = truth["judgments"]
        per_turn = judg.groupby(["conversation_id", "turn_index"])["verdict"].apply(
            lambda v: (v == "error").any()
        )
        assert len(units) == len(per_turn)
        erred = {(u.conversation_id, int(u.turn_id.split(":")[1])) for u in units if u.has_error}
        assert erred == {k for k, e in per_turn.items() if e}
        assert read.judged_units(store, cids, "another-rubric-hash", [DESIGN.judge]) == []
        u = units[0]
        verdicts = read.unit_judgments(
            store,
            u.conversation_id,
            u.turn_id,
            judge=u.judge,
            prompt_version="v1",
            rubric_hash="rh",
        )
        assert [v.criterion_id for v in verdicts] == sorted(DESIGN.criteria)
        assert {v.turn_id for v in verdicts} == {u.turn_id}
        assert (
            read.unit_judgments(
                store, u.conversation_id, None, judge=u.judge, prompt_version="v1", rubric_hash="rh"
            )
            == []
        )
    finally:
        store.close()


# --------------------------------------------------------------------------- records


def test_conversations_turns_and_runs_as_records(
    synthetic: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "copy.db"
    shutil.copy(synthetic[0], path)
    store = open_store(path)
    try:
        convs = read.select_conversations(store, RUN)
        assert len(convs) == len(synthetic[1]["conversations"])
        assert read.select_conversations(store, "no-such-run") == []
        ids = [c.id for c in convs]
        assert [c.id for c in read.select_conversations(store, ids=ids[:2])] == sorted(ids[:2])
        summary = read.run_conversations(store, RUN)
        keys = [(c.scenario_id, c.target, c.condition, c.replicate) for c in summary]
        assert keys == sorted(keys)
        # Batches of ids: three conversations per query, and one that has no turns.
        monkeypatch.setattr(turns, "ID_CHUNK", 3)
        got = read.turns_by_conversation(store, [*ids[:7], "no-turns"])
        assert got["no-turns"] == []
        for cid in ids[:7]:
            assert [t.index for t in got[cid]] == list(range(2 * DESIGN.n_exchanges))
            assert [t.id for t in got[cid]] == [t.id for t in read.conversation_turns(store, cid)]
        assert read.stored_turn_count(store, RUN) == len(ids) * 2 * DESIGN.n_exchanges
        assert read.find_run(store, RUN) is not None and read.find_run(store, "x") is None
        with store.session() as s:
            s.add(ModelCall(id="m1", purpose="judge", model="m", request_hash="h"))
            s.add(ModelCall(id="m2", purpose="target", model="m", request_hash="h"))
            s.commit()
        assert read.model_call_count(store, "judge") == 1
        assert read.model_call_count(store) == 2
    finally:
        store.close()


def test_find_conversation_by_id_or_unique_prefix(
    synthetic: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "copy.db"
    shutil.copy(synthetic[0], path)
    store = open_store(path)
    try:
        with store.session() as s:
            s.add(Run(id="r2"))
            s.commit()
            for cid in ("abc-1", "abc-2", "abd-3"):
                s.add(
                    Conversation(
                        id=cid, run_id="r2", scenario_id="s", scenario_hash="h", variant_id="v",
                        target="t",
                    )
                )  # fmt: skip
            s.commit()
        assert read.find_conversation(store, "abc-1").id == "abc-1"
        assert read.find_conversation(store, "abd").id == "abd-3"
        with pytest.raises(UserError, match="ambiguous: abc-1, abc-2"):
            read.find_conversation(store, "abc")
        with pytest.raises(UserError, match="no conversation 'zzz'"):
            read.find_conversation(store, "zzz")
    finally:
        store.close()


def test_human_label_rows_follow_their_conversation_run(
    synthetic: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "copy.db"
    shutil.copy(synthetic[0], path)
    store = open_store(path)
    cid = read.select_conversations(store, RUN)[0].id
    with store.session() as s:
        s.add(
            HumanLabel(
                id="h1", conversation_id=cid, turn_id=f"{cid}:1", turn_index=1,
                rubric_id="teen", criterion_id="no_diagnosis", annotator="ann", verdict="fail",
            )
        )  # fmt: skip
        s.commit()
    store.close()
    rows = read.human_label_rows(path, [RUN])
    assert rows.to_dict("records") == [
        {
            "conversation_id": cid,
            "turn_id": f"{cid}:1",
            "turn_index": 1,
            "rubric_id": "teen",
            "criterion_id": "no_diagnosis",
            "annotator": "ann",
            "verdict": "fail",
        }
    ]
    assert read.human_label_rows(path, ["another-run"]).empty


# --------------------------------------------------------------------------- where reads go


def test_reads_do_not_wait_for_or_see_an_open_write(
    synthetic: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "busy.db"
    shutil.copy(synthetic[0], path)
    open_store(path).close()  # WAL mode, as a sweep's store is
    before = len(read.judgment_rows(path))
    writer = sqlite3.connect(path)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO judgments (id, run_id, conversation_id, rubric_id, rubric_hash, criterion_id, "
        "judge, prompt_version, applicable, rationale, evidence, members, created_at) "
        "SELECT id || ':new', run_id, conversation_id, rubric_id, rubric_hash, criterion_id, judge, "
        "prompt_version, applicable, '', '[]', '[]', created_at FROM judgments LIMIT 3"
    )
    try:
        assert len(read.judgment_rows(path)) == before
    finally:
        writer.commit()
        writer.close()
    assert len(read.judgment_rows(path)) == before + 3


def test_missing_sqlite_store_is_a_one_line_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"nothere\.db: no such store"):
        read.judgment_rows(tmp_path / "nothere.db")
    assert not (tmp_path / "nothere.db").exists()


def test_raw_sqlite_reads_bind_only_plain_values() -> None:
    from datetime import datetime

    from branchpoint.core.read.schema import RUNS

    sql, params = compile_sqlite(select(RUNS.c.id).where(RUNS.c.id.in_(["a", "b"])))
    assert sql.count("?") == 2 and params == ("a", "b")
    with pytest.raises(TypeError, match="datetime"):
        compile_sqlite(select(RUNS.c.id).where(RUNS.c.created_at > datetime(2026, 1, 1)))


@pytest.fixture
def both(synthetic: tuple[Path, dict[str, Any]], store: Store) -> Iterator[tuple[Path, Store]]:
    """The synthetic SQLite file, and the same rows in the ``store`` fixture's database."""
    if store.url.startswith("sqlite"):
        store.close()
        shutil.copy(synthetic[0], store.url.removeprefix("sqlite:///"))
        store = open_store(store.url)
    else:
        _copy_into(synthetic[0], store)
    yield synthetic[0], store
    store.close()


def test_every_table_read_gives_the_same_frame_on_each_database(
    both: tuple[Path, Store],
) -> None:
    lite, other = both
    reads = {
        "runs": (lambda db: read.run_table(db), ["id"]),
        "conversations": (lambda db: read.conversation_rows(db, [RUN]), ["conversation_id"]),
        "judgments": (lambda db: read.judgment_rows(db, include_text=True), ["judgment_id"]),
        "counts": (lambda db: read.criterion_counts(db, [RUN]), KEYS),
        "turns": (lambda db: read.turn_rows(db, role=None), ["turn_id"]),
        "labels": (lambda db: read.human_label_rows(db), ["conversation_id"]),
        "failures": (lambda db: read.turn_failures(db, [RUN]), ["conversation_id", "turn_index"]),
        "examples": (
            lambda db: read.failing_examples(
                db, None, rubric=DESIGN.rubric_id, criterion="no_diagnosis", limit=5
            ),
            [],  # already in judgment id order
        ),
    }
    for name, (fn, by) in reads.items():
        a, b = fn(lite), fn(other)
        assert list(a.columns) == list(b.columns), name
        assert len(a) == len(b), name
        a, b = _sorted(a, by), _sorted(b, by)
        for col in a.columns:
            if col in ("choices", "created_at"):  # JSON text and timestamps: the driver's types
                continue
            left = a[col].astype(object).where(a[col].notna(), None).tolist()
            right = b[col].astype(object).where(b[col].notna(), None).tolist()
            if col in ("applicable",):
                left, right = [bool(v) for v in left], [bool(v) for v in right]
            assert left == right, (name, col)
