"""``branchpoint.analysis.stats.distributions`` gives scipy.stats' numbers bit for bit, edges
included, so that the analysis reads the same without importing ``scipy.stats``."""

from __future__ import annotations

import numpy as np
from scipy import stats

from branchpoint.analysis.stats import distributions as d


def _same(got: object, want: object) -> None:
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape
    np.testing.assert_array_equal(g, w)  # NaN equals NaN here; values bit for bit
    assert np.isscalar(got) == np.isscalar(want)


def test_normal_and_t_quantiles_and_tails_equal_scipy_stats() -> None:
    q = np.array([0.0, 1e-12, 0.025, 0.5, 0.8, 0.95, 0.975, 0.999, 1.0, -0.1, 1.1, np.nan])
    df = np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 9.0, 29.0, 194.0, 1e6, np.nan])
    x = np.array([-np.inf, -3.0, -0.0, 0.0, 0.3, 1.96, 2.5, 12.0, 40.0, np.inf, np.nan, 1.0])
    _same(d.norm_ppf(q), stats.norm.ppf(q))
    _same(d.norm_ppf(0.975), stats.norm.ppf(0.975))
    for dfs in (df, 3.0):
        _same(d.t_ppf(q, dfs), stats.t.ppf(q, dfs))
        _same(d.t_sf(x, dfs), stats.t.sf(x, dfs))
        _same(d.t_ppf(0.975, dfs), stats.t.ppf(0.975, dfs))
    grid_q, grid_df = np.meshgrid(q, df)
    _same(d.t_ppf(grid_q, grid_df), stats.t.ppf(grid_q, grid_df))
    _same(d.chi2_sf(x, 1), stats.chi2.sf(x, 1))
    _same(d.chi2_sf(x, df), stats.chi2.sf(x, df))
    _same(d.chi2_sf(3.2, 1), stats.chi2.sf(3.2, 1))


def test_binomial_tails_equal_scipy_stats_around_the_support() -> None:
    n = np.repeat(np.arange(0, 60), 66)
    k = np.tile(np.arange(-3, 63), 60)
    for p in (0.5, 0.3):
        _same(d.binom_cdf(k, n, p), stats.binom.cdf(k, n, p))
        _same(d.binom_sf(k, n, p), stats.binom.sf(k, n, p))
    big = np.array([181, 1000, 3315, 20000])
    for frac in (0.0, 0.2, 0.45, 0.5, 0.7, 1.0):
        kk = np.floor(big * frac)
        _same(d.binom_cdf(kk, big, 0.5), stats.binom.cdf(kk, big, 0.5))
        _same(d.binom_sf(kk - 1, big, 0.5), stats.binom.sf(kk - 1, big, 0.5))


def test_friedman_equals_scipy_stats_with_ties_and_degenerate_blocks() -> None:
    from branchpoint.analysis.stats.inference import friedman_chi2

    rng = np.random.default_rng(3)
    for k in (3, 4, 7):
        for n in (1, 2, 5, 40, 300):
            for data in (
                rng.integers(0, 3, size=(k, n)).astype(float),  # many ties
                rng.normal(size=(k, n)),
                np.round(rng.random((k, n)), 1),
                np.ones((k, n)),  # every block tied: 0/0
            ):
                want = stats.friedmanchisquare(*data)
                got = friedman_chi2(list(data))
                _same(got[0], float(want.statistic))
                _same(got[1], float(want.pvalue))
    with_nan = [np.array([1.0, np.nan, 2.0]), np.array([2.0, 1.0, 3.0]), np.array([3.0, 2, 1])]
    assert all(np.isnan(friedman_chi2(with_nan)))
    assert np.isnan(stats.friedmanchisquare(*with_nan).pvalue)
