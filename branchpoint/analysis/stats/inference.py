"""Paired tests, cluster-level tests, intervals and corrections. The tests are scipy's own; this
module only decides the edge cases.

Edge cases, stated once: McNemar with no discordant pair, Wilcoxon with every difference zero and
Friedman with fewer than two complete blocks carry no evidence of a difference and report p = 1.0
(scipy refuses or returns NaN there). Scenario-level tests follow one rule
(``scenario_level_test``): too few scenarios, no test; few scenarios or no spread between
scenario means, an exact sign-flip test; otherwise a t-test (or, for an outcome that asks for
it with ``exact``, the sign-flip test at every number of scenarios). Never a p-value from 0/0.
Holm adjusts every finite p-value of a family together.

Differences are rounded to ``TIE_DIGITS`` decimals before ranking, so that equal differences that
floating point makes unequal (0.1 + 0.2 vs 0.3) are the exact ties they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import special

from branchpoint.analysis.stats.distributions import binom_cdf, binom_sf, norm_ppf, t_ppf, t_sf
from branchpoint.analysis.stats.intervals import (
    NO_SPREAD_UNBOUNDED,
    no_spread_interval,
    no_spread_label,
)
from branchpoint.core.power import (
    MIN_TEST_CLUSTERS,
    SIGN_FLIP,
    T_TEST,
    T_TEST_MIN_CLUSTERS,
    TOO_FEW,
    scenario_test,
)

TIE_DIGITS = 9

# The test-choice rule's names, re-exported for the modules and tests that read them here.
__all__ = ["MIN_TEST_CLUSTERS", "SIGN_FLIP", "T_TEST", "T_TEST_MIN_CLUSTERS", "TOO_FEW"]


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


def holm_per_judge(pvalues: np.ndarray | list[float], judges: object = None) -> np.ndarray:
    """Holm over a table's rows, one family per judge (``judges``: each row's judge, or None for
    one family): two judges rating the same replies test the same hypotheses twice, they do not
    double the family. Every table of the project adjusts so (the report says it per table)."""
    p = np.asarray(pvalues, dtype=float)
    if judges is None:
        return holm(p)
    _, codes = np.unique(np.asarray(judges, dtype=str), return_inverse=True)
    out = np.full(p.shape, np.nan)
    for k in np.unique(codes):
        rows = codes == k
        out[rows] = holm(p[rows])
    return out


def holm_column(table: Any, column: str) -> np.ndarray:
    """``holm_per_judge`` of a table's p-value ``column``, by its ``judge`` column if it has one
    (the form every table of the project adjusts in)."""
    judges = table["judge"].to_numpy() if "judge" in table else None
    return holm_per_judge(table[column].to_numpy(float), judges)


@dataclass(frozen=True)
class McNemar:
    b: int  # pairs where only the second arm failed
    c: int  # pairs where only the first arm failed
    pvalue: float

    @property
    def odds_ratio(self) -> float:
        """Discordant-pair odds ratio b/c with a 0.5 continuity correction (finite when b or c is 0)."""
        return (self.b + 0.5) / (self.c + 0.5)


def binomial_half_p(b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Two-sided exact binomial p of b successes in b + c at 1/2, for arrays of counts: the
    number ``scipy.stats.binomtest(b, b + c, 0.5)`` gives (a test checks; they can differ only
    in the last denormal, below 1e-300), in one vectorised call instead of 1.3 ms a pair. binomtest adds to the tail of k = min(b, c) the terms on the
    other side of the mode that are no likelier than P(X = k): at 1/2 these are the k + 1
    mirrored ones, so p = P(X <= k) + P(X >= n - k), summed as binomtest sums them (2 P(X <= k)
    is the same number in exact arithmetic but not in floating point: 0.9999999999999998 for
    91 of 181)."""
    b = np.atleast_1d(np.asarray(b, dtype=np.int64))
    n = b + np.atleast_1d(np.asarray(c, dtype=np.int64))
    below = b * 2 < n  # binomtest's branches: b below the mode, or above it
    with np.errstate(all="ignore"):
        low = np.where(below, binom_cdf(b, n, 0.5), binom_cdf(n - b, n, 0.5))
        high = np.where(below, binom_sf(n - b - 1, n, 0.5), binom_sf(b - 1, n, 0.5))
    return np.where((b * 2 == n) | (n == 0), 1.0, np.minimum(1.0, low + high))


