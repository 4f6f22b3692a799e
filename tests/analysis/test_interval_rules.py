"""The interval rules of issue 44 (``branchpoint.analysis.stats.intervals``): no 95% interval from
sampled data has zero width; where the usual interval degenerates, an exact bound that stays
valid. Each test failed on ec76f8e."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from branchpoint.analysis.contrasts.matched import matched_contrasts
from branchpoint.analysis.stats.inference import SIGN_FLIP, scenario_level_test
from branchpoint.analysis.stats.intervals import has_valid_width, no_spread_interval


def _six_scenarios_all_fail_on_one_arm(n: int = 6) -> pd.DataFrame:
    rows = []
    for s in range(n):
        for arm, fails in (("accept_limit", 0), ("push_back", 3)):
            rows.append({"conversation_id": f"{arm}-{s}", "run_id": "r", "scenario_id": f"s{s}",
                         "target": "t", "condition": "none", "simulator": "sim", "replicate": 0,
                         "rubric_id": "r", "criterion_id": "x", "judge": "j", "risk_area": "a",
                         "n_rated": 3, "n_fail": fails, "n_partial": 0, "n_error": 0,
                         "n_other": 0, "score_sum": float(3 - fails), "n_scored": 3,
                         "choice:limit": arm})  # fmt: skip
    return pd.DataFrame(rows)


def test_six_scenarios_each_at_plus_100_get_an_interval_of_non_zero_width() -> None:
    """Was "+100.0 to +100.0 (exact sign-flip)"; now +8.1 to +100.0, the exact bound."""
    res = matched_contrasts(_six_scenarios_all_fail_on_one_arm(), {"limit": "accept_limit"})
    row = res.contrasts.iloc[0]
    assert row["diff"] == 1.0
    assert row["p_scenario"] == pytest.approx(2 / 64)  # the sign-flip p is unchanged
    assert row["ci_high"] == 1.0
    assert row["ci_low"] == pytest.approx(1 - 2 * (1 - 0.025 ** (1 / 6)))  # +0.0815
    assert 0.08 < row["ci_low"] < 0.09
    assert "exact bound" in row["interval"]


@pytest.mark.parametrize("value", [-1.0, -0.4, 0.0, 0.25, 1.0])
@pytest.mark.parametrize("s", [6, 8, 12, 30])
def test_no_spread_among_scenario_means_never_gives_zero_width(value: float, s: int) -> None:
    r = scenario_level_test(np.full(s, value), np.arange(s), np.zeros(s, int), 1, bounds=(-1, 1))
    assert r.method == [SIGN_FLIP]
    assert r.ci_low[0] < r.ci_high[0]
    assert r.ci_low[0] <= value <= r.ci_high[0]
    assert has_valid_width(r.ci_low[0], r.ci_high[0], s)


def test_without_bounds_no_spread_gives_no_interval_and_says_why() -> None:
    r = scenario_level_test(np.full(8, 0.3), np.arange(8), np.zeros(8, int), 1)
    assert np.isnan(r.ci_low[0]) and np.isnan(r.ci_high[0])
    assert "no spread" in r.labels()[0]


@pytest.mark.parametrize("s", [6, 10])
def test_the_no_spread_bound_is_exact_for_the_worst_two_point_distribution(s: int) -> None:
    """At the bound's upper end, a distribution on {v, b} with that mean gives S equal values
    with probability alpha / 2 exactly: no valid interval can be narrower. Enumerate to check
    coverage over every outcome of that distribution."""
    v, b = 0.0, 1.0
    _, hi = no_spread_interval(v, s, (-1.0, 1.0))
    mu = hi  # P(X = b) = mu, P(X = v) = 1 - mu
    assert (1 - mu) ** s == pytest.approx(0.025)
    # a mean just above the upper end is excluded when all S agree, which happens with
    # probability just under 2.5%: the interval's miss rate on that side is at most 2.5%
    missed = 0.0
    for k in range(s + 1):  # k scenarios at b
        prob = float(math.comb(s, k)) * (mu + 1e-6) ** k * (1 - mu - 1e-6) ** (s - k)
        x = np.array([b] * k + [v] * (s - k))
        r = scenario_level_test(x, np.arange(s), np.zeros(s, int), 1, bounds=(-1, 1))
        if not r.ci_low[0] <= mu + 1e-6 <= r.ci_high[0]:
            missed += prob
    assert missed <= 0.05 + 1e-9


def test_every_scenario_interval_from_sampled_data_has_width() -> None:
    """All 3^6 scenario-mean patterns over {-1, 0, 1}: none gives a zero-width interval."""
    for x in itertools.product([-1.0, 0.0, 1.0], repeat=6):
        r = scenario_level_test(np.array(x), np.arange(6), np.zeros(6, int), 1, bounds=(-1, 1))
        assert has_valid_width(r.ci_low[0], r.ci_high[0], 6), x


def test_equal_scenario_means_that_differ_in_the_last_bit_get_the_exact_bound() -> None:
    """2/3 reached two ways differs in its last bit: the rule did not see "no spread" and gave
    the inversion's "+66.7 to +66.7" (a tester's compare of two chatbots over 7 scenarios)."""
    means = np.array(
        [2 / 3, 1 - 1 / 3, 2 / 3, 2 * (1 / 3), 2 / 3, 1 - 1 / 3, 0.2 + 0.4666666666666667]
    )
    assert len(set(means.tolist())) > 1  # not bit-identical
    got = scenario_level_test(means, np.arange(7), np.zeros(7, np.int64), 1, bounds=(-1.0, 1.0))
    assert got.ci_high[0] - got.ci_low[0] > 0.2
    assert (got.ci_low[0], got.ci_high[0]) == pytest.approx(no_spread_interval(2 / 3, 7, (-1, 1)))
    assert "exact bound" in got.labels()[0] and "p: the exact sign-flip test" in got.labels()[0]
