"""The analysis of a store with forks from its judgment summaries (``branchpoint.core.judgment_summaries``,
kept by triggers) equals the analysis from every judgment row (the codes path) and from the
judgment table, after re-judging, overwriting and deleting judgments; a copy standing in for a
root that lacks its rating is counted as the per-turn rule says, and where the summaries cannot
decide (two judgments on one turn) the per-turn path answers."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from test_fork_fast_path import _forked_store, _frames

import branchpoint.analysis.pipeline as pipeline
from branchpoint.analysis.pairing.fork_summaries import fork_tables, summary_fork_tables
from branchpoint.analysis.pairing.forks import Tree, turn_roots
from branchpoint.analysis.pipeline import run_analysis
from branchpoint.core.judgment_summaries import TABLE, read_summaries, summary_rows


def _table(path: Path) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(str(path))
    rows = con.execute(
        f"SELECT conversation_id, rubric_id, rubric_hash, judge, prompt_version, criterion_id, "
        f"rtrim(codes), whole, n FROM {TABLE}"
    ).fetchall()
    con.close()
    return sorted(rows)


def _copies_of_root_turns(path: Path) -> dict[tuple[str, int], list[str]]:
    """(root conversation, turn index) -> the other conversations that carry that turn copied."""
    con = sqlite3.connect(str(path))
    frame = pd.read_sql(
        "SELECT DISTINCT j.conversation_id, j.turn_index, c.parent_id, c.fork_turn FROM judgments j "
        "JOIN conversations c ON c.id = j.conversation_id WHERE j.turn_index IS NOT NULL",
        con,
    )
    con.close()
    frame["root"] = turn_roots(frame, Tree(frame))
    out: dict[tuple[str, int], list[str]] = {}
    for r in frame.itertuples():
        if r.root != r.conversation_id:
            out.setdefault((r.root, int(r.turn_index)), []).append(r.conversation_id)
    return out


def _edit(path: Path, sql: str, params: Any = ()) -> None:
    con = sqlite3.connect(str(path))
    with con:
        con.execute(sql, params)
    con.close()


JUDGE2 = "scripted:judge2"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fork store of ``test_fork_fast_path``, then re-judged, overwritten and thinned."""
    path = _forked_store(tmp_path_factory.mktemp("forksum") / "forks.db")
    con = sqlite3.connect(str(path))
    with con:
        # Re-judging (``--retry-errors``): a unit's rows deleted, then written again, another verdict.
        cid = con.execute("SELECT conversation_id FROM judgments LIMIT 1").fetchone()[0]
        unit = con.execute(
            "SELECT * FROM judgments WHERE conversation_id = ? AND turn_index = 3 AND judge = ?",
            (cid, JUDGE2),
        )
        cols = [d[0] for d in unit.description]
        rows = [dict(zip(cols, r)) for r in unit.fetchall()]
        con.execute(
            "DELETE FROM judgments WHERE conversation_id = ? AND turn_index = 3 AND judge = ?",
            (cid, JUDGE2),
        )
        for r in rows:
            r["verdict"] = "error" if r["verdict"] == "pass" else "pass"
        con.executemany(
            f"INSERT INTO judgments ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [[r[c] for c in cols] for r in rows],
        )
        # An overwrite in place (a merge of a row written meanwhile): verdicts and applicability.
        con.execute(
            "UPDATE judgments SET verdict = 'fail' WHERE rowid % 17 = 0 AND verdict = 'pass'"
        )
        con.execute("UPDATE judgments SET applicable = 0, verdict = NULL WHERE rowid % 23 = 0")
    con.close()
    # A root's rating missing where exactly one arm copies it: the copy stands in for it.
    single = next(k for k, v in _copies_of_root_turns(path).items() if len(v) == 1)
    (root, turn), copy = single, _copies_of_root_turns(path)[single][0]
    _edit(
        path,
        "DELETE FROM judgments WHERE conversation_id = ? AND turn_index = ? AND judge = ?",
        (root, turn, JUDGE2),
    )
    assert copy  # its rating stays
    return path


def _same(a: Any, b: Any) -> None:
    fa, fb = _frames(a), _frames(b)
    for name, got in fa.items():
        want = fb[name]
        if isinstance(got, pd.DataFrame):
            pd.testing.assert_frame_equal(
                got.reset_index(drop=True), want.reset_index(drop=True), obj=name
            )
        else:
            assert got == want, name


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_the_triggers_keep_what_the_rows_say(store: Path) -> None:
    assert _table(store) == sorted(summary_rows(str(store)))


