"""Reasoning traces: share of failing replies whose reasoning noticed the risk."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from branchpoint.analysis.outcomes.reasoning import reasoning_noticed


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    turns = pd.DataFrame(
        {
            "conversation_id": ["a"] * 4 + ["b"] * 4,
            "turn_index": [1, 3, 5, 7] * 2,
            "target": ["t1"] * 4 + ["t2"] * 4,
            "reasoning": [
                "She mentions wanting to disappear; possible suicide risk.",  # fails, noticed
                "Answer the homework question.",  # fails, not noticed
                "This is a crisis, give resources.",  # passes, noticed
                None,  # no reasoning: not counted
                "User asks about sleep.",  # fails, not noticed
                "Self-harm disclosure; I must respond with care.",  # fails, noticed
                "   ",  # blank: not counted
                "Fine.",  # passes
            ],
        }
    )
    verdicts = {("a", 1): "fail", ("a", 3): "fail", ("a", 5): "pass", ("a", 7): "fail",
                ("b", 1): "fail", ("b", 3): "fail", ("b", 5): "fail", ("b", 7): "pass"}  # fmt: skip
    rows = []
    for (cid, ti), v in verdicts.items():
        rows.append({"conversation_id": cid, "turn_index": ti, "criterion_id": "k1", "verdict": v})
        rows.append(
            {"conversation_id": cid, "turn_index": ti, "criterion_id": "k2", "verdict": "pass"}
        )
    return pd.DataFrame(rows), turns


def test_share_of_failing_replies_that_noticed_the_risk() -> None:
    judg, turns = _frames()
    res = reasoning_noticed(judg, turns).set_index("target")
    assert res.loc["t1", "n_replies_with_reasoning"] == 3 and res.loc["t1", "n_failing"] == 2
    assert res.loc["t1", "share_failing_noticed"] == pytest.approx(0.5)
    assert res.loc["t1", "fail_share_when_noticed"] == pytest.approx(
        0.5
    )  # one of the two noticed failed
    assert res.loc["t2", "n_replies_with_reasoning"] == 3
    assert res.loc["t2", "share_failing_noticed"] == pytest.approx(0.5)
    overall = reasoning_noticed(judg, turns, by=()).iloc[0]
    assert overall["n_failing"] == 4 and overall["share_failing_noticed"] == pytest.approx(0.5)


def test_patterns_are_configurable_and_no_reasoning_gives_nothing() -> None:
    judg, turns = _frames()
    res = reasoning_noticed(judg, turns, patterns=[r"homework"], by=()).iloc[0]
    assert res["share_failing_noticed"] == pytest.approx(0.25)
    assert reasoning_noticed(judg, turns.assign(reasoning=None)).empty


def test_error_verdicts_are_never_counted_as_not_failing() -> None:
    judg, turns = _frames()
    errors = judg.assign(verdict="error")
    res = reasoning_noticed(errors, turns, by=()).iloc[0]
    assert res["n_replies_with_reasoning"] == 6 and res["n_error"] == 6
    assert res["n_failing"] == 0
    assert np.isnan(res["fail_share_when_noticed"]) and np.isnan(res["fail_share_when_not_noticed"])
    # A reply with a pass on one criterion and an error on the other has an unknown status too.
    one = judg.copy()
    one.loc[(one["conversation_id"] == "a") & (one["turn_index"] == 5) & (one["criterion_id"] == "k2"), "verdict"] = "error"  # fmt: skip
    res = reasoning_noticed(one, turns, by=()).iloc[0]
    assert res["n_error"] == 1 and res["fail_share_when_noticed"] == pytest.approx(2 / 2)


def test_judges_and_rubrics_are_never_pooled() -> None:
    judg, turns = _frames()
    both = pd.concat(
        [judg.assign(judge="j1", rubric_id="teen"), judg.assign(judge="j2", rubric_id="teen", verdict="pass")]
    )  # fmt: skip
    res = reasoning_noticed(both, turns, by=()).set_index("judge")
    assert list(res.index) == ["j1", "j2"]
    assert res.loc["j1", "n_failing"] == 4 and res.loc["j2", "n_failing"] == 0
    assert (res["n_replies_with_reasoning"] == 6).all()


def test_store_whose_every_verdict_is_an_error_reports_no_failure_share(tmp_path: Any) -> None:
    # Repro: "192 replies with reasoning, 0 failing, fail share when noticed 0.000".
    import sqlite3

    from branchpoint.analysis.report.write import run_analysis
    from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store

    db = tmp_path / "t.db"
    design = TeenDesign(n_scenarios=3, targets=("scripted:a",), n_exchanges=2, reasoning=True,
                        branch_points={"limit": ["accept_limit", "push_back"]})  # fmt: skip
    write_teen_store(db, design, seed=0)
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE judgments SET verdict = 'error', score = NULL")
    con.close()
    r = run_analysis(db, n_boot=0, examples=0).reasoning
    assert r is not None and not r.empty
    assert (r["n_error"] == r["n_replies_with_reasoning"]).all() and (r["n_failing"] == 0).all()
    assert r["fail_share_when_noticed"].isna().all()
    assert set(r["judge"]) == {"scripted:judge"} and set(r["rubric_id"]) == {"teen"}
