"""The interval rules, stated once; every contrast and rate interval goes through them.

1. **Zero width only where nothing was sampled.** A 95% interval computed from sampled data
   (scenarios, pairs, labels) never has zero width: ``has_valid_width`` is the check the tests
   and the invariants apply to every output.
2. **No spread among the scenario means of a bounded effect.** When every one of S scenario
   means equals the same value v, the t statistic is 0/0 and the sign-flip interval collapses to
   v. Neither says anything about scenarios not sampled. ``no_spread_interval`` gives the exact
   worst-case interval over every distribution on the bounds [a, b]: if the mean is mu > v, each
   scenario equals v with probability at most q = 1 - (mu - v) / (b - v) (Markov's inequality on
   b - X), so all S agree with probability at most q^S; the interval keeps every mu for which
   that is above alpha / 2:

       v - (v - a) (1 - (alpha/2)^(1/S))  to  v + (b - v) (1 - (alpha/2)^(1/S)).

   Six scenarios each at +100 points (a difference of failure rates, bounds -100 to +100):
   +8.1 to +100.0. It cannot be narrower and stay valid for every bounded distribution: a
   two-point distribution on {v, b} with mu at the upper end gives S equal values with
   probability alpha / 2 exactly. Without bounds there is no such interval, and none is given
   (``NO_SPREAD_UNBOUNDED``).
3. **Too few scenarios for any test** (fewer than ``MIN_TEST_CLUSTERS``): no interval, said in
   words. At 3 to 5 scenarios the sign-flip interval excludes nothing and is the bounds.
4. **Judge-corrected strata** (``branchpoint.analysis.judge_correction``): a stratum with fewer
   than ``MIN_LABELS_PER_STRATUM`` labels gives no corrected figure and says so; above it the
   rectifier's variance in each stratum is at least ``rectifier_floor(n_h)``, so labels that all
   agree do not make the interval zero width.

``docs/methods/intervals.md`` states each rule with the test that holds it.
"""

from __future__ import annotations

import math

import numpy as np

from branchpoint.core.power import MIN_TEST_CLUSTERS

NO_SPREAD = "exact bound, no spread"
NO_SPREAD_UNBOUNDED = "none: the scenario means have no spread and the outcome has no bounds"

# Below this many labels in a stratum the judge-corrected rate is not given. With 2 and 3 labels a
# stratum's corrected rate covered 30.6% and 51.3% (issue 44): the rectifier's spread cannot be
# learnt from so few, and the floor below alone would make every such interval the whole range.
MIN_LABELS_PER_STRATUM = 5


def no_spread_interval(
    value: float, n: int, bounds: tuple[float, float], ci: float = 0.95
) -> tuple[float, float]:
    """The interval for the mean when all ``n`` sampled means equal ``value`` (see rule 2)."""
    a, b = bounds
    if n <= 0:
        return math.nan, math.nan
    shrink = 1.0 - ((1.0 - ci) / 2.0) ** (1.0 / n)
    return max(a, value - (value - a) * shrink), min(b, value + (b - value) * shrink)


def no_spread_label(n: int) -> str:
    # The p beside it stays the sign-flip test's (the arms exchangeable): it can fall below 0.05
    # where this interval, which allows any spread of scenarios not sampled, holds 0; say which
    # is which so that the two do not read as one method.
    return (
        f"{NO_SPREAD} over {n} equal scenario means (the interval: the worst case within the "
        "bounds; p: the exact sign-flip test)"
    )


def rectifier_floor(n_labels: np.ndarray | float) -> np.ndarray:
    """The least variance a stratum's rectifier (human - lambda * judge) is given, from its
    ``n_labels``: q (1 - q) with q = 4 / (n + 4), four disagreements' worth added to the n
    labels. Why four: when all n labels agree, the interval's half-width is then about
    1.96 * 2 / n = 3.9 / n, the exact (Clopper-Pearson) 97.5% upper bound on a disagreement
    rate of which none was seen in n is 3.7 / n (n = 17: 0.187 against 0.195; n = 50: 0.073
    against 0.071). A smaller floor (one disagreement in n + 2) left stratum rates at 91.7%
    where the judge says 100% (benchmarks/judge_correction_grid.py). Seven labels that all agree:
    variance 0.23; 100 labels: 0.037, so the floor acts wherever fewer than about 4 of 100
    labels disagree with the judge."""
    q = 4.0 / (np.asarray(n_labels, dtype=float) + 4.0)
    return q * (1.0 - q)


def has_valid_width(low: float, high: float, n_sampled: int) -> bool:
    """Rule 1: an interval from ``n_sampled`` > 0 units has positive width or is not given."""
    if n_sampled <= 0:
        return True
    if math.isnan(low) or math.isnan(high):
        return True  # declined, with the reason said beside it
    return high > low


__all__ = [
    "MIN_LABELS_PER_STRATUM",
    "MIN_TEST_CLUSTERS",
    "NO_SPREAD",
    "NO_SPREAD_UNBOUNDED",
    "has_valid_width",
    "no_spread_interval",
    "no_spread_label",
    "rectifier_floor",
]
