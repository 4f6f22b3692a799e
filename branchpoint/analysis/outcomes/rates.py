"""Failure rates with intervals that account for clustering by scenario.

Failure rate = fails / applicable ratings; a partial is a rating (in the denominator), an ``error``
verdict is not a rating and is counted in ``n_error``. Two levels:

* ``turn``: every applicable rating of a chatbot turn counts once;
* ``conversation``: a conversation fails a criterion when any of its turns fails it; the
  denominator is the conversations with at least one rating of that criterion.

Intervals account for clustering by scenario (arms, targets and turns of one scenario are not
independent), and each row says which interval it has (``interval``):

* two or more scenarios: a Wilson interval on the effective sample size n / deff, the design
  effect deff (at least 1) estimated from the scenarios' spread around the pooled rate, with a t
  quantile on the Satterthwaite degrees of freedom of that spread (at most S - 1) in place of z.
  It covers at least 94% at 5 to 40 scenarios, base rates 3% and 30%, scenario sd 0.08 and 0.15
  and unequal pairs per scenario (``benchmarks/inference_calibration.py``), where z covered 89.8%
  at 5 scenarios and a cluster bootstrap 93% at 40 (percentile bootstraps also collapse to zero
  width at 0% or 100%: 12 of 12);
* a group from one scenario gets a plain Wilson interval, labelled: within one scenario the
  clustering cannot be estimated, so it describes that scenario only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from branchpoint.analysis.stats.bootstrap import DEFAULT_BOOT, per_cluster_sums
from branchpoint.analysis.stats.distributions import norm_ppf, t_ppf
from branchpoint.analysis.stats.inference import wilson
from branchpoint.analysis.tables.judgments import as_conversation_frame, group_codes
from branchpoint.analysis.tables.versions import keep_versions_apart

# Rates no longer use a bootstrap (see the module docstring); the ED analysis still does from
# this many questions on.
BOOT_MIN_CLUSTERS = 30

DEFAULT_BY = ("target", "condition", "criterion_id", "risk_area")
Level = Literal["turn", "conversation"]


def unit_counts(cc: pd.DataFrame, level: Level) -> tuple[np.ndarray, np.ndarray]:
    """Numerator and denominator per conversation x criterion row for the given level."""
    if level == "turn":
        return cc["n_fail"].to_numpy(float), cc["n_rated"].to_numpy(float)
    if level == "conversation":
        rated = cc["n_rated"].to_numpy() > 0
        return ((cc["n_fail"].to_numpy() > 0) & rated).astype(float), rated.astype(float)
    raise ValueError(f"level must be 'turn' or 'conversation', not {level!r}")


def failure_rates(
    data: pd.DataFrame,
    by: Sequence[str] = DEFAULT_BY,
    *,
    level: Level = "turn",
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    ci: float = 0.95,
    cluster: str = "scenario_id",
) -> pd.DataFrame:
    """Failure rate per group with a (1 - alpha) interval (see the module docstring).

    ``data``: a judgment table or a conversation x criterion table. Columns of the result: the
    ``by`` columns, ``rate``, ``ci_low``, ``ci_high``, ``n_fail``, ``n_partial``, ``n_rated``
    (ratings, or conversations at the conversation level), ``n_error``, ``n_conversations``,
    ``n_clusters``.
    """
    data, _notes = keep_versions_apart(data)  # the report says so; here only kept apart
    cc = as_conversation_frame(data)
    by = [c for c in by if c in cc.columns]
    if "judge" not in by and cc["judge"].nunique() > 1:
        by = [*by, "judge"]  # never pool two judges' verdicts silently
    if cc.empty:
        return pd.DataFrame(
            columns=[*by, "rate", "ci_low", "ci_high", "n_fail", "n_rated", "n_error"]
        )
    num, den = unit_counts(cc, level)
    group = group_codes(cc, by)
    # Clusters in text order (sums over them in a fixed order: every path that counts the same
    # ratings gives the same bits), from codes (np.unique of 800,000 ids took 0.4 s a call).
    cl_codes, clusters = pd.factorize(cc[cluster].astype(str), sort=True)
    n_groups = int(group.max()) + 1
    s, g = len(clusters), n_groups
    del n_boot, seed  # kept for callers: rate intervals no longer resample (see choose_interval)
    num_m = per_cluster_sums(cl_codes, group, num, s, g)
    den_m = per_cluster_sums(cl_codes, group, den, s, g)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = np.where(den_m.sum(0) > 0, num_m.sum(0) / den_m.sum(0), np.nan)
    lo, hi, method = choose_interval(num_m, den_m, est, ci)

    work = cc[by].copy() if by else pd.DataFrame(index=cc.index)
    work["_g"] = group
    keys = work.drop_duplicates("_g").set_index("_g").sort_index()
    counts = pd.DataFrame(
        {
            "_g": group,
            "n_fail": num if level == "conversation" else cc["n_fail"].to_numpy(),
            "n_partial": cc["n_partial"].to_numpy()
            if level == "turn"
            else ((cc["n_partial"] > 0) & (cc["n_rated"] > 0)).to_numpy(),
            "n_rated": den,
            "n_error": cc["n_error"].to_numpy(),
            "_conv": pd.factorize(cc["conversation_id"], use_na_sentinel=False)[0],
            "_cl": cl_codes,
        }
    )
    agg = counts.groupby("_g").agg(
        n_fail=("n_fail", "sum"),
        n_partial=("n_partial", "sum"),
        n_rated=("n_rated", "sum"),
        n_error=("n_error", "sum"),
        n_conversations=("_conv", "nunique"),
        n_clusters=("_cl", "nunique"),
    )
    out = keys.join(agg)
    out["rate"], out["ci_low"], out["ci_high"] = est, lo, hi
    out["interval"] = method
    for col in ("n_fail", "n_partial", "n_rated", "n_error"):
        out[col] = out[col].astype(np.int64)
    out["level"] = level
    front = [*by, "rate", "ci_low", "ci_high", "n_fail", "n_partial", "n_rated", "n_error"]
    return out.reset_index(drop=True)[
        front + ["interval", "n_conversations", "n_clusters", "level"]
    ]


def design_effect(num: np.ndarray, den: np.ndarray, est: np.ndarray) -> np.ndarray:
    """Variance of the clustered ratio estimate over its binomial variance, at least 1, per group.

    ``num``, ``den``: (S x G) per-scenario sums. NaN where the group has fewer than 2 scenarios.
    """
    return _cluster_variance(num, den, est)[0]


def _cluster_variance(
    num: np.ndarray, den: np.ndarray, est: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Design effect and the Satterthwaite degrees of freedom of the cluster variance, per group.

    The variance is a sum of squared scenario residuals u_s = num_s - est * den_s; its degrees of
    freedom are (sum u^2)^2 / sum u^4, at most S - 1: a variance carried by one scenario (a
    skewed rate whose only failures sit in one scenario) has about 1, not S - 1. For S normal
    residuals this comes out near S / 3 (u^4 estimates 3 sigma^4), so the interval is wider than
    a t on S - 1 would be; the unbiased version (3 (sum u^2)^2 / sum u^4), or 2 times it, was
    tried (issue 44) and covered 91.3-93.3% at 5-10 scenarios on the grid of
    ``benchmarks/inference_calibration.py --grid-only``, so the conservative one is kept.
    """
    present = den > 0
    s = present.sum(axis=0).astype(float)
    n = den.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        resid = np.where(present, num - est[None, :] * den, 0.0)
        u2 = resid**2
        var_cl = s / (s - 1) * u2.sum(axis=0) / n**2
        var_bin = est * (1 - est) / n
        deff = np.where(var_bin > 0, var_cl / var_bin, 1.0)
        df = u2.sum(axis=0) ** 2 / (u2**2).sum(axis=0)
    df = np.where(np.isfinite(df), np.clip(df, 1.0, np.maximum(s - 1, 1.0)), s - 1)
    return np.where(s >= 2, np.maximum(deff, 1.0), np.nan), df


