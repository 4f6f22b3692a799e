"""Failure rates from real (synthetic) SQLite stores: definitions, error handling, intervals."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from branchpoint.analysis.outcomes.rates import failure_rates
from branchpoint.analysis.stats.bootstrap import cluster_weights, per_cluster_sums, ratio_interval
from branchpoint.analysis.tables.judgments import (
    aggregate,
    conversation_criterion_table,
    judgment_table,
)
from branchpoint.analysis.testing.synthetic import Effect, TeenDesign, write_teen_store

DESIGN = TeenDesign(
    n_scenarios=30,
    targets=tuple(f"scripted:t{i}" for i in range(4)),
    n_exchanges=6,
    effects=(Effect("limit", "push_back", ("no_diagnosis",), 0.12),),
)


@pytest.fixture(scope="module")
def teen_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("rates") / "teen.db"
    truth = write_teen_store(path, DESIGN, seed=11)
    return path, truth


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_judgment_table_has_one_row_per_judgment_and_choice_columns(
    teen_db: tuple[Path, dict],
) -> None:
    path, truth = teen_db
    jt = judgment_table(path, "synthetic-teen")
    assert len(jt) == len(truth["judgments"])
    for key in ("disclosure", "help", "limit"):
        assert f"choice:{key}" in jt.columns
    assert {
        "target",
        "condition",
        "scenario_id",
        "simulator",
        "turn_index",
        "exchange",
        "verdict",
    } <= set(jt.columns)
    # The exchange comes from the stored turn and agrees with the judged turn's index.
    assert (jt["exchange"] == (jt["turn_index"] + 1) // 2).all()
    # Choices come from the stored JSON, conversation by conversation.
    con = sqlite3.connect(path)
    cid, choices = con.execute("SELECT id, choices FROM conversations LIMIT 1").fetchone()
    row = jt[jt["conversation_id"] == cid].iloc[0]
    assert row["choice:limit"] == json.loads(choices)["limit"]


def test_sql_aggregation_equals_pandas_aggregation(teen_db: tuple[Path, dict]) -> None:
    path, _ = teen_db
    sql = (
        conversation_criterion_table(path)
        .sort_values(["conversation_id", "criterion_id"])
        .reset_index(drop=True)
    )
    pd_ = (
        aggregate(judgment_table(path))
        .sort_values(["conversation_id", "criterion_id"])
        .reset_index(drop=True)
    )
    for col in ("n_rated", "n_fail", "n_partial", "n_error", "n_scored"):
        assert (sql[col].to_numpy() == pd_[col].to_numpy()).all(), col
    assert np.allclose(sql["score_sum"], pd_["score_sum"])


def test_rates_count_partial_in_denominator_and_exclude_errors(teen_db: tuple[Path, dict]) -> None:
    path, truth = teen_db
    j = truth["judgments"]
    rates = failure_rates(conversation_criterion_table(path), by=("condition",), n_boot=200)
    conv = truth["conversations"]
    for cond, row in rates.set_index("condition").iterrows():
        sub = j[j["conversation_id"].isin(conv.loc[conv["condition"] == cond, "conversation_id"])]
        rated = sub[sub["applicable"] & sub["verdict"].isin(["pass", "partial", "fail"])]
        assert row["n_rated"] == len(rated)
        assert row["n_fail"] == (rated["verdict"] == "fail").sum()
        assert row["n_partial"] == (rated["verdict"] == "partial").sum() > 0
        assert row["n_error"] == (sub["verdict"] == "error").sum() > 0
        assert row["rate"] == pytest.approx((rated["verdict"] == "fail").mean())


def test_rates_recover_the_condition_effect(teen_db: tuple[Path, dict]) -> None:
    path, _ = teen_db
    rates = failure_rates(
        conversation_criterion_table(path), by=("condition", "criterion_id"), n_boot=300
    )
    other = rates[rates["criterion_id"] != "no_diagnosis"].groupby("condition")["rate"].mean()
    assert other["none"] == pytest.approx(DESIGN.base_fail, abs=0.03)
    assert other["none"] - other["teen_aware"] == pytest.approx(0.15, abs=0.02)
    assert (rates["ci_low"] < rates["rate"]).all() and (rates["rate"] < rates["ci_high"]).all()


def test_conversation_level_fails_when_any_turn_fails() -> None:
    judg = pd.DataFrame(
        {
            "conversation_id": ["a", "a", "a", "b", "b", "c", "c"],
            "rubric_id": "teen", "criterion_id": "k", "risk_area": "r", "judge": "j",
            "turn_index": [1, 3, 5, 1, 3, 1, 3],
            "applicable": [True, True, False, True, True, True, False],
            "verdict": ["pass", "fail", None, "partial", "pass", "error", None],
            "score": [1.0, 0.0, None, 0.5, 1.0, None, None],
            "scenario_id": ["s1", "s1", "s1", "s2", "s2", "s3", "s3"],
            "target": "t", "condition": "none", "simulator": "sim", "run_id": "r", "replicate": 0,
        }
    )  # fmt: skip
    conv = failure_rates(judg, by=(), level="conversation", n_boot=0).iloc[0]
    turn = failure_rates(judg, by=(), level="turn", n_boot=0).iloc[0]
    # a fails (one failing turn), b does not, c has only an error: not a rated conversation.
    assert (conv["n_fail"], conv["n_rated"], conv["rate"]) == (1, 2, 0.5)
    assert (turn["n_fail"], turn["n_rated"], turn["n_partial"], turn["n_error"]) == (1, 4, 1, 1)
    assert turn["rate"] == 0.25


def test_two_judges_are_never_pooled(teen_db: tuple[Path, dict]) -> None:
    path, _ = teen_db
    cc = conversation_criterion_table(path)
    both = pd.concat([cc, cc.assign(judge="heuristic")])
    rates = failure_rates(both, by=("condition",), n_boot=0)
    assert set(rates["judge"]) == {"scripted:judge", "heuristic"} and len(rates) == 4


def test_bootstrap_is_seeded() -> None:
    a = cluster_weights(20, 50, seed=3)
    b = cluster_weights(20, 50, seed=3)
    assert (a == b).all() and (a.sum(1) == 20).all()
    assert not (cluster_weights(20, 50, seed=4) == a).all()


def test_cluster_bootstrap_intervals_cover_the_truth_near_nominal() -> None:
    """200 simulated studies with scenario-level clustering; the 95% interval covers the truth."""
    rng = np.random.default_rng(2024)
    truth, n_scen, n_conv, n_turns, sd = 0.30, 30, 8, 6, 0.08
    covered = 0
    reps = 200
    for r in range(reps):
        p_s = np.clip(truth + rng.normal(0, sd, n_scen), 0.01, 0.99)  # symmetric: mean stays 0.30
        n = rng.binomial(n_turns, 0.7, size=(n_scen, n_conv))  # applicable ratings per conversation
        f = rng.binomial(n, p_s[:, None])
        num = f.sum(1, keepdims=True).astype(float)
        den = n.sum(1, keepdims=True).astype(float)
        est, lo, hi = ratio_interval(num, den, cluster_weights(n_scen, 400, seed=r), 0.95)
        covered += int(lo[0] <= truth <= hi[0])
    coverage = covered / reps
    assert 0.88 <= coverage <= 0.99, coverage


def test_per_cluster_sums_matches_groupby() -> None:
    rng = np.random.default_rng(0)
    cl, g, v = rng.integers(0, 5, 100), rng.integers(0, 3, 100), rng.random(100)
    m = per_cluster_sums(cl, g, v, 5, 3)
    ref = pd.DataFrame({"c": cl, "g": g, "v": v}).pivot_table(
        index="c", columns="g", values="v", aggfunc="sum", fill_value=0
    )
    assert np.allclose(m, ref.reindex(index=range(5), columns=range(3), fill_value=0).to_numpy())


@pytest.mark.slow  # over 2 s (about 3 s of CPU): make test runs it, test-fast does not
def test_fast_reader_equals_sql_group_by_on_interleaved_rows_and_two_judges(
    teen_db: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from branchpoint.analysis.tables import judgments as tables

    path = tmp_path / "shuffled.db"
    shutil.copy(teen_db[0], path)
    con = sqlite3.connect(path)
    with con:
        con.execute("CREATE TEMP TABLE j2 AS SELECT * FROM judgments")
        con.execute("DELETE FROM judgments")
        cols = [r[1] for r in con.execute("PRAGMA table_info(judgments)")]
        sel = ", ".join(f'"{c}"' for c in cols)
        # Rows of every conversation scattered, and a second judge (another rubric id) interleaved.
        con.execute(f"INSERT INTO judgments ({sel}) SELECT {sel} FROM j2 ORDER BY random()")
        heur = (
            sel.replace('"id"', "id || ':h'")
            .replace('"judge"', "'heuristic'")
            .replace('"rubric_id"', "'teen-v2'")
        )
        con.execute(
            f"INSERT INTO judgments ({sel}) SELECT {heur} FROM j2 WHERE rowid % 3 = 0 ORDER BY random()"
        )
        con.execute("DELETE FROM judgments WHERE rowid % 97 = 0")  # gaps in the rowids
    con.close()
    monkeypatch.setattr(tables, "CHUNK_ROWS", 5000)  # chunks that mix judges
    keys = ["conversation_id", "rubric_id", "criterion_id", "judge"]
    fast = conversation_criterion_table(path).sort_values(keys).reset_index(drop=True)
    slow = conversation_criterion_table(path, fast=False).sort_values(keys).reset_index(drop=True)
    assert len(fast) == len(slow) and set(fast["judge"]) == {"scripted:judge", "heuristic"}
    for col in [
        *keys,
        "risk_area",
        "n_rated",
        "n_fail",
        "n_partial",
        "n_error",
        "n_scored",
        "target",
        "choice:limit",
    ]:
        assert (fast[col].astype(str).to_numpy() == slow[col].astype(str).to_numpy()).all(), col
    assert np.allclose(fast["score_sum"], slow["score_sum"])
