"""Paired tests and corrections. The tests are scipy's own; this module only decides the edge cases.

Edge cases, stated once: McNemar with no discordant pair, Wilcoxon with every difference zero and
Friedman with fewer than two complete blocks carry no evidence of a difference and report p = 1.0
(scipy refuses or returns NaN there). Holm adjusts every finite p-value of a family together.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats


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
    d = b - a
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
        res = stats.wilcoxon(b, a)
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