def mcnemar_exact(fail_a: np.ndarray, fail_b: np.ndarray) -> McNemar:
    """McNemar's exact test: a two-sided binomial test on the discordant pairs."""
    fa = np.asarray(fail_a, dtype=bool)
    fb = np.asarray(fail_b, dtype=bool)
    b = int(np.sum(~fa & fb))
    c = int(np.sum(fa & ~fb))
    return McNemar(b, c, float(binomial_half_p(np.array([b]), np.array([c]))[0]))


@dataclass(frozen=True)
class Wilcoxon:
    statistic: float
    pvalue: float
    rank_biserial: (
        float  # matched-pairs rank-biserial correlation, in [-1, 1]; > 0: second arm higher
    )
    n_nonzero: int
    method: str = ""  # WILCOXON_EXACT or WILCOXON_NORMAL


# Up to this many non-zero differences the p-value is exact, ties included (the conditional
# null distribution of the signed-rank sum given the tied ranks, by dynamic programming over
# doubled mid-ranks: at most 50 x 2,550 additions). Above it, the normal approximation with
# scipy's tie correction. scipy's own fallback for ties is a permutation test that took 37 of
# 44 s of a 288-conversation analysis.
WILCOXON_EXACT_MAX = 50
WILCOXON_EXACT = "exact (ties conditioned on)"
WILCOXON_NORMAL = "normal approximation, tie-corrected"


@lru_cache(maxsize=1024)
def _signed_rank_counts(doubled: tuple[int, ...]) -> np.ndarray:
    """Number of sign patterns giving each doubled signed-rank sum W+ (cached per rank set)."""
    total = sum(doubled)
    counts = np.zeros(total + 1)
    counts[0] = 1.0
    for r in doubled:
        counts[r:] = counts[r:] + counts[: total + 1 - r].copy()
    return counts


