"""Kaplan-Meier curves, their median and restricted mean, and the (stratified) log-rank test.

Time is counted in exchanges (a persona message and the chatbot's reply): an event at exchange
t means the chatbot's reply of exchange t was the first to fail. The estimator and its interval
are the textbook ones that ``lifelines`` computes (a test checks them to 1e-9):

* S(t) = prod over event times u <= t of (1 - d_u / n_u), n_u at risk just before u;
* the 95% interval is the "exponential Greenwood" (log(-log)) one: with
  V(t) = sum d_u / (n_u (n_u - d_u)) / log(S(t))^2, the bounds are
  exp(-exp(log(-log S(t)) +- z sqrt(V(t)))); where S(t) = 1 no interval is computed and the
  bounds are 1 (nothing has failed);
* the median is the first time at which S(t) <= 0.5 (infinite when the curve never gets there);
* the median's interval is read in continuous time (see ``KaplanMeier.median_interval``): it is
  a separate summary, not lifelines' (which would give "2 (2 to 2)" where the band crosses 0.5
  within one exchange: an interval of zero width from sampled data, which the project forbids);
* the restricted mean to ``tau`` is the area under the step curve from 0 to tau: the expected
  number of exchanges a conversation lasts without a failure, counting only the first tau.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from branchpoint.analysis.stats.distributions import chi2_sf


@dataclass(frozen=True)
class KaplanMeier:
    """A Kaplan-Meier curve on its timeline (0, then every distinct observed time)."""

    timeline: np.ndarray
    at_risk: np.ndarray  # n at risk just before each time
    events: np.ndarray  # failures at each time
    censored: np.ndarray  # censorings at each time
    survival: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    n: int

    @property
    def median(self) -> float:
        below = np.flatnonzero(self.survival <= 0.5)
        return float(self.timeline[below[0]]) if len(below) else float("inf")

    def median_interval(self) -> tuple[float, float]:
        """The median's 95% interval (the curve's ``ci``), on the continuous-time reading of
        exchanges: a failure counted at exchange t happened during exchange t, in (t - 1, t] of
        the conversation's underlying time, and the median is the time at which the true curve
        reaches 0.5. Where the curve's lower band is still above 0.5 (every exchange before
        t_low, the first at which it is at or below), the true curve is too, so the median is
        past the end of exchange t_low - 1; from t_high, the first exchange at which the upper
        band is at or below 0.5, the true curve is too, so the median is at or before t_high.
        The interval is t_low - 1 to t_high: at least one exchange wide, never zero width (the
        discrete reading, t_low to t_high, is zero wide when the band crosses 0.5 within one
        exchange). An end the band never reaches is infinite (not given)."""
        below_low = np.flatnonzero(self.ci_low <= 0.5)
        below_high = np.flatnonzero(self.ci_high <= 0.5)
        low = float(self.timeline[below_low[0]]) - 1.0 if len(below_low) else float("inf")
        high = float(self.timeline[below_high[0]]) if len(below_high) else float("inf")
        return low, high

    def at(self, t: float) -> float:
        """S(t) (the step curve, right-continuous)."""
        i = int(np.searchsorted(self.timeline, t, side="right")) - 1
        return float(self.survival[max(i, 0)])

    def restricted_mean(self, tau: float) -> float:
        """Area under S from 0 to ``tau``."""
        t = self.timeline
        keep = t < tau
        edges = np.append(t[keep], tau)
        return float(np.sum(self.survival[keep] * np.diff(edges)))


def kaplan_meier(time: np.ndarray, event: np.ndarray, ci: float = 0.95) -> KaplanMeier:
    """The Kaplan-Meier curve of ``time`` (> 0) with ``event`` (1: failure, 0: censored)."""
    t = np.asarray(time, dtype=float)
    e = np.asarray(event, dtype=bool)
    if len(t) == 0:
        empty = np.zeros(0)
        return KaplanMeier(empty, empty, empty, empty, empty, empty, empty, 0)
    times = np.unique(np.concatenate([[0.0], t]))
    idx = np.searchsorted(times, t)
    d = np.bincount(idx, weights=e, minlength=len(times))
    c = np.bincount(idx, weights=~e, minlength=len(times))
    removed = d + c
    n = len(t) - np.concatenate([[0.0], np.cumsum(removed)[:-1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        surv = np.cumprod(np.where(n > 0, 1.0 - d / n, 1.0))
        greenwood = np.cumsum(np.where(n - d > 0, d / (n * (n - d)), 0.0))
        z = special.ndtri(0.5 + ci / 2)
        log_s = np.log(surv)
        half = z * np.sqrt(greenwood) / log_s
        low = np.exp(-np.exp(np.log(-log_s) - half))
        high = np.exp(-np.exp(np.log(-log_s) + half))
    low = np.where(surv >= 1.0, 1.0, np.nan_to_num(low, nan=0.0))
    high = np.where(surv >= 1.0, 1.0, np.nan_to_num(high, nan=0.0))
    return KaplanMeier(times, n, d, c, surv, low, high, len(t))


@dataclass(frozen=True)
class LogRank:
    statistic: float  # chi-square, 1 degree of freedom
    pvalue: float
    observed_minus_expected: float  # of group 1 (> 0: group 1 fails more than expected)
    variance: float
    n_strata: int


def logrank(
    time: np.ndarray, event: np.ndarray, group: np.ndarray, strata: np.ndarray | None = None
) -> LogRank:
    """Log-rank test of two groups (``group`` 0 / 1), stratified when ``strata`` is given: the
    observed minus expected failures of group 1 and their hypergeometric variance are summed
    over every event time of every stratum (each stratum compares only its own members), then
    chi2 = (sum O - E)^2 / sum V. With one stratum it is the ordinary log-rank test. No variance
    (no failure at a time both groups were at risk): p = 1, no evidence of a difference."""
    t = np.asarray(time, dtype=float)
    e = np.asarray(event, dtype=bool)
    g = np.asarray(group, dtype=np.int64)
    s = np.zeros(len(t), np.int64) if strata is None else np.asarray(strata)
    o_minus_e = var = 0.0
    levels = np.unique(s)
    for level in levels:
        m = s == level
        ts, es, gs = t[m], e[m], g[m]
        for u in np.unique(ts[es]):
            at_risk = ts >= u
            n_all = float(at_risk.sum())
            n_one = float((at_risk & (gs == 1)).sum())
            d_all = float(((ts == u) & es).sum())
            d_one = float(((ts == u) & es & (gs == 1)).sum())
            o_minus_e += d_one - d_all * n_one / n_all
            if n_all > 1:
                var += d_all * (n_one / n_all) * (1 - n_one / n_all) * (n_all - d_all) / (n_all - 1)
    if var <= 0:
        return LogRank(0.0, 1.0, o_minus_e, var, len(levels))
    chi2 = o_minus_e**2 / var
    return LogRank(float(chi2), float(chi2_sf(chi2, 1)), o_minus_e, var, len(levels))