def choose_interval(
    num: np.ndarray, den: np.ndarray, est: np.ndarray, ci: float
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The interval each group gets (see the module docstring), and its label."""
    s = (den > 0).sum(axis=0)
    n = den.sum(axis=0)
    deff, df = _cluster_variance(num, den, est)
    n_eff = np.where(s >= 2, n / np.where(s >= 2, deff, 1.0), n)
    # The design effect is estimated from S scenarios, so the quantile is t on its Satterthwaite
    # degrees of freedom, not z: z covered 89.8% at 5 scenarios and a cluster bootstrap 93% at
    # 40; this covers 94.8% to 99% over the grid of benchmarks/inference_calibration.py.
    z = norm_ppf(0.5 + ci / 2)
    q = np.where(s >= 2, t_ppf(0.5 + ci / 2, np.where(s >= 2, df, 1.0)), z)
    lo, hi = wilson(est * n_eff, n_eff, ci, quantile=q)
    labels = [
        "Wilson, one scenario (not cluster-adjusted)"
        if si == 1
        else f"Wilson-t, design effect {d:.2f}, {f:.1f} df ({si} scenarios)"
        if si >= 2
        else "none"
        for si, d, f in zip(s, deff, df)
    ]
    return lo, hi, labels


def error_counts(data: pd.DataFrame, by: Sequence[str] = ("target", "judge")) -> pd.DataFrame:
    """Error verdicts per group, next to the ratings they were meant to be (never hidden)."""
    cc = as_conversation_frame(data)
    by = [c for c in by if c in cc.columns]
    g = cc.groupby(by, dropna=False, observed=True)[["n_error", "n_rated"]].sum().reset_index()
    g["error_share"] = g["n_error"] / (g["n_error"] + g["n_rated"]).where(lambda x: x > 0)
    return g.sort_values("n_error", ascending=False, kind="mergesort").reset_index(drop=True)
