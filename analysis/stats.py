"""Paired tests, cluster-level tests, intervals and corrections. The tests are scipy's own; this
module only decides the edge cases.

Edge cases, stated once: McNemar with no discordant pair, Wilcoxon with every difference zero and
Friedman with fewer than two complete blocks carry no evidence of a difference and report p = 1.0
(scipy refuses or returns NaN there). A cluster-level test needs two clusters: with one it reports
NaN (no test), never a p-value. Holm adjusts every finite p-value of a family together.

Differences are rounded to ``TIE_DIGITS`` decimals before ranking, so that equal differences that
floating point makes unequal (0.1 + 0.2 vs 0.3) are the exact ties they are.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

TIE_DIGITS = 9


def holm(pvalues: np.ndarray | list[float]) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values (NaN stays NaN and is not counted in m)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="mergesort")]
    adjusted = (m - np.arange(m)) * p[order]
    adjusted = np.minimum(np.maximum.accumulate(adjusted), 1.0)
    out[order] = adjusted
    return out


@dataclass(frozen=True)
class McNemar:
    b: int  # pairs where only the second arm failed
    c: int  # pairs where only the first arm failed
    pvalue: float

    @property
    def odds_ratio(self) -> float:
        """Discordant-pair odds ratio b/c with a 0.5 continuity correction (finite when b or c is 0)."""
        return (self.b + 0.5) / (self.c + 0.5)


def mcnemar_exact(fail_a: np.ndarray, fail_b: np.ndarray) -> McNemar:
    """McNemar's exact test: a two-sided binomial test on the discordant pairs."""
    fa = np.asarray(fail_a, dtype=bool)
    fb = np.asarray(fail_b, dtype=bool)
    b = int(np.sum(~fa & fb))
    c = int(np.sum(fa & ~fb))
    p = float(stats.binomtest(b, b + c, 0.5).pvalue) if b + c > 0 else 1.0
    return McNemar(b, c, p)


@dataclass(frozen=True)
class Wilcoxon:
    statistic: float
    pvalue: float
    rank_biserial: (
        float  # matched-pairs rank-biserial correlation, in [-1, 1]; > 0: second arm higher
    )
    n_nonzero: int


def wilcoxon_paired(a: np.ndarray, b: np.ndarray) -> Wilcoxon:
    """Wilcoxon signed-rank on b - a (scipy defaults: zeros dropped, two-sided)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    d = np.round(b - a, TIE_DIGITS)
    nz = d[d != 0]
    if len(nz) == 0:
        return Wilcoxon(0.0, 1.0, 0.0, 0)
    ranks = stats.rankdata(np.abs(nz))
    total = ranks.sum()
    r = float((ranks[nz > 0].sum() - ranks[nz < 0].sum()) / total)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # scipy warns about ties/normal approximation on tiny samples
        res = stats.wilcoxon(d)
    return Wilcoxon(float(res.statistic), float(res.pvalue), r, len(nz))


@dataclass(frozen=True)
class Friedman:
    statistic: float
    pvalue: float
    n_blocks: int
    kendall_w: float  # effect size: chi2 / (n (k - 1))


def friedman(columns: list[np.ndarray]) -> Friedman:
    """Friedman test over k >= 3 matched arms (each array: one value per block, same order)."""
    k = len(columns)
    n = len(columns[0]) if k else 0
    if k < 3 or n < 2:
        return Friedman(float("nan"), 1.0, n, float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.friedmanchisquare(*columns)
    stat = float(res.statistic)
    p = float(res.pvalue)
    if np.isnan(p):  # every block tied across arms
        return Friedman(0.0, 1.0, n, 0.0)
    return Friedman(stat, p, n, stat / (n * (k - 1)))


def round_ties(values: np.ndarray) -> np.ndarray:
    """Values rounded before ranking (see the module docstring)."""
    return np.round(np.asarray(values, dtype=float), TIE_DIGITS)


def wilson(k: np.ndarray, n: np.ndarray, ci: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for k successes of n (arrays; n may be an effective, non-integer n).

    12 of 12 gives 75.8% to 100%, not a zero-width interval; n = 0 gives NaN.
    """
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    z = float(stats.norm.ppf(0.5 + ci / 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        den = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / den
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
        lo = np.where(n > 0, np.clip(centre - half, 0.0, 1.0), np.nan)
        hi = np.where(n > 0, np.clip(centre + half, 0.0, 1.0), np.nan)
    # Exact 0 and 1 at the bounds (rounding leaves 1e-17 otherwise).
    lo = np.where(k <= 0, 0.0, lo)
    hi = np.where(k >= n, 1.0, hi)
    return lo, hi


@dataclass(frozen=True)
class ClusterMeans:
    """Per group: the mean of the cluster means and its t-based test and interval."""

    estimate: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    pvalue: np.ndarray
    n_clusters: np.ndarray
    statistic: np.ndarray


def cluster_mean_test(
    values: np.ndarray, cluster: np.ndarray, group: np.ndarray, n_groups: int, ci: float = 0.95
) -> ClusterMeans:
    """One-sample t-test of H0 "mean = 0" on cluster means, separately for every group.

    ``values``: one paired difference per unit (NaN: not a unit); ``cluster`` and ``group``:
    integer codes. Each cluster's units are averaged first, so the test has one observation per
    cluster (the independent unit) and S - 1 degrees of freedom; the interval is the matching
    t interval. Fewer than two clusters: NaN everywhere (no test, no interval).
    """
    v = np.asarray(values, dtype=float)
    ok = ~np.isnan(v)
    cl = np.asarray(cluster, dtype=np.int64)[ok]
    gr = np.asarray(group, dtype=np.int64)[ok]
    v = v[ok]
    n_cl = int(cl.max()) + 1 if len(cl) else 1
    flat = gr * n_cl + cl
    sums = np.bincount(flat, weights=v, minlength=n_groups * n_cl).reshape(n_groups, n_cl)
    cnt = np.bincount(flat, minlength=n_groups * n_cl).reshape(n_groups, n_cl)
    present = cnt > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(present, sums / np.where(present, cnt, 1), 0.0)
        s = present.sum(axis=1).astype(float)
        est = np.where(s > 0, means.sum(axis=1) / np.where(s > 0, s, 1), np.nan)
        dev = np.where(present, means - est[:, None], 0.0)
        var = (dev**2).sum(axis=1) / (s - 1)
        se = np.sqrt(var / s)
        tstat = est / se
        df = s - 1
        valid = s >= 2
        tq = np.where(valid, stats.t.ppf(0.5 + ci / 2, np.where(valid, df, 1)), np.nan)
        lo = np.where(valid, est - tq * se, np.nan)
        hi = np.where(valid, est + tq * se, np.nan)
        p = np.where(valid, 2 * stats.t.sf(np.abs(tstat), np.where(valid, df, 1)), np.nan)
    # Every cluster mean identical (se = 0): there is no spread to measure uncertainty by, so no
    # interval (never a zero-width one); a zero mean is no evidence of a difference (p = 1).
    zero_se = valid & (se == 0)
    p = np.where(zero_se, np.where(est == 0, 1.0, np.nan), p)
    lo = np.where(zero_se, np.nan, lo)
    hi = np.where(zero_se, np.nan, hi)
    return ClusterMeans(est, lo, hi, p, s.astype(np.int64), np.where(valid, tstat, np.nan))
