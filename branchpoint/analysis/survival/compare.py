"""Kaplan-Meier summaries per group, and matched comparisons of time to the first failure.

A matched comparison takes pairs of conversations (two chatbots on one design cell, or a branch
option's arm and its baseline arm) and asks whether B reaches its first failure sooner than A:

* primary, at the level of the independent unit: within each scenario, each side's
  Kaplan-Meier restricted mean to ``tau`` (the exchanges a conversation lasts without a failure,
  counting the first tau), B minus A; < 0: B fails sooner. ``tau`` is the last exchange both
  sides were followed to (the smaller of the two sides' longest follow-up: the last exchange
  judged, whether or not a conversation failed before it). The scenario differences go
  to the project's scenario-level test (``branchpoint.analysis.stats.inference
  .scenario_level_test``: no test below 3 scenarios) with its ``exact`` option: the sign-flip
  (permutation) test over the scenario differences at every number of scenarios, and its
  inversion for the interval (bounds -tau to tau). Under the null that the two arms are
  exchangeable within a scenario (same chatbot behaviour, pairs drawn alike), each scenario's
  difference is as likely to be d as -d, and the test is exact at any S: all 2^S sign patterns
  up to 20 scenarios, 200,000 seeded ones above (Monte Carlo error of about 0.0005 at p = 0.05).
  Not the t-test over scenario means the failure-rate contrasts use from 6 scenarios: these
  differences are bounded (-tau to tau), light-tailed and of unequal spread from scenario to
  scenario (a scenario whose hazard is near 0 or 1 has little spread), and the t-test rejected
  5.2% of 20,000 simulated null studies at 10 scenarios (docs/methods/time-to-failure.md). The
  test conditions on tau, which swapping the arms of a scenario can change only when that
  scenario holds a side's longest follow-up alone (rare where conversations run a fixed number
  of exchanges: both sides reach the last);
* secondary: the log-rank test stratified by scenario (``kaplan_meier.logrank``); it treats the
  conversations of one scenario as independent, which arms of one tree are not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from branchpoint.analysis.stats.inference import ClusterMeans, holm_column, scenario_level_test
from branchpoint.analysis.survival.first_failure import FAILED
from branchpoint.analysis.survival.kaplan_meier import kaplan_meier, logrank

CURVE_KEYS = ["rubric_id", "judge", "outcome"]


def km_summary(ff: pd.DataFrame, by: Sequence[str], ci: float = 0.95) -> pd.DataFrame:
    """Per group of ``CURVE_KEYS`` + ``by``: n, failures, censorings by reason, the median with
    its interval (``KaplanMeier.median_interval``: continuous-time, at least one exchange wide),
    S at the last exchange, and the restricted mean to the group's longest follow-up."""
    if ff.empty:
        return pd.DataFrame()
    rows = []
    keys = [*CURVE_KEYS, *by]
    for key, g in ff.groupby(keys, sort=True, dropna=False):
        km = kaplan_meier(g["time"].to_numpy(float), g["event"].to_numpy(int), ci)
        tau = _follow_up(g)
        median_low, median_high = km.median_interval()
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        endings = g["ending"].value_counts()
        row.update({
            "n": km.n, "failures": int(endings.get(FAILED, 0)),
            "censored": int(km.n - endings.get(FAILED, 0)),
            "censored_by": "; ".join(f"{k.removeprefix('censored: ')} {v}"
                                     for k, v in endings.items() if k != FAILED),
            "median": km.median,
            "median_ci_low": median_low, "median_ci_high": median_high,
            "survival_at_end": km.at(tau), "tau": tau, "rmst": km.restricted_mean(tau),
        })  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def _follow_up(ff: pd.DataFrame) -> float:
    """The longest follow-up: the last exchange judged (``n_exchanges``), whether or not a
    conversation failed before it. The latest ``time`` is not it: where every conversation
    fails at exchange 1 the latest time is 1, and a restricted mean to 1 hides the failures."""
    return float(np.nanmax(ff[_follow_up_column(ff)].to_numpy(float)))


def _follow_up_column(ff: pd.DataFrame) -> str:
    """Each conversation's follow-up: the last exchange judged (a frame without it: its time)."""
    return "n_exchanges" if "n_exchanges" in ff.columns else "time"


def km_curves(ff: pd.DataFrame, by: Sequence[str], ci: float = 0.95) -> pd.DataFrame:
    """Every group's curve as rows (time, at risk, events, S and its interval): for plots and
    exports."""
    parts = []
    keys = [*CURVE_KEYS, *by]
    for key, g in ff.groupby(keys, sort=True, dropna=False):
        km = kaplan_meier(g["time"].to_numpy(float), g["event"].to_numpy(int), ci)
        frame = pd.DataFrame({"time": km.timeline, "at_risk": km.at_risk, "events": km.events,
                              "censored": km.censored, "survival": km.survival,
                              "ci_low": km.ci_low, "ci_high": km.ci_high})  # fmt: skip
        for k, v in zip(keys, key if isinstance(key, tuple) else (key,)):
            frame.insert(0, k, v)
        parts.append(frame)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def rmst_test(diffs: np.ndarray, tau: float, ci: float = 0.95) -> ClusterMeans:
    """The primary test of a matched comparison: ``diffs``, one restricted-mean difference (B
    minus A, to ``tau``) per scenario, by the scenario-level test's rule with ``exact`` (the
    sign-flip test at every number of scenarios; see the module docstring), bounds -tau to tau."""
    s = len(diffs)
    return scenario_level_test(diffs, np.arange(s), np.zeros(s, np.int64), 1, ci,
                               bounds=(-tau, tau), exact=True)  # fmt: skip


