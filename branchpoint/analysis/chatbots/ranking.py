"""Ranking several chatbots with its uncertainty: a scenario-clustered bootstrap of ranks.

Each target's failure rate is pooled over its distinct ratings (a shared-prefix turn once,
``branchpoint.analysis.pairing.forks.distinct_ratings``) on the scenarios every target ran, so
that all targets are ranked on the same scenarios. Scenarios are resampled with replacement
(``branchpoint.analysis.stats.bootstrap.cluster_weights``: the same draws for every target, which
keeps the targets paired) and the targets ranked in each replicate (1: the fewest failures; ties
share the mean rank). Reported: the rate, its rank, the 95% percentile interval of the rank and
the share of replicates in which it ranked first. Rank intervals that overlap mean the data do not
order those targets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from branchpoint.analysis.pairing.forks import distinct_ratings, rated_rows
from branchpoint.analysis.stats.bootstrap import DEFAULT_BOOT, cluster_weights, per_cluster_sums
from branchpoint.analysis.tables.display import with_judge
from branchpoint.core.words import counted

MIN_SCENARIOS = 3  # as for a scenario-level test: fewer give no interval worth the name


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks along the last axis, ties sharing their mean rank: ``scipy.stats.rankdata`` (a test
    checks), by pairwise comparison (a few targets: B x N^2 is small) so that ``analyze`` need
    not import ``scipy.stats`` (0.4 s) for it."""
    x = np.asarray(values, dtype=float)
    below = (x[..., None] > x[..., None, :]).sum(axis=-1)
    tied = (x[..., None] == x[..., None, :]).sum(axis=-1)  # itself included
    return 1.0 + below + (tied - 1) / 2.0


def rank_targets(
    judgments: pd.DataFrame, *, n_boot: int = DEFAULT_BOOT, seed: int = 0, ci: float = 0.95
) -> pd.DataFrame:
    """One row per judge x target: rate, rank, rank interval, P(first) (see the module
    docstring). Each judge ranks on its own verdicts: two judges' verdicts are two measurements
    of one reply, not twice the ratings."""
    if judgments.empty:
        return pd.DataFrame()
    j = distinct_ratings(judgments)
    j = j[rated_rows(j)]
    parts = [
        _rank_one(g, n_boot=n_boot, seed=seed, ci=ci).assign(judge=str(judge))
        for judge, g in j.groupby("judge", sort=True, observed=True)
    ]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, ignore_index=True)
    return out[["judge", *[c for c in out.columns if c != "judge"]]]


def _rank_one(j: pd.DataFrame, *, n_boot: int, seed: int, ci: float) -> pd.DataFrame:
    """The ranking over one judge's rated items."""
    targets = sorted(j["target"].astype(str).unique())
    if len(targets) < 2:
        return pd.DataFrame()
    per_scen = j.groupby("scenario_id")["target"].nunique()
    common = per_scen[per_scen == len(targets)].index
    j = j[j["scenario_id"].isin(common)]
    if j.empty:
        return pd.DataFrame()
    cl, scen = pd.factorize(j["scenario_id"], sort=True)
    tg = pd.Categorical(j["target"].astype(str), categories=targets).codes
    fails = per_cluster_sums(
        cl, tg, (j["verdict"] == "fail").to_numpy(float), len(scen), len(targets)
    )
    rates_n = per_cluster_sums(cl, tg, np.ones(len(j)), len(scen), len(targets))
    est = fails.sum(0) / rates_n.sum(0)
    out = pd.DataFrame({
        "target": targets, "rate": est, "n_ratings": rates_n.sum(0).astype(np.int64),
        "n_scenarios": len(scen), "rank": average_ranks(np.round(est, 12)),
    })  # fmt: skip
    if len(scen) < MIN_SCENARIOS or n_boot <= 0:
        out["rank_low"] = out["rank_high"] = out["p_first"] = np.nan
        return out.sort_values("rank").reset_index(drop=True)
    w = cluster_weights(len(scen), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = (w @ fails) / (w @ rates_n)
    reps = np.where(np.isnan(reps), np.inf, reps)  # a target with no draw ranks last
    ranks = average_ranks(np.round(reps, 12))
    lo_q, hi_q = (1 - ci) / 2, (1 + ci) / 2
    out["rank_low"] = np.quantile(ranks, lo_q, axis=0, method="lower")
    out["rank_high"] = np.quantile(ranks, hi_q, axis=0, method="higher")
    out["p_first"] = (ranks <= 1.0).mean(axis=0)
    return out.sort_values(["rank", "target"]).reset_index(drop=True)


def ranking_display(r: pd.DataFrame) -> pd.DataFrame:
    def iv(lo: float, hi: float, n_scenarios: int) -> str:
        if not np.isnan(lo):
            return f"{lo:g} to {hi:g}"
        if n_scenarios < MIN_SCENARIOS:  # say why, as the contrast tables do
            return f"none ({counted(n_scenarios, 'scenario')}; {MIN_SCENARIOS} needed)"
        return "none (not resampled)"

    shown = pd.DataFrame({
        "rank": [f"{x:g}" for x in r["rank"]], "target": r["target"],
        "failure rate": [f"{100 * x:.1f}%" for x in r["rate"]],
        "95% rank interval": [
            iv(lo, hi, n) for lo, hi, n in zip(r["rank_low"], r["rank_high"], r["n_scenarios"])
        ],
        "P(first)": ["n/a" if np.isnan(x) else f"{x:.2f}" for x in r["p_first"]],
        "ratings": r["n_ratings"], "scenarios": r["n_scenarios"],
    })  # fmt: skip
    return with_judge(r, shown)
