"""Ranking several chatbots with its uncertainty: rank sets from pairwise scenario-level tests.

Each target's failure rate is pooled over its distinct ratings (a shared-prefix turn once,
``branchpoint.analysis.pairing.forks.distinct_ratings``) on the scenarios every target ran, so
that all targets are ranked on the same scenarios; per judge and per condition (never pooled).
Every pair of targets is compared by the project's scenario-level test over the per-scenario
differences of their rates (``scenario_level_test``: its rule for few scenarios and no spread),
Holm over the pairs, so that the rank sets hold together at 95%: a target's rank lies between 1
plus the number of targets significantly better than it and N minus the number significantly
worse. ``branchpoint compare`` runs the same scenario-level test on pairs of design cells (and
Holm over its own family), so the two seldom disagree; a percentile bootstrap of ranks, used
before, gave "1 to 1" and P(first) 1.00 where compare found no difference. Overlapping rank sets
mean the data do not order those targets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from branchpoint.analysis.pairing.forks import distinct_ratings, rated_rows
from branchpoint.analysis.stats.bootstrap import per_cluster_sums
from branchpoint.analysis.stats.inference import holm, scenario_level_test
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


def rank_targets(judgments: pd.DataFrame, *, ci: float = 0.95) -> pd.DataFrame:
    """One row per judge x condition x target: rate, rank, rank set (see the module
    docstring). Each judge ranks on its own verdicts, each condition apart."""
    if judgments.empty:
        return pd.DataFrame()
    j = distinct_ratings(judgments)
    j = j[rated_rows(j)]
    keys = [k for k in ("judge", "condition") if k in j.columns]
    parts = [
        _rank_one(g, ci=ci).assign(**dict(zip(keys, map(str, key))))
        for key, g in j.groupby(keys, sort=True, observed=True)
    ]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, ignore_index=True)
    return out[[*keys, *[c for c in out.columns if c not in keys]]]


def _rank_one(j: pd.DataFrame, *, ci: float) -> pd.DataFrame:
    """The ranking over one judge's rated items of one condition."""
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
    if len(scen) < MIN_SCENARIOS:
        out["rank_low"] = out["rank_high"] = np.nan
        return out.sort_values("rank").reset_index(drop=True)
    out["rank_low"], out["rank_high"] = _rank_sets(fails / rates_n, ci)
    return out.sort_values(["rank", "target"]).reset_index(drop=True)


def _rank_sets(rates: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """Per target (columns of ``rates``, scenarios x targets): the lowest and highest rank the
    pairwise scenario-level tests, Holm over the pairs, leave it."""
    n = rates.shape[1]
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    diffs = np.concatenate([rates[:, b] - rates[:, a] for a, b in pairs])
    groups = np.repeat(np.arange(len(pairs)), rates.shape[0])
    clusters = np.tile(np.arange(rates.shape[0]), len(pairs))
    test = scenario_level_test(diffs, clusters, groups, len(pairs), ci, bounds=(-1.0, 1.0))
    separated = holm(test.pvalue) < 1 - ci
    better = np.zeros(n, np.int64)  # targets significantly better (fewer failures) than each
    worse = np.zeros(n, np.int64)
    for (a, b), sep, d in zip(pairs, separated, test.estimate):
        if sep and d > 0:  # b fails more than a
            better[b] += 1
            worse[a] += 1
        elif sep and d < 0:
            better[a] += 1
            worse[b] += 1
    return (1 + better).astype(float), (n - worse).astype(float)


def ranking_display(r: pd.DataFrame) -> pd.DataFrame:
    def iv(lo: float, hi: float, n_scenarios: int) -> str:
        if not np.isnan(lo):
            return f"{lo:g} to {hi:g}"
        if n_scenarios < MIN_SCENARIOS:  # say why, as the contrast tables do
            return f"none ({counted(n_scenarios, 'scenario')}; {MIN_SCENARIOS} needed)"
        return "none"

    shown = pd.DataFrame({
        "rank": [f"{x:g}" for x in r["rank"]], "target": r["target"],
        "failure rate": [f"{100 * x:.1f}%" for x in r["rate"]],
        "95% rank interval": [
            iv(lo, hi, n) for lo, hi, n in zip(r["rank_low"], r["rank_high"], r["n_scenarios"])
        ],
        "ratings": r["n_ratings"], "scenarios": r["n_scenarios"],
    })  # fmt: skip
    if "condition" in r.columns and r["condition"].nunique() > 1:  # conditions never pooled
        shown.insert(0, "condition", r["condition"].to_numpy())
    return with_judge(r, shown)
