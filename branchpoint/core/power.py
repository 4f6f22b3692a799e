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

ALPHA = 0.05
POWER = 0.8


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
