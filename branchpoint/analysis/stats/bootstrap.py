"""Cluster bootstrap, vectorised: resample scenarios with replacement, all groups at once.

Every statistic here is a ratio of sums (fails / ratings) or a difference of two such ratios, so a
replicate only needs the per-scenario sums: with W the (B x S) matrix of how often each scenario is
drawn in each replicate and M the (S x G) matrix of per-scenario sums for G groups, ``W @ M`` gives
every replicate's sums for every group in one product. Intervals are percentile intervals.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import numpy as np

DEFAULT_BOOT = 2000


@lru_cache(maxsize=8)
def cluster_weights(n_clusters: int, n_boot: int, seed: int) -> np.ndarray:
    """(B x S) draw counts: each replicate draws S clusters with replacement. Made once per
    (S, B, seed) and shared (read-only): every contrast of an analysis draws the same ones."""
    rng = np.random.default_rng(seed)
    if n_clusters == 0:
        out = np.zeros((n_boot, 0))
    else:
        out = rng.multinomial(
            n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_boot
        ).astype(np.float64)
    out.flags.writeable = False
    return out


def per_cluster_sums(
    cluster: np.ndarray, group: np.ndarray, values: np.ndarray, n_clusters: int, n_groups: int
) -> np.ndarray:
    """(S x G) sums of ``values`` for every cluster and group (codes from 0)."""
    flat = cluster.astype(np.int64) * n_groups + group.astype(np.int64)
    sums = np.bincount(flat, weights=values.astype(np.float64), minlength=n_clusters * n_groups)
    return sums.reshape(n_clusters, n_groups)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _percentile(reps: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    lo_q, hi_q = (1 - ci) / 2 * 100, (1 + ci) / 2 * 100
    # A replicate in which a group has no data (its scenarios were not drawn) carries no estimate.
    if reps.shape[0] == 0:
        nan = np.full(reps.shape[1:], np.nan)
        return nan, nan
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", RuntimeWarning
        )  # a group with no data: NaN, said in the table
        # Both quantiles from one sort of each group's replicates.
        q = np.nanpercentile if np.isnan(reps).any() else np.percentile
        lo, hi = q(reps, [lo_q, hi_q], axis=0)
    return lo, hi


def ratio_interval(
    num: np.ndarray, den: np.ndarray, weights: np.ndarray, ci: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate and percentile interval of sum(num)/sum(den) for each group; num, den: (S x G)."""
    est = _ratio(num.sum(axis=0), den.sum(axis=0))
    if weights.shape[0] == 0 or num.shape[0] < 2:
        nan = np.full(est.shape, np.nan)
        return est, nan, nan
    reps = _ratio(weights @ num, weights @ den)
    lo, hi = _percentile(reps, ci)
    return est, lo, hi


def ratio_difference_interval(
    num_a: np.ndarray,
    den_a: np.ndarray,
    num_b: np.ndarray,
    den_b: np.ndarray,
    weights: np.ndarray,
    ci: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """sum(num_b)/sum(den_b) - sum(num_a)/sum(den_a), clusters resampled jointly (paired)."""
    est = _ratio(num_b.sum(0), den_b.sum(0)) - _ratio(num_a.sum(0), den_a.sum(0))
    if weights.shape[0] == 0 or num_a.shape[0] < 2:
        nan = np.full(est.shape, np.nan)
        return est, nan, nan
    reps = _ratio(weights @ num_b, weights @ den_b) - _ratio(weights @ num_a, weights @ den_a)
    lo, hi = _percentile(reps, ci)
    return est, lo, hi
