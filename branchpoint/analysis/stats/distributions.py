"""The few distribution functions the analysis needs, from ``scipy.special``'s ufuncs: the same
numbers as ``scipy.stats`` (``norm``, ``t``, ``chi2``, ``binom``; a test compares them bit for
bit), without importing ``scipy.stats``.

``scipy.stats`` took 0.4 s of the 1.6 s that ``branchpoint analyze`` spent importing (it loads
``scipy.optimize``, ``linalg``, ``spatial``, ``interpolate`` and parses hundreds of docstrings);
``scipy.special`` is the part that computes these values. Each function below applies the
argument checks and support bounds that ``scipy.stats``' generic methods apply around the same
ufunc. Tests that need other distributions, or ``friedmanchisquare``, import ``scipy.stats``
where they run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import special

try:  # what ``scipy.stats.binom`` calls (boost's binomial); private, hence the fallback
    from scipy.special._ufuncs import _binom_cdf, _binom_sf
except ImportError:  # pragma: no cover - a scipy that moved them: the public distribution
    _binom_cdf = _binom_sf = None


def norm_ppf(q: Any) -> Any:
    """``scipy.stats.norm.ppf(q)``."""
    return special.ndtri(q)


def t_ppf(q: Any, df: Any) -> Any:
    """``scipy.stats.t.ppf(q, df)``: the support's ends at q = 0 and 1, NaN where df <= 0 or q
    lies outside [0, 1] (scipy's checks around the same ufunc)."""
    q, df = np.asarray(q, dtype=float), np.asarray(df, dtype=float)
    inside = np.where(q == 0, -np.inf, np.where(q == 1, np.inf, special.stdtrit(df, q)))
    return _scalar_or_array(np.where((df > 0) & (q >= 0) & (q <= 1), inside, np.nan))


def t_sf(x: Any, df: Any) -> Any:
    """``scipy.stats.t.sf(x, df)``: NaN where df <= 0."""
    x, df = np.asarray(x, dtype=float), np.asarray(df, dtype=float)
    return _scalar_or_array(np.where(df > 0, special.stdtr(df, -x), np.nan))


def chi2_sf(x: Any, df: Any) -> Any:
    """``scipy.stats.chi2.sf(x, df)``: 1 at and below 0 (the support's lower end), NaN where
    df <= 0."""
    x, df = np.asarray(x, dtype=float), np.asarray(df, dtype=float)
    inside = np.where(x <= 0, 1.0, special.chdtrc(df, np.maximum(x, 0.0)))
    return _scalar_or_array(np.where(df > 0, np.where(np.isnan(x), np.nan, inside), np.nan))


def binom_cdf(k: Any, n: Any, p: float) -> np.ndarray:
    """``scipy.stats.binom.cdf(k, n, p)`` for integer n >= 0: 0 below 0, 1 from n on."""
    return _binom_tail(_binom_cdf, "cdf", k, n, p, below=0.0, from_n=1.0)


def binom_sf(k: Any, n: Any, p: float) -> np.ndarray:
    """``scipy.stats.binom.sf(k, n, p)`` for integer n >= 0: 1 below 0, 0 from n on."""
    return _binom_tail(_binom_sf, "sf", k, n, p, below=1.0, from_n=0.0)


def _binom_tail(
    fast: Any, name: str, k: Any, n: Any, p: float, *, below: float, from_n: float
) -> np.ndarray:
    """A binomial tail from ``scipy.special``'s ufunc (``fast``) inside 0 <= k < n, the support's
    ends given; ``scipy.stats`` where the ufunc is missing."""
    k, n = np.floor(np.asarray(k, dtype=float)), np.asarray(n, dtype=float)
    if fast is None:  # pragma: no cover
        from scipy import stats

        return np.asarray(getattr(stats.binom, name)(k, n, p), dtype=float)
    inside = (k >= 0) & (k < n)
    got = fast(np.where(inside, k, 0.0), n, p)
    return np.where(inside, got, np.where(k >= n, from_n, below))


def _scalar_or_array(a: np.ndarray) -> Any:
    """A 0-d result as a numpy scalar, as ``scipy.stats`` returns it."""
    return a[()] if a.ndim == 0 else a
