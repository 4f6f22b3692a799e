"""The plan's detectable differences are for the test the analysis runs at that design (issue 44):
both take ``branchpoint.core.power.scenario_test``. Failed on ec76f8e, which printed the t-test's
"+64.7 points" at 4 scenarios where the analysis runs the sign-flip test."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from branchpoint.analysis.stats.inference import scenario_level_test
from branchpoint.core.power import (
    SIGN_FLIP,
    T_TEST,
    TOO_FEW,
    detectable_difference,
    paired_cluster_mdd,
    scenario_test,
)
from branchpoint.study.detectable import ContrastPairs, lines


def _contrast(scenarios: int, pairs: int = 6) -> dict[tuple[str, str, str], ContrastPairs]:
    key = ("help", "accept", "decline")
    c = ContrastPairs(key, Counter({("none", f"s{i}"): pairs for i in range(scenarios)}))
    return {key: c}


def test_a_four_scenario_plan_says_no_effect_is_detectable() -> None:
    text = "\n".join(lines(_contrast(4), 0.1, 1))
    assert "no effect detectable with 4 scenarios: the smallest possible p is 0.125" in text
    assert "points" not in text.split("\n")[-1]


@pytest.mark.parametrize("s", [3, 4, 5])
def test_at_3_to_5_scenarios_nothing_is_detectable_because_the_sign_flip_test_cannot_reject(
    s: int,
) -> None:
    mdd, why = detectable_difference(0.1, [6] * s)
    assert mdd is None and f"{2 / 2**s:.3g}" in why
    # the analysis, given the largest possible effect in every scenario, cannot reject either
    r = scenario_level_test(np.ones(s), np.arange(s), np.zeros(s, int), 1, bounds=(-1, 1))
    assert r.method == [SIGN_FLIP] and r.pvalue[0] >= 0.05


@pytest.mark.parametrize("s", [1, 2, 3, 5, 6, 12])
def test_plan_and_analysis_choose_the_same_test(s: int) -> None:
    x = np.linspace(-0.1, 0.3, s)
    r = scenario_level_test(x, np.arange(s), np.zeros(s, int), 1, bounds=(-1, 1))
    assert r.method[0] == scenario_test(s)
    mdd, why = detectable_difference(0.1, [20] * s)
    if scenario_test(s) == T_TEST:
        assert mdd == paired_cluster_mdd(0.1, [20] * s) and why == ""
    else:
        assert mdd is None and why
    assert (scenario_test(s) == TOO_FEW) == (s < 3)


@pytest.mark.parametrize("s", [2, 3, 5, 6, 12, 25])
def test_the_exact_option_is_one_rule_for_plan_and_analysis(s: int) -> None:
    """The time-to-failure comparison's ``exact`` option (the sign-flip test at every number of
    scenarios) is taken by ``scenario_test``, so the rule stays defined once."""
    x = np.linspace(-0.1, 0.3, s)
    r = scenario_level_test(x, np.arange(s), np.zeros(s, int), 1, bounds=(-1, 1), exact=True)
    assert r.method[0] == scenario_test(s, exact=True)
    assert scenario_test(s, exact=True) == (TOO_FEW if s < 3 else SIGN_FLIP)
