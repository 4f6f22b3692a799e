"""Agreement statistics: our numpy kappa and alpha against scikit-learn and krippendorff."""

from __future__ import annotations

import krippendorff
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from branchpoint.analysis.raters.agreement import (
    agreement_report,
    cohen_kappa_quadratic,
    krippendorff_alpha,
)


@pytest.mark.parametrize("seed", range(8))
def test_quadratic_kappa_equals_sklearn_with_missing_values(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(20, 300)), int(rng.integers(2, 6))
    a = rng.integers(0, k, n).astype(float)
    b = np.where(rng.random(n) < 0.6, a, rng.integers(0, k, n)).astype(float)
    a[rng.random(n) < 0.15] = np.nan
    b[rng.random(n) < 0.15] = np.nan
    ok = ~np.isnan(a) & ~np.isnan(b)
    expected = cohen_kappa_score(a[ok], b[ok], weights="quadratic")
    assert cohen_kappa_quadratic(a, b) == pytest.approx(expected, abs=1e-9)
    # String labels with an explicit order give the same value as their ranks.
    names = np.array(["low", "medium", "high", "x", "y", "z"])[:k]
    sa = [None if np.isnan(v) else names[int(v)] for v in a]
    sb = [None if np.isnan(v) else names[int(v)] for v in b]
    assert cohen_kappa_quadratic(sa, sb, labels=list(names)) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_krippendorff_alpha_equals_the_package_with_missing_values(seed: int, level: str) -> None:
    rng = np.random.default_rng(100 + seed)
    raters, units, k = int(rng.integers(2, 6)), int(rng.integers(10, 120)), int(rng.integers(2, 6))
    truth = rng.integers(0, k, units)
    data = np.where(
        rng.random((raters, units)) < 0.7, truth, rng.integers(0, k, (raters, units))
    ).astype(float)
    data[rng.random(data.shape) < 0.25] = np.nan
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
    assert krippendorff_alpha(data, level) == pytest.approx(expected, abs=1e-9)


def test_alpha_value_domain_orders_strings_like_codes() -> None:
    rng = np.random.default_rng(7)
    data = rng.integers(0, 3, (3, 40)).astype(float)
    data[rng.random(data.shape) < 0.2] = np.nan
    names = np.array(["low", "medium", "high"], dtype=object)
    as_text = np.where(np.isnan(data), None, names[np.nan_to_num(data).astype(int)])
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal")
    assert krippendorff_alpha(as_text, "ordinal", ["low", "medium", "high"]) == pytest.approx(
        expected, abs=1e-9
    )


def test_perfect_and_chance_agreement() -> None:
    x = [0, 1, 2, 2, 1, 0, 1]
    assert cohen_kappa_quadratic(x, x) == pytest.approx(1.0)
    assert krippendorff_alpha(np.array([x, x], dtype=float), "ordinal") == pytest.approx(1.0)


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    # 10 turns of one conversation; the human sees more risk on 3 of the applicable ones.
    human = ["fail", "fail", "partial", "pass", "fail", None, "pass", "fail", "partial", "pass"]
    judge = ["pass", "partial", "partial", "pass", "fail", None, "pass", "fail", "pass", "error"]
    key = {"conversation_id": "c1", "rubric_id": "teen", "criterion_id": "crisis_resources"}
    j = pd.DataFrame([{**key, "turn_index": 2 * i + 1, "judge": "litellm:j", "applicable": v is not None,
                       "verdict": v} for i, v in enumerate(judge)])  # fmt: skip
    h = pd.DataFrame(
        [
            {**key, "turn_index": 2 * i + 1, "annotator": "clin1", "verdict": v}
            for i, v in enumerate(human)
        ]
    )
    return j, h


def test_agreement_report_direction_and_counts() -> None:
    j, h = _frames()
    res = agreement_report(j, h)
    row = res.pairs[
        (res.pairs["criterion_id"] == "(all)") & (res.pairs["kind"] == "judge vs human")
    ].iloc[0]
    assert res.n_errors == 1  # the error verdict is counted and left out
    assert row["n_items"] == 9
    assert row["raw_agreement"] == pytest.approx(6 / 9)  # includes the shared not-applicable item
    assert row["n_applicable"] == 8
    assert row["under"] == pytest.approx(3 / 8) and row["over"] == 0.0
    ordinal = {"pass": 0, "partial": 1, "fail": 2}
    jj = [
        ordinal[v] for v in ["pass", "partial", "partial", "pass", "fail", "pass", "fail", "pass"]
    ]
    hh = [
        ordinal[v] for v in ["fail", "fail", "partial", "pass", "fail", "pass", "fail", "partial"]
    ]
    assert row["kappa_quadratic"] == pytest.approx(
        cohen_kappa_score(jj, hh, weights="quadratic"), abs=1e-9
    )
    assert row["alpha_ordinal"] == pytest.approx(
        krippendorff.alpha(
            reliability_data=np.array([jj, hh], float), level_of_measurement="ordinal"
        ),
        abs=1e-9,
    )


def test_judge_vs_judge_without_humans() -> None:
    j, _ = _frames()
    other = j.assign(judge="heuristic", verdict=j["verdict"].replace({"error": "pass"}))
    res = agreement_report(pd.concat([j, other]), None)
    row = res.pairs[res.pairs["criterion_id"] == "(all)"].iloc[0]
    assert row["kind"] == "judge vs judge" and row["raw_agreement"] == 1.0
    assert any("no human labels" in n for n in res.notes)


def test_ranks_and_codes_looked_up_per_distinct_value_equal_element_by_element() -> None:
    from branchpoint.analysis.raters.agreement import RISK_ORDER, _codes_of, _risk_ranks

    rng = np.random.default_rng(3)
    pool = np.array(["pass", "fail", "partial", "n/a", "refusal", None, float("nan"), "high"],
                    dtype=object)  # fmt: skip
    values = pool[rng.integers(0, len(pool), 500)]
    want = [np.nan if v is None else RISK_ORDER.get(v, np.nan) for v in values]
    np.testing.assert_array_equal(_risk_ranks(values), np.array(want, dtype=float))
    present = np.array(["fail", "pass", "partial"], dtype=object)[rng.integers(0, 3, 300)]
    index = {"pass": 0, "partial": 1, "fail": 2}
    np.testing.assert_array_equal(_codes_of(present, index), [index[v] for v in present])
    with pytest.raises(KeyError):
        _codes_of(np.array(["pass", "refusal"], dtype=object), index)


def test_ratings_that_all_agree_get_no_zero_width_interval() -> None:
    """80 labels that all agreed with the judge gave kappa and alpha "1.0 to 1.0" (a cluster
    bootstrap with no spread) and the judge's sensitivity and specificity "100.0% (100.0% to
    100.0%)" (a tester's store)."""
    from branchpoint.analysis.judge_correction.estimators import weighted_ratio
    from branchpoint.analysis.raters.agreement import kappa_alpha_intervals

    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, 80).astype(float)
    got = kappa_alpha_intervals(a, a.copy(), np.arange(80) % 8)
    assert all(np.isnan(v) for v in got.values())  # declined: the resamples have no spread
    fail = (a == 0).astype(float)
    sens = weighted_ratio(fail * fail, fail, np.ones(80), np.arange(80) % 8)
    assert sens.estimate == 1.0 and 0.5 < sens.low < sens.high == 1.0  # rule 3 over 8 scenarios
