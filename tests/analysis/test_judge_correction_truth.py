"""Judge-corrected figures that never claim certainty from a few labels, and a label plan that
asks for labels whatever the judge says (issue 44). Each failed on ec76f8e: "100.0% (100.0% to
100.0%)" from 7 labels, "+0.0 (+0.0 to +0.0)" from 3 and 2 labels, 0 labels for a 0% judge."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from branchpoint.analysis.judge_correction.estimators import (
    LAMBDA_ONE,
    PRIOR_DISAGREEMENT,
    plan_frames,
    ppi_contrast,
    ppi_design,
)
from branchpoint.analysis.stats.intervals import MIN_LABELS_PER_STRATUM, has_valid_width


def _group(n_items: int, n_labels: int, judge: float, human: float, scenarios: int = 6) -> dict:
    """Items of one stratum spread over scenarios; the judge's and the people's verdicts constant."""
    lab = np.zeros(n_items, bool)
    lab[np.linspace(0, n_items - 1, n_labels).astype(int)] = True
    return {
        "yhat": np.full(n_items, judge),
        "y": np.where(lab, human, 0.0),
        "labelled": lab,
        "stratum": np.zeros(n_items),
        "cluster": np.arange(n_items) % scenarios,
    }


@pytest.mark.parametrize(("judge", "human"), [(1.0, 1.0), (0.0, 0.0)])
def test_seven_labels_that_all_agree_do_not_give_a_zero_width_rate(
    judge: float, human: float
) -> None:
    g = _group(120, 7, judge, human)
    est = ppi_design(g["yhat"], g["y"], g["labelled"], g["stratum"], g["cluster"])
    assert not isinstance(est, str)
    iv = est.corrected
    assert iv.estimate == judge
    assert iv.high - iv.low > 0.2  # 7 labels cannot pin a rate down: was 100.0% to 100.0%
    assert iv.low <= judge <= iv.high
    # the exact (Clopper-Pearson) bound for 0 disagreements in 7 is 41%: the floor gives room
    # comparable to it, not the 0 width a plug-in variance gave
    assert max(judge - iv.low, iv.high - judge) > 0.3
    assert est.lambda_rule == LAMBDA_ONE and est.lam == 1.0
    assert has_valid_width(est.human_only.low, est.human_only.high, 7)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_stratum_with_fewer_than_the_minimum_labels_gets_no_figure_and_says_why(n: int) -> None:
    g = _group(60, n, 1.0, 1.0)
    est = ppi_design(g["yhat"], g["y"], g["labelled"], g["stratum"], g["cluster"])
    assert isinstance(est, str)
    assert f"too few labels (< {MIN_LABELS_PER_STRATUM})" in est and "no corrected figure" in est


@pytest.mark.parametrize("n", [2, 3])
def test_a_contrast_from_2_or_3_labels_a_side_is_declined_not_zero_width(n: int) -> None:
    """Was "+0.0 (+0.0 to +0.0)"."""
    got = ppi_contrast(_group(60, n, 0.0, 0.0), _group(60, n, 0.0, 0.0))
    assert isinstance(got, str) and "too few labels" in got


def test_a_contrast_whose_labels_all_agree_has_width() -> None:
    got = ppi_contrast(_group(120, 8, 1.0, 1.0), _group(120, 8, 0.0, 0.0))
    assert not isinstance(got, str)
    iv = got.corrected
    assert iv.estimate == 1.0 and iv.high == 1.0
    assert iv.low < 0.8  # was "+100 (+100 to +100)"


def _judged(rate: float, n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "conversation_id": [f"c{i}" for i in range(n)], "turn_index": 1, "rubric_id": "r",
            "criterion_id": "x", "judge": "j",
            "verdict": np.where(rng.random(n) < rate, "fail", "pass"),
            "created_at": "2026-01-01 00:00:00", "run_id": "r",
            "scenario_id": [f"s{i % 10}" for i in range(n)], "target": "t", "condition": "none",
        }
    )  # fmt: skip


@pytest.mark.parametrize("rate", [0.0, 1.0, 0.3])
def test_labels_plan_asks_the_priors_count_whatever_the_judge_says(rate: float) -> None:
    """A judge that says 0% was given 0 labels: min(disagreement, p(1 - p)) with p its own rate."""
    empty = pd.DataFrame()
    table, notes = plan_frames(_judged(rate), empty, empty, empty, width=10)
    prior = math.ceil(1.959964**2 * PRIOR_DISAGREEMENT / 0.1**2)  # 58
    assert table["needed"].tolist() == [prior]
    assert "15%" in notes[0]


def test_a_judge_only_rate_at_0_percent_in_every_scenario_has_width() -> None:
    """The judge-only figure is from sampled scenarios too: no spread gives the exact bound."""
    g = _group(120, 8, 0.0, 0.0)
    est = ppi_design(g["yhat"], g["y"], g["labelled"], g["stratum"], g["cluster"])
    assert not isinstance(est, str)
    assert est.judge_only.low == 0.0 < est.judge_only.high
    got = ppi_contrast(_group(120, 8, 0.0, 0.0), _group(120, 8, 0.0, 0.0))
    assert not isinstance(got, str)
    assert got.judge_only.low < 0.0 < got.judge_only.high


def test_a_corrected_figure_on_the_plug_in_variance_alone_says_so() -> None:
    """Issue 44 item 8: where the scenario jackknife cannot be computed the plug-in was used
    silently. Each estimate now names the variance it rests on, and the report counts them."""
    from branchpoint.analysis.judge_correction.estimators import (
        VARIANCE_BOTH,
        VARIANCE_PLUG_IN_STRATUM,
    )
    from branchpoint.analysis.judge_correction.section import variance_note

    rng = np.random.default_rng(4)
    spread = _group(120, 24, 0.0, 0.0)
    spread["yhat"] = (rng.random(120) < 0.3).astype(float)
    spread["y"] = np.where(spread["labelled"], spread["yhat"], 0.0)
    one = {k: v.copy() for k, v in spread.items()}
    one["labelled"] = one["cluster"] == 0  # every label in one scenario: no leave-one-out
    one["y"] = np.where(one["labelled"], one["yhat"], 0.0)
    both = ppi_design(spread["yhat"], spread["y"], spread["labelled"], spread["stratum"],
                      spread["cluster"])  # fmt: skip
    alone = ppi_design(one["yhat"], one["y"], one["labelled"], one["stratum"], one["cluster"])
    assert not isinstance(both, str) and not isinstance(alone, str)
    assert both.variance_rule == VARIANCE_BOTH
    assert (
        alone.variance_rule == VARIANCE_PLUG_IN_STRATUM and "plug-in alone" in alone.variance_rule
    )
    contrast = ppi_contrast(spread, one)
    assert not isinstance(contrast, str) and contrast.variance_rule == VARIANCE_PLUG_IN_STRATUM
    table = pd.DataFrame({"variance_rule": [both.variance_rule, alone.variance_rule, ""]})
    assert (
        variance_note(table, "rates")
        == f"1 of 2 corrected rates rest on {VARIANCE_PLUG_IN_STRATUM}."
    )
    assert variance_note(table.iloc[:1], "rates") is None