class _Times:
    """Each conversation's time and event (one row per conversation), looked up for many sides:
    indexed once, where a reindex per side and group indexed the frame again each time."""

    def __init__(self, ff: pd.DataFrame) -> None:
        self.index = pd.Index(ff["conversation_id"])
        self.time, self.event = ff["time"].to_numpy(float), ff["event"].to_numpy(float)
        self.follow_up = ff[_follow_up_column(ff)].to_numpy(float)

    def of(self, cids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Time, event and follow-up (the last exchange judged) of ``cids`` (NaN for a
        conversation without a row, as a reindex)."""
        at = self.index.get_indexer(cids)
        found, safe = at >= 0, np.where(at >= 0, at, 0)
        return tuple(np.where(found, x[safe], np.nan)  # type: ignore[return-value]
                     for x in (self.time, self.event, self.follow_up))  # fmt: skip


def matched_time_to_failure(
    ff: pd.DataFrame, pairs: pd.DataFrame, group_cols: Sequence[str], ci: float = 0.95
) -> pd.DataFrame:
    """The matched comparison (see the module docstring) per group of ``group_cols`` (columns of
    ``pairs``) and per outcome x judge of ``ff``. ``pairs``: ``conversation_id_a``,
    ``conversation_id_b``, ``scenario_id`` and ``group_cols``, one row per pair of
    conversations. Holm over the returned table, each judge's rows apart."""
    if ff.empty or pairs.empty:
        return pd.DataFrame()
    rows = []
    for (rubric, judge, outcome), f in ff.groupby(CURVE_KEYS, sort=True):
        times = _Times(f.drop_duplicates("conversation_id"))
        for key, p in pairs.groupby(list(group_cols), sort=True, dropna=False):
            ta, ea, fa = times.of(p["conversation_id_a"].astype(str).to_numpy())
            tb, eb, fb = times.of(p["conversation_id_b"].astype(str).to_numpy())
            ok = ~np.isnan(ta) & ~np.isnan(tb)
            if not ok.any():
                continue
            ta, ea, tb, eb = ta[ok], ea[ok], tb[ok], eb[ok]
            scen = p["scenario_id"].astype(str).to_numpy()[ok]
            # the last exchange both sides were followed to (not their latest failure: a side
            # whose every conversation fails at exchange 1 was still followed to its end)
            tau = float(min(np.nanmax(fa[ok]), np.nanmax(fb[ok])))
            codes, names = pd.factorize(scen, sort=True)
            diffs = np.array([
                kaplan_meier(tb[codes == s], eb[codes == s]).restricted_mean(tau)
                - kaplan_meier(ta[codes == s], ea[codes == s]).restricted_mean(tau)
                for s in range(len(names))
            ])  # fmt: skip
            test = rmst_test(diffs, tau, ci)
            lr = logrank(np.concatenate([ta, tb]), np.concatenate([ea, eb]),
                         np.r_[np.zeros(len(ta), int), np.ones(len(tb), int)],
                         np.concatenate([codes, codes]))  # fmt: skip
            km_a, km_b = kaplan_meier(ta, ea), kaplan_meier(tb, eb)
            row = dict(zip(group_cols, key if isinstance(key, tuple) else (key,)))
            row.update({
                "rubric_id": rubric, "judge": judge, "outcome": outcome, "n_pairs": int(ok.sum()),
                "n_scenarios": int(test.n_clusters[0]), "tau": tau,
                "rmst_a": km_a.restricted_mean(tau), "rmst_b": km_b.restricted_mean(tau),
                "median_a": km_a.median, "median_b": km_b.median,
                "failures_a": int(ea.sum()), "failures_b": int(eb.sum()),
                "rmst_diff": float(test.estimate[0]), "ci_low": float(test.ci_low[0]),
                "ci_high": float(test.ci_high[0]), "p_scenario": float(test.pvalue[0]),
                "test": test.method[0], "interval": test.labels()[0],
                "logrank_chi2": lr.statistic, "p_logrank": lr.pvalue,
            })  # fmt: skip
            rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_scenario_holm"] = holm_column(out, "p_scenario")
    out["p_logrank_holm"] = holm_column(out, "p_logrank")
    return out


def conversation_pairs(cand: pd.DataFrame, extra: Sequence[str] = ()) -> pd.DataFrame:
    """The distinct pairs of conversations of a candidate-pair frame (one row per criterion
    there), leaving out arms that never forked and copies of another pair."""
    if cand.empty:
        return pd.DataFrame()
    if "status" in cand.columns:
        st = np.asarray(cand["status"], dtype=object)
        cand = cand[~np.isin(st, ["never_forked", "copy"])]
    cols = ["conversation_id_a", "conversation_id_b", "scenario_id", *extra]
    out = cand[cols].copy()
    for c in cols:
        out[c] = out[c].astype(str)
    return out.drop_duplicates(["conversation_id_a", "conversation_id_b"]).reset_index(drop=True)