def _signed_rank_exact_p(ranks: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    """Two-sided exact p of the signed-rank sum given (possibly tied) mid-ranks, and min(W+, W-)."""
    doubled = np.rint(2 * ranks).astype(np.int64)  # mid-ranks are multiples of 1/2
    total = int(doubled.sum())
    counts = _signed_rank_counts(tuple(sorted(int(r) for r in doubled)))
    w_plus = int(doubled[positive].sum())
    low, high = counts[: w_plus + 1].sum(), counts[w_plus:].sum()
    p = min(1.0, 2 * min(low, high) / counts.sum())
    return p, min(w_plus, total - w_plus) / 2


def wilcoxon_paired(a: np.ndarray, b: np.ndarray) -> Wilcoxon:
    """Wilcoxon signed-rank on b - a (zeros dropped, two-sided), its p-value bounded in cost:
    exact given the ties up to ``WILCOXON_EXACT_MAX`` non-zero differences, else normal."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    d = round_ties(b - a)
    nz = d[d != 0]
    if len(nz) == 0:
        return Wilcoxon(0.0, 1.0, 0.0, 0, WILCOXON_EXACT)
    # Mid-ranks of |d| and the sizes of its ties in one sort.
    _, tie_of, ties = np.unique(np.abs(nz), return_inverse=True, return_counts=True)
    ranks = (np.cumsum(ties) - (ties - 1) / 2.0)[tie_of]
    total = ranks.sum()
    r = float((ranks[nz > 0].sum() - ranks[nz < 0].sum()) / total)
    n = len(nz)
    if n <= WILCOXON_EXACT_MAX:
        p, stat = _signed_rank_exact_p(ranks, nz > 0)
        return Wilcoxon(stat, p, r, n, WILCOXON_EXACT)
    # The normal approximation with the tie correction, as ``scipy.stats.wilcoxon(d,
    # method="asymptotic")`` computes it (a test checks they agree); written out because
    # scipy's argument handling cost 1.3 ms a call, a second per thousand contrasts.
    w_plus = float(ranks[nz > 0].sum())
    t = ties.astype(float)
    se = np.sqrt((n * (n + 1.0) * (2.0 * n + 1.0) - float(np.sum(t**3 - t)) / 2) / 24)
    z = (w_plus - n * (n + 1.0) * 0.25) / se
    p = float(min(1.0, 2 * special.ndtr(-abs(z))))
    return Wilcoxon(min(w_plus, float(total) - w_plus), p, r, n, WILCOXON_NORMAL)


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
    # Rounded before ranking: 0.1 + 0.2 and 0.3 are the tie they are, not a ranking.
    stat, p = friedman_chi2([round_ties(c) for c in columns])
    if np.isnan(p):  # every block tied across arms
        return Friedman(0.0, 1.0, n, 0.0)
    return Friedman(stat, p, n, stat / (n * (k - 1)))


def friedman_chi2(columns: list[np.ndarray]) -> tuple[float, float]:
    """The statistic and p-value of ``scipy.stats.friedmanchisquare(*columns)`` (k >= 3 columns
    of n >= 1 blocks), by its arithmetic: mid-ranks within each block, the tie correction, the
    chi-squared tail with k - 1 degrees of freedom (a test compares them bit for bit). Written
    out because ``scipy.stats`` costs 0.4 s to import (``branchpoint.analysis.stats.distributions``)."""
    data = np.stack([np.asarray(c, dtype=float) for c in columns], axis=-1)  # a block per row
    n, k = data.shape
    if np.isnan(data).any():  # scipy's nan_policy="propagate"
        return float("nan"), float("nan")
    order = np.argsort(data, axis=-1, kind="stable")
    ordered = np.take_along_axis(data, order, axis=-1)
    first = np.ones(data.shape, dtype=bool)  # the first of each run of equal values in a block
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    starts = np.flatnonzero(first.ravel())
    runs = np.diff(starts, append=data.size)
    ordinal = np.tile(np.arange(1, k + 1, dtype=float), n)
    mid = ordinal[starts] + (runs.astype(float) - 1) / 2
    ranks = np.empty(data.shape)
    np.put_along_axis(ranks, order, np.repeat(mid, runs).reshape(data.shape), axis=-1)
    t = runs.astype(float)
    ties = np.sum(t * (t * t - 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        c = 1 - ties / (k * (k * k - 1) * n)
        ssbn = np.sum(np.sum(ranks, axis=0) ** 2)
        statistic = (12.0 / (k * n * (k + 1)) * ssbn - 3 * n * (k + 1)) / c
    return float(statistic), float(special.chdtrc(float(k - 1), statistic))


def round_ties(values: np.ndarray) -> np.ndarray:
    """Values rounded before ranking (see the module docstring)."""
    return np.round(np.asarray(values, dtype=float), TIE_DIGITS)


def wilson(
    k: np.ndarray, n: np.ndarray, ci: float = 0.95, quantile: np.ndarray | float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for k successes of n (arrays; n may be an effective, non-integer n).

    12 of 12 gives 75.8% to 100%, not a zero-width interval; n = 0 gives NaN. ``quantile``
    replaces the normal quantile (e.g. a t quantile per group, when the variance behind an
    effective n was estimated from few scenarios).
    """
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    z = np.asarray(norm_ppf(0.5 + ci / 2) if quantile is None else quantile, dtype=float)
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


# The rule choosing a scenario-level test (fewer than 3 scenarios: none; fewer than 6 or no
# spread: the exact sign-flip test; else t) lives in ``branchpoint.core.power.scenario_test``, so
# the plan's detectable differences follow the same path. At 3 to 5 scenarios the sign-flip test
# cannot reach p < 0.05, and says so by its p and its interval.
# Scenario means with a spread this small relative to their size have no usable t statistic
# (0/0, or a floating-point residue such as 1e-17 that would give p = 1e-16).
DEGENERATE_SPREAD = 1e-9
# Sign-flip tests enumerate all 2^S sign patterns up to this many scenarios; above it they draw
# ``SIGN_FLIP_DRAWS`` seeded patterns (the p-value then carries Monte Carlo error of about 0.001).
SIGN_FLIP_EXACT_MAX = 20
SIGN_FLIP_DRAWS = 200_000


@lru_cache(maxsize=4)
def _sign_patterns(s: int) -> np.ndarray:
    """The sign patterns of ``s`` scenarios, +1 / -1 as int8 (a study's tests share one S, so
    they are made once: drawing 200,000 x 195 of them took 0.3 s a test at the seed study's
    scale, and as float64 they would hold 300 MB)."""
    if s <= SIGN_FLIP_EXACT_MAX:
        codes = np.arange(2**s, dtype=np.int64)[:, None]
        signs = (1 - 2 * ((codes >> np.arange(s)) & 1)).astype(np.int8)
    else:
        # The patterns ``rng.choice([-1.0, 1.0], size=(SIGN_FLIP_DRAWS, s))`` draws (the same
        # stream of 0/1 draws; a test checks it), a block of rows at a time: 0.13 s and 39 MB
        # at 195 scenarios instead of 1.1 s and 312 MB.
        rng = np.random.default_rng(0)
        signs = np.empty((SIGN_FLIP_DRAWS, s), np.int8)
        for start in range(0, SIGN_FLIP_DRAWS, 8192):
            stop = min(start + 8192, SIGN_FLIP_DRAWS)
            signs[start:stop] = rng.integers(0, 2, size=(stop - start, s), dtype=np.int64)
        signs = signs * np.int8(2) - np.int8(1)
    signs.flags.writeable = False  # shared by every caller
    return signs


@lru_cache(maxsize=4)
def _drawn_pattern_bytes(s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The drawn sign patterns of ``s`` scenarios packed 8 to a byte (bit set: sign -1, first
    scenario in the high bit); the order that groups them by their sum of signs, each group's
    sum and where each group starts in that order (and the end)."""
    signs = _sign_patterns(s)
    codes = np.packbits(signs < 0, axis=1)
    b = signs.sum(axis=1, dtype=np.int64)
    order = np.argsort(b, kind="stable")
    sums, starts = np.unique(b[order], return_index=True)
    starts = np.append(starts, len(b))
    for arr in (codes, order, sums, starts):
        arr.flags.writeable = False
    return codes, order, sums, starts


def _sign_flip_pvalues(values: np.ndarray) -> Callable[[float], float]:
    """d -> the two-sided sign-flip p of ``values - d``: the share of sign patterns s with
    |sum s (x - d)| >= |sum (x - d)| (less a tolerance of one rounding unit, so that ties are
    ties). The patterns' sums are made once, then each d costs little, which the interval's
    bisection needs (it asks for about a hundred p-values):

    * up to ``SIGN_FLIP_EXACT_MAX`` values, exactly over all 2^S patterns, by meeting in the
      middle: every pattern's sum is a sum of one of the 2^(S/2) patterns of the first half and
      one of the second, so the patterns at or beyond the observed |sum| are counted by a sorted
      search (2 x 1,024 sums at 20 scenarios, not 2^20 = 1,048,576);
    * above, over the ``SIGN_FLIP_DRAWS`` seeded patterns: with A = s . x and B = sum s kept per
      pattern, s . (x - d) = A - d B.
    """
    x = round_ties(values)
    s = len(x)
    if s <= SIGN_FLIP_EXACT_MAX:
        half = s // 2
        left, right = _sign_patterns(half), _sign_patterns(s - half)
        a_l, b_l = left.astype(np.float64) @ x[:half], left.sum(axis=1, dtype=np.float64)
        a_r, b_r = right.astype(np.float64) @ x[half:], right.sum(axis=1, dtype=np.float64)
        total = float(len(a_l) * len(a_r))

        def exact(d: float) -> float:
            observed = abs(float((x - d).sum())) - 10.0**-TIE_DIGITS
            if observed <= 0:
                return 1.0  # x - d is 0 within rounding: no evidence of a difference
            lv, rv = a_l - d * b_l, np.sort(a_r - d * b_r)
            # |l + r| >= observed: r >= observed - l, or r <= -observed - l (disjoint sets)
            at_or_above = len(rv) - np.searchsorted(rv, observed - lv, side="left")
            at_or_below = np.searchsorted(rv, -observed - lv, side="right")
            return float(np.sum(at_or_above + at_or_below)) / total

        return exact
    codes, order, sums, starts = _drawn_pattern_bytes(s)
    # Each pattern's s . x as a sum of table look-ups, one a byte of 8 signs (the sum of that
    # block's signed values for each of its 256 sign patterns): 5 ms at 40 scenarios where the
    # product of 200,000 x 40 signs with x took 110 ms.
    padded = np.zeros(codes.shape[1] * 8)
    padded[:s] = x
    block_signs = 1.0 - 2.0 * np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1)
    tables = block_signs @ padded.reshape(-1, 8).T  # (256 codes, blocks)
    a = np.zeros(len(codes))
    for k in range(codes.shape[1]):
        a += tables[codes[:, k], k]
    # s . (x - d) = A - d B, B = sum s: the patterns grouped by B (at most S + 1 values) and
    # sorted by A within each group, so that each d counts by two sorted searches a group
    # instead of a pass over every pattern.
    a = a[order]
    groups = [(float(b), np.sort(a[i:j])) for b, i, j in zip(sums, starts[:-1], starts[1:])]

    def drawn(d: float) -> float:
        observed = abs(float((x - d).sum())) - 10.0**-TIE_DIGITS
        if observed <= 0:
            return 1.0
        hits = 0
        for b, seg in groups:  # |A - d b| >= observed: A >= d b + observed or A <= d b - observed
            hits += len(seg) - int(np.searchsorted(seg, d * b + observed, side="left"))
            hits += int(np.searchsorted(seg, d * b - observed, side="right"))
        return hits / len(codes)

    return drawn


def sign_flip_pvalue(values: np.ndarray) -> float:
    """Two-sided sign-flip (permutation) p-value of H0 "symmetric about 0" for one mean.

    Exact (all 2^S sign patterns) up to ``SIGN_FLIP_EXACT_MAX`` values. Valid whatever the spread,
    including none: S identical non-zero values give p = 2 / 2^S (4 scenarios: 0.125).
    """
    x = np.asarray(values, dtype=float)
    if len(x) == 0 or not np.any(round_ties(x)):  # (patterns not drawn: 0.3 s at 195)
        return 1.0
    return _sign_flip_pvalues(x)(0.0)


def sign_flip_interval(
    values: np.ndarray, ci: float = 0.95, bounds: tuple[float, float] | None = None
) -> tuple[float, float]:
    """The shifts d that the sign-flip test of ``values - d`` does not reject: its interval.

    Every d below min(values) or above max(values) makes all signs agree, p = 2 / 2^S: when that
    is not below 1 - ci (five scenarios or fewer at 95%) nothing can be excluded and the interval
    is ``bounds`` (NaN when none are given). Otherwise each end is found by bisection between the
    mean and the extreme value. With no spread at all it is the single value.
    """
    x = np.asarray(values, dtype=float)
    alpha = 1 - ci
    if len(x) == 0 or 2.0 / 2 ** len(x) >= alpha:
        return (bounds[0], bounds[1]) if bounds else (float("nan"), float("nan"))
    low, high = float(x.min()), float(x.max())
    if not np.any(round_ties(x - low)) and not np.any(round_ties(x - high)):
        return low, high  # no spread: both ends accepted as they are (no patterns drawn)
    pvalue = _sign_flip_pvalues(x)
    centre = float(x.mean())

    def accepted(d: float) -> bool:
        return pvalue(d) > alpha

    ends = []
    for far in (low, high):
        inside, outside = centre, far
        if accepted(outside):
            ends.append(outside)
            continue
        for _ in range(48):  # to about 1e-14 of the range
            mid = (inside + outside) / 2
            if accepted(mid):
                inside = mid
            else:
                outside = mid
        ends.append(inside)
    return ends[0], ends[1]


@dataclass(frozen=True)
class ClusterMeans:
    """Per group: the mean of the cluster means and its scenario-level test and interval."""

    estimate: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    pvalue: np.ndarray
    n_clusters: np.ndarray
    statistic: np.ndarray
    method: list[str]  # per group: TOO_FEW, T_TEST or SIGN_FLIP
    # per group: the interval's own label where it is not the test's inversion (no spread)
    interval: tuple[str, ...] = ()

    def labels(self) -> list[str]:
        """What each group's interval is, in words (for a table's ``interval`` column)."""
        out = []
        for i, (m, n) in enumerate(zip(self.method, self.n_clusters)):
            if i < len(self.interval) and self.interval[i]:
                out.append(self.interval[i])
            elif m == TOO_FEW:
                out.append(f"none: {TOO_FEW} ({n} of {MIN_TEST_CLUSTERS} needed)")
            elif m == SIGN_FLIP and n > SIGN_FLIP_EXACT_MAX:
                out.append(f"sign-flip over {n} scenario means ({SIGN_FLIP_DRAWS:,} seeded "
                           "sign patterns)")  # fmt: skip
            elif m == SIGN_FLIP:
                out.append(f"{SIGN_FLIP} over {n} scenario means")
            else:
                out.append(f"t over {n} scenario means")
        return out


def scenario_level_test(
    values: np.ndarray,
    cluster: np.ndarray,
    group: np.ndarray,
    n_groups: int,
    ci: float = 0.95,
    bounds: tuple[float, float] | None = None,
    *,
    exact: bool = False,
) -> ClusterMeans:
    """The scenario-level test of H0 "mean = 0", separately for every group, chosen by rule.

    ``values``: one paired difference per unit (NaN: not a unit); ``cluster`` and ``group``:
    integer codes. Each cluster's units are averaged first, so the test has one observation per
    cluster (the independent unit). The rule, the same for every scenario-level test:

    * fewer than ``MIN_TEST_CLUSTERS`` scenarios: no test and no interval (``TOO_FEW``);
    * fewer than ``T_TEST_MIN_CLUSTERS`` scenarios, or scenario means with no spread (standard
      deviation at most ``DEGENERATE_SPREAD`` times max(1, |mean|), where the t statistic is
      0/0): the exact sign-flip test over the scenario means gives p, and its inversion the
      interval (``SIGN_FLIP``; see ``sign_flip_interval``), except with no spread at all, where
      the inversion is the single value: then the exact bound of
      ``branchpoint.analysis.stats.intervals.no_spread_interval`` within ``bounds`` (six
      scenarios each at +1: +0.081 to +1), or no interval when there are no bounds;
    * otherwise a one-sample t-test with S - 1 degrees of freedom and the matching t interval;
      with ``exact``, the sign-flip test and its inversion here too (``scenario_test``'s option:
      exact whenever the arms are exchangeable within a scenario; p and interval by all 2^S
      patterns to ``SIGN_FLIP_EXACT_MAX`` scenarios, by ``SIGN_FLIP_DRAWS`` seeded ones above).

    ``bounds``: the range the estimand lies in (a difference of proportions: -1 to 1), for an
    interval that excludes nothing.
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
        valid = s >= MIN_TEST_CLUSTERS
        tq = np.where(valid, t_ppf(0.5 + ci / 2, np.where(valid, df, 1)), np.nan)
        lo = np.where(valid, est - tq * se, np.nan)
        hi = np.where(valid, est + tq * se, np.nan)
        p = np.where(valid, 2 * t_sf(np.abs(tstat), np.where(valid, df, 1)), np.nan)
        flat_spread = np.sqrt(var) <= DEGENERATE_SPREAD * np.maximum(1.0, np.abs(est))
    method = [
        scenario_test(int(s[i]), no_spread=bool(flat_spread[i]), exact=exact)
        for i in range(n_groups)
    ]
    interval = [""] * n_groups
    tstat = np.where(valid, tstat, np.nan)
    for i in np.flatnonzero([m == SIGN_FLIP for m in method]):
        x = means[i, present[i]]
        p[i] = sign_flip_pvalue(x)
        lo[i], hi[i] = sign_flip_interval(x, ci, bounds)
        tstat[i] = np.nan  # no t statistic: it is 0/0
        if not np.any(round_ties(x - x[0])):
            # every mean equal (to rounding: 2/3 computed two ways differs in the last bit, and
            # its inversion was then "+66.7 to +66.7"): the exact bound instead (rule 2)
            if bounds is None:
                lo[i], hi[i], interval[i] = np.nan, np.nan, NO_SPREAD_UNBOUNDED
            else:
                lo[i], hi[i] = no_spread_interval(float(x[0]), len(x), bounds, ci)
                interval[i] = no_spread_label(len(x))
    if bounds is not None:
        lo = np.where(np.isnan(lo), lo, np.maximum(lo, bounds[0]))
        hi = np.where(np.isnan(hi), hi, np.minimum(hi, bounds[1]))
    return ClusterMeans(est, lo, hi, p, s.astype(np.int64), tstat, method, tuple(interval))


def cluster_mean_test(
    values: np.ndarray, cluster: np.ndarray, group: np.ndarray, n_groups: int, ci: float = 0.95
) -> ClusterMeans:
    """``scenario_level_test`` with no bounds on the estimand (kept for existing callers)."""
    return scenario_level_test(values, cluster, group, n_groups, ci)
