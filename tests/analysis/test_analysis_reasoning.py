"""Reasoning traces: share of failing replies whose reasoning noticed the risk."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.reasoning import reasoning_noticed


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
