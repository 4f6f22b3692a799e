"""The smallest difference in failure rate a matched, scenario-clustered design can detect.

The primary contrast test (``branchpoint.analysis.contrasts.matched``) averages each pair's difference (option minus
baseline) within each scenario and runs a one-sample t-test over the scenario means, S - 1
degrees of freedom. Its minimal detectable difference (MDD) at a given power, for k scenarios
with n_s pairs each and a binary outcome ("any post-fork turn failed") at base rate p in the
baseline arm, is the delta that solves

    delta = (t_{1-alpha/2, k-1} + t_{power, k-1}) * sd / sqrt(k),
    sd^2  = (p (1 - p) + q (1 - q)) * mean_s(1 / n_s),        q = p + delta,

the usual approximation of the t-test's power (quantiles of t rather than z: with ten scenarios
z would promise power the test does not have). Assumptions, each conservative or stated:

* the two arms of a pair are independent (no within-pair correlation; a real positive
  correlation shrinks the variance of a difference, so the true MDD is smaller);
* every scenario has the same effect and base rate (scenario-to-scenario variation in the effect
  adds variance, which this does not count: the true MDD is then larger);
* every planned pair realises its option (pairs that never fork leave the test);
* the outcome is binary; the per-turn post-fork failure proportion, a mean of such outcomes, has
  at most this variance.

Generic statistics with no dependency on the rest of the project, so that the sweep plan
(simulator) and the analysis can both use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from branchpoint.core.words import counted

ALPHA = 0.05
POWER = 0.8

# Which scenario-level test the analysis runs, decided here once, so that the plan
# (``branchpoint.study.detectable``) and the analysis (``branchpoint.analysis.stats.inference``)
# take the same path. Why these numbers: see ``scenario_test``.
MIN_TEST_CLUSTERS = 3
T_TEST_MIN_CLUSTERS = 6
TOO_FEW = "too few scenarios to test"
T_TEST = "t"
SIGN_FLIP = "exact sign-flip"


def scenario_test(n_scenarios: int, *, no_spread: bool = False, exact: bool = False) -> str:
    """The scenario-level test for ``n_scenarios`` scenario means: ``TOO_FEW`` below
    ``MIN_TEST_CLUSTERS`` (two means can never carry evidence: an exact test's smallest p is 0.5,
    a t-test has one degree of freedom), the exact sign-flip test below ``T_TEST_MIN_CLUSTERS`` or
    when the means have no spread (the t-test's size under a two-point null is 25% at 3, 12.5% at
    4 and 6.25% at 5 scenarios; with no spread its statistic is 0/0), else the t-test.

    ``exact``: the sign-flip test at every number of scenarios from ``MIN_TEST_CLUSTERS``, for an
    outcome whose scenario means are bounded and light-tailed enough that the t-test does not
    keep its size at ten scenarios (the time-to-failure comparison's restricted-mean
    differences: 5.2% in 20,000 simulated null studies, see docs/methods/time-to-failure.md).
    The sign-flip test is exact whenever the two arms are exchangeable within a scenario."""
    if n_scenarios < MIN_TEST_CLUSTERS:
        return TOO_FEW
    if n_scenarios < T_TEST_MIN_CLUSTERS or no_spread or exact:
        return SIGN_FLIP
    return T_TEST


def sign_flip_min_p(n_scenarios: int) -> float:
    """The smallest two-sided p the exact sign-flip test can give over ``n_scenarios`` means: the
    two patterns where every sign agrees, of 2^S (4 scenarios: 0.125)."""
    return 2.0 / 2.0**n_scenarios


def detectable_difference(
    base_rate: float,
    pairs_per_cluster: Sequence[int],
    *,
    alpha: float = ALPHA,
    power: float = POWER,
) -> tuple[float | None, str]:
    """(MDD, why) for the test the analysis will run at this design (``scenario_test``): the
    t-test's MDD (``paired_cluster_mdd``) where it runs; where the sign-flip test runs and its
    smallest possible p is not below ``alpha``, no MDD and the reason (3 to 5 scenarios at
    alpha 0.05); with too few scenarios, no test. ``why`` is empty when an MDD is given."""
    k = len([n for n in pairs_per_cluster if n > 0])
    kind = scenario_test(k)
    if kind == TOO_FEW:
        return None, f"no test with {counted(k, 'scenario')}"
    if kind == SIGN_FLIP and sign_flip_min_p(k) >= alpha:
        return None, (
            f"no effect detectable with {k} scenarios: the smallest possible p is "
            f"{sign_flip_min_p(k):.3g}"
        )
    mdd = paired_cluster_mdd(base_rate, pairs_per_cluster, alpha=alpha, power=power)
    return mdd, "" if mdd is not None else f"none up to a rate of 1 at {power:.0%} power"


def paired_cluster_mdd(
    base_rate: float,
    pairs_per_cluster: Sequence[int],
    *,
    alpha: float = ALPHA,
    power: float = POWER,
) -> float | None:
    """The MDD (an increase over ``base_rate``, in proportion units) of the scenario-level paired
    t-test, two-sided at ``alpha``, with ``pairs_per_cluster[s]`` pairs in scenario s (see the
    module docstring for the formula and its assumptions).

    None when there is no test (fewer than two scenarios with a pair) or when no increase up to
    a failure rate of 1 reaches ``power``."""
    from scipy import stats

    if not 0 < base_rate < 1:
        raise ValueError(f"base_rate {base_rate} is not strictly between 0 and 1")
    sizes = [n for n in pairs_per_cluster if n > 0]
    k = len(sizes)
    if k < 2:
        return None
    factor = float(stats.t.ppf(1 - alpha / 2, k - 1) + stats.t.ppf(power, k - 1))
    inv_n = sum(1 / n for n in sizes) / k
    p = base_rate

    def needed(delta: float) -> float:
        q = p + delta
        return factor * math.sqrt((p * (1 - p) + q * (1 - q)) * inv_n / k)

    # needed(delta) is concave in delta (the root of a concave quadratic) and positive at 0, so
    # needed(delta) - delta crosses zero at most once: bisection on [0, 1 - p] finds it.
    lo, hi = 0.0, 1.0 - p
    if needed(hi) > hi:
        return None
    for _ in range(60):
        mid = (lo + hi) / 2
        if needed(mid) > mid:
            lo = mid
        else:
            hi = mid
    return hi
