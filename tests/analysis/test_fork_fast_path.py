"""The analysis of a store with forks, copies, two judges, two judge versions and two simulators
gives the same tables through the SQLite fast path (``branchpoint.analysis.pairing.fork_summaries.fork_tables``: counted from
the judgment rows' codes) as through the judgment table."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import branchpoint.analysis.pipeline as pipeline
from branchpoint.analysis.pipeline import run_analysis
from branchpoint.analysis.testing.synthetic import write_forked_teen_store

_forked_store = write_forked_teen_store  # test_fork_summaries imports it by this name


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _forked_store(tmp_path_factory.mktemp("forkfast") / "forks.db")


def _frames(a: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "n_conversations": a.n_conversations,
        "n_judgments": a.n_judgments,
        "n_copied": a.n_copied_conversations,
        "notes": a.notes,
        "primary_judge": a.primary_judge,
    }
    for name in ("rates", "rates_target_condition", "rates_condition",
                 "rates_condition_conversation", "rates_risk_area", "errors",
                 "simulator_conclusions"):  # fmt: skip
        out[name] = getattr(a, name)
    for name in ("contrasts", "condition", "simulators"):
        res = getattr(a, name)
        out[f"{name}.notes"] = res.notes
        for part in ("contrasts", "per_target", "friedman"):
            out[f"{name}.{part}"] = getattr(res, part)
    # the branch options' time to failure pairs the arms as the contrasts did, on either path
    for part in ("per_target", "per_arm", "matched"):
        out[f"time_to_failure.{part}"] = getattr(a.time_to_failure, part)
    out["chatbots.ranking"] = a.chatbots.ranking
    return out


@pytest.mark.slow
def test_the_fast_path_gives_the_tables_of_the_judgment_table(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = pipeline.fork_tables

    def spy(*args: Any, **kw: Any) -> Any:
        got = real(*args, **kw)
        calls.append(got)
        return got

    monkeypatch.setattr(pipeline, "fork_tables", spy)
    fast = run_analysis(str(store), n_boot=200, examples=0)
    assert calls and calls[0] is not None  # the fast path ran
    slow = run_analysis(str(store), n_boot=200, examples=0, fast=False)
    assert len(calls) == 1  # ... and only when asked
    # The store is what the test means: forks, copies, two judges, two versions, two simulators.
    assert fast.n_copied_conversations > 0
    assert any("versions" in n for n in fast.notes)
    assert fast.simulators is not None and not fast.simulators.contrasts.empty
    assert not fast.contrasts.contrasts.empty and not fast.contrasts.friedman.empty
    a, b = _frames(fast), _frames(slow)
    for name, got in a.items():
        want = b[name]
        if isinstance(got, pd.DataFrame):
            assert not got.empty or want.empty, name
            pd.testing.assert_frame_equal(
                got.reset_index(drop=True), want.reset_index(drop=True), obj=name
            )
        else:
            assert got == want, name


def test_the_fork_counts_cut_the_shared_prefix(store: Path) -> None:
    """The per-turn counts of the fast path: a pair's post-fork ratings, counted by hand."""
    from branchpoint.analysis.pairing.fork_summaries import fork_tables

    ft = fork_tables(str(store), None)
    assert ft is not None
    cc = ft.paired.cc
    con = sqlite3.connect(str(store))
    cid, parent, fork = con.execute(
        "SELECT id, parent_id, fork_turn FROM conversations WHERE fork_turn IS NOT NULL LIMIT 1"
    ).fetchone()
    want = con.execute(
        "SELECT COUNT(*) FROM judgments WHERE conversation_id = ? AND criterion_id = ? AND "
        "judge = 'scripted:judge' AND prompt_version = 'v1' AND turn_index >= ? AND applicable "
        "AND verdict IN ('pass', 'fail', 'partial')",
        (cid, "no_diagnosis", fork),
    ).fetchone()[0]
    con.close()
    row = np.flatnonzero(
        (cc["conversation_id"] == cid).to_numpy()
        & (cc["criterion_id"] == "no_diagnosis").to_numpy()
        & (cc["judge"].str.startswith("scripted:judge [").to_numpy()
           & cc["judge"].str.endswith("prompt v1]").to_numpy())
    )  # fmt: skip
    assert len(row) == 1
    got = ft.paired.turns.after(row, np.array([float(fork)]))
    assert got["n_rated"][0] == want


def test_first_of_each_prefers_the_root_row_then_the_first_copy() -> None:
    from branchpoint.analysis.pairing.forks import first_of_each

    key = np.array([5, 3, 5, 7, 7, 3, 9])
    own = np.array([False, True, True, False, False, False, False])
    # 5: the own row (2) wins over the earlier copy (0); 3: own row 1; 7: first copy (3); 9: 6.
    assert first_of_each(key, own).tolist() == [False, True, True, True, False, False, True]
    # Only copies (no root row judged): the first of each.
    assert first_of_each(key, np.zeros(7, dtype=bool)).tolist() == [
        True, True, False, True, False, False, True
    ]  # fmt: skip