@pytest.mark.slow
def test_summaries_give_the_analysis_of_every_row(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = read_summaries(str(store))
    assert got is not None  # kept and consistent
    assert summary_fork_tables(got, str(store), str(store), None, None) is not None  # decides
    by_summaries = run_analysis(str(store), n_boot=200, examples=0)
    monkeypatch.setattr(pipeline, "fork_tables", functools.partial(fork_tables, summaries=False))
    by_rows = run_analysis(str(store), n_boot=200, examples=0)
    by_table = run_analysis(str(store), n_boot=200, examples=0, fast=False)
    assert by_summaries.n_copied_conversations > 0 and not by_summaries.contrasts.friedman.empty
    _same(by_summaries, by_rows)
    _same(by_summaries, by_table)
    # the counts of a left-out conversation's arms (--exclude-retried) agree too
    ids = sorted(pd.read_sql("SELECT id FROM conversations", sqlite3.connect(str(store)))["id"])
    left = set(ids[::7])
    a = fork_tables(str(store), None, left)
    b = fork_tables(str(store), None, left, summaries=False)
    assert a is not None and b is not None
    for x, y in ((a.cc, b.cc), (a.cc_conversation, b.cc_conversation), (a.paired.cc, b.paired.cc)):
        pd.testing.assert_frame_equal(
            x.sort_values(["conversation_id", "judge", "criterion_id"]).reset_index(drop=True),
            y.sort_values(["conversation_id", "judge", "criterion_id"]).reset_index(drop=True),
        )


@pytest.mark.slow
def test_two_copies_for_one_missing_root_rating_count_the_smallest_id(tmp_path: Path) -> None:
    """The root's rating gone and two arms carrying it copied, with different verdicts: each
    path counts the copy on the smallest conversation id, whatever order the rows were written."""
    path = _forked_store(tmp_path / "forks.db")
    (root, turn), copies = next(
        (k, v) for k, v in _copies_of_root_turns(path).items() if len(v) > 1
    )
    first, other = sorted(copies)[:2]
    _edit(path, "DELETE FROM judgments WHERE conversation_id = ? AND turn_index = ?", (root, turn))
    where = "conversation_id = ? AND turn_index = ? AND criterion_id = 'no_diagnosis'"
    _edit(
        path, f"UPDATE judgments SET verdict = 'fail', applicable = 1 WHERE {where}", (first, turn)
    )
    _edit(
        path, f"UPDATE judgments SET verdict = 'pass', applicable = 1 WHERE {where}", (other, turn)
    )
    a, b = fork_tables(str(path), None), fork_tables(str(path), None, summaries=False)
    assert a is not None and b is not None
    key = ["conversation_id", "judge", "criterion_id"]
    x = a.cc.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(x, b.cc.sort_values(key).reset_index(drop=True))
    jt = run_analysis(str(path), n_boot=50, examples=0, fast=False)
    assert _frames(run_analysis(str(path), n_boot=50, examples=0))["rates"].equals(
        _frames(jt)["rates"]
    )


def test_two_judgments_on_one_turn_make_the_summaries_refuse(tmp_path: Path) -> None:
    path = _forked_store(tmp_path / "forks.db")
    con = sqlite3.connect(str(path))
    with con:
        cur = con.execute("SELECT * FROM judgments WHERE turn_index IS NOT NULL LIMIT 1")
        cols = [d[0] for d in cur.description]
        row = dict(zip(cols, cur.fetchone()))
        row["id"] += "#again"
        con.execute(
            f"INSERT INTO judgments ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [row[c] for c in cols],
        )
    con.close()
    assert read_summaries(str(path)) is None


def test_migration_8_fills_the_summaries_of_an_older_store(store: Path, tmp_path: Path) -> None:
    from branchpoint.core.records import SCHEMA_VERSION
    from branchpoint.core.store import open_store

    old = tmp_path / "old.db"
    src, dst = sqlite3.connect(str(store)), sqlite3.connect(str(old))
    src.backup(dst)
    src.close()
    with dst:
        for name in ("insert", "delete", "update"):
            dst.execute(f"DROP TRIGGER {TABLE}_{name}")
        dst.execute(f"DROP TABLE {TABLE}")
        dst.execute("UPDATE schema_info SET value = '8' WHERE key = 'schema_version'")
    dst.close()
    assert read_summaries(str(old)) is None  # not migrated yet: the per-turn path answers
    s = open_store(old)
    try:
        assert s.schema_version() == SCHEMA_VERSION  # every migration ran, 8 among them
    finally:
        s.close()
    assert _table(old) == _table(store)
    # ... and kept from then on
    _edit(old, "DELETE FROM judgments WHERE rowid % 5 = 0")
    assert _table(old) == sorted(summary_rows(str(old)))


def test_a_store_whose_triggers_were_dropped_is_filled_again_when_opened(
    store: Path, tmp_path: Path
) -> None:
    """A bulk load drops the triggers (benchmarks/analysis_scale.py); if it stops before filling
    the summaries, the analysis does not use them, and the next open fills them from the rows."""
    from branchpoint.core.store import open_store

    copy = tmp_path / "bulk.db"
    src, dst = sqlite3.connect(str(store)), sqlite3.connect(str(copy))
    src.backup(dst)
    src.close()
    with dst:
        dst.execute(f"DROP TRIGGER {TABLE}_insert")
        dst.execute("DELETE FROM judgments WHERE rowid % 3 = 0")
    dst.close()
    assert read_summaries(str(copy)) is None  # not kept: the per-turn rows answer
    open_store(copy).close()
    assert _table(copy) == sorted(summary_rows(str(copy)))
    assert read_summaries(str(copy)) is not None
