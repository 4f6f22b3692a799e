"""Calibration of the matched-contrast tests on simulated studies with scenario-varying effects.

A simulated study: ``n_scenarios`` scenarios, each with ``pairs_per_scenario`` matched pairs
(think targets x conditions x replicates) of a baseline and an option arm, each arm rated on
``turns`` post-fork turns. The option changes the per-turn failure probability by ``b_s`` in
scenario s, ``b_s ~ Normal(mean_effect, effect_sd)``: with ``mean_effect = 0`` the effect is zero
on average but not in any one scenario, which is what makes pairs of one scenario dependent.

Many independent studies are stacked into one conversation x criterion frame, one criterion per
study, and analysed in one call of the real ``matched_contrasts``: every study gets its own
primary (scenario-level) test and its pair-level tests, exactly as a report computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from branchpoint.analysis.stats.bootstrap import (
    cluster_weights,
    per_cluster_sums,
    ratio_difference_interval,
)


@dataclass(frozen=True)
class Simulation:
    n_scenarios: int
    n_studies: int = 400
    pairs_per_scenario: int = 12
    turns: int = 6
    p_applicable: float = 0.7
    base: float = 0.30
    base_sd: float = 0.05  # scenario-level spread of the baseline failure probability
    effect_sd: float = 0.08  # scenario-level spread of the option's effect
    mean_effect: float = 0.0
    seed: int = 0


def simulate(sim: Simulation) -> pd.DataFrame:
    """The stacked conversation x criterion frame (criterion ``study00000`` ... per study)."""
    rng = np.random.default_rng(sim.seed)
    k, s, m = sim.n_studies, sim.n_scenarios, sim.pairs_per_scenario
    p0 = np.clip(sim.base + rng.normal(0, sim.base_sd, (k, s)), 0.01, 0.99)
    eff = rng.normal(sim.mean_effect, sim.effect_sd, (k, s))
    p1 = np.clip(p0 + eff, 0.0, 1.0)
    shape = (k, s, m)
    frames = []
    for arm, p in (("accept_limit", p0), ("push_back", p1)):
        rated = rng.binomial(sim.turns, sim.p_applicable, size=shape)
        fails = rng.binomial(rated, np.broadcast_to(p[:, :, None], shape))
        ki, si, mi = (a.ravel() for a in np.indices(shape))
        frames.append(
            pd.DataFrame(
                {
                    "conversation_id": [f"{arm}-{a}-{b}" for a, b in zip(si, mi)],
                    "run_id": "calibration",
                    "scenario_id": [f"scn{x:03d}" for x in si],
                    "target": [f"target{x:02d}" for x in mi],
                    "condition": "none",
                    "simulator": "sim",
                    "replicate": 0,
                    "rubric_id": "calibration",
                    "criterion_id": [f"study{x:05d}" for x in ki],
                    "judge": "simulated",
                    "risk_area": "simulated",
                    "n_rated": rated.ravel(),
                    "n_fail": fails.ravel(),
                    "n_partial": 0,
                    "n_error": 0,
                    "n_other": 0,
                    "score_sum": (rated - fails).ravel().astype(float),
                    "n_scored": rated.ravel(),
                    "choice:limit": arm,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class Calibration:
    """Share of studies rejecting H0 at ``alpha`` (the false-positive rate when the true mean
    effect is 0, the power otherwise) and interval coverage of the true mean effect."""

    n_studies: int
    reject_primary: float  # t-test over scenario means (the analysis' primary test)
    reject_mcnemar: float  # pair-level, not cluster-adjusted
    reject_wilcoxon: float  # pair-level, not cluster-adjusted
    reject_pair_t: float  # a t-test over pairs, ignoring the scenarios
    reject_bootstrap: float  # cluster-bootstrap percentile interval excludes 0
    cover_primary: float
    cover_pair_t: float
    cover_bootstrap: float


def calibrate(sim: Simulation, alpha: float = 0.05, n_boot: int = 1000) -> Calibration:
    from scipy import stats

    from branchpoint.analysis.contrasts.matched import matched_contrasts

    frame = simulate(sim)
    res = matched_contrasts(frame, {"limit": "accept_limit"}, per_target=False)
    tab = res.contrasts.sort_values("criterion_id").reset_index(drop=True)
    truth = sim.mean_effect
    cover_primary = float(np.mean((tab["ci_low"] <= truth) & (truth <= tab["ci_high"])))

    # The pair-level t interval and the cluster bootstrap, from the same pairs.
    a = frame[frame["choice:limit"] == "accept_limit"].reset_index(drop=True)
    b = frame[frame["choice:limit"] == "push_back"].reset_index(drop=True)
    both = (a["n_rated"] > 0) & (b["n_rated"] > 0)
    d = (b["n_fail"] / b["n_rated"] - a["n_fail"] / a["n_rated"])[both]
    study = a.loc[both, "criterion_id"]
    g = d.groupby(study.to_numpy())
    mean, sd, n = g.mean(), g.std(ddof=1), g.size()
    half = stats.t.ppf(1 - alpha / 2, n - 1) * sd / np.sqrt(n)
    pair_t_p = 2 * stats.t.sf(np.abs(mean / (sd / np.sqrt(n))), n - 1)
    cover_pair_t = float(np.mean((mean - half <= truth) & (truth <= mean + half)))

    cl = pd.factorize(a["scenario_id"])[0]
    grp = pd.factorize(a["criterion_id"], sort=True)[0]
    keep = both.to_numpy()
    ns, ng = int(cl.max()) + 1, int(grp.max()) + 1
    sums = {
        key: per_cluster_sums(cl[keep], grp[keep], frame_[col].to_numpy(float)[keep], ns, ng)
        for key, frame_, col in (
            ("fa", a, "n_fail"),
            ("ra", a, "n_rated"),
            ("fb", b, "n_fail"),
            ("rb", b, "n_rated"),
        )
    }
    w = cluster_weights(ns, n_boot, sim.seed + 1)
    _, lo, hi = ratio_difference_interval(
        sums["fa"], sums["ra"], sums["fb"], sums["rb"], w, 1 - alpha
    )
    return Calibration(
        n_studies=len(tab),
        reject_primary=float(np.mean(tab["p_scenario"] < alpha)),
        reject_mcnemar=float(np.mean(tab["p_mcnemar"] < alpha)),
        reject_wilcoxon=float(np.mean(tab["p_wilcoxon"] < alpha)),
        reject_pair_t=float(np.mean(pair_t_p < alpha)),
        reject_bootstrap=float(np.mean((lo > 0) | (hi < 0))),
        cover_primary=cover_primary,
        cover_pair_t=cover_pair_t,
        cover_bootstrap=float(np.mean((lo <= truth) & (truth <= hi))),
    )


# --------------------------------------------------------------------------- rates and designs


@dataclass(frozen=True)
class Design:
    """One setting of the coverage grid: scenarios, scenario-level spread, base rate, and
    whether scenarios have unequal numbers of pairs (drawn from 3 to 21, mean 12)."""

    n_scenarios: int
    scenario_sd: float
    base: float
    unequal: bool = True
    n_studies: int = 1000
    turns: int = 6
    p_applicable: float = 0.7
    seed: int = 0


def clipped_mean(base: float, sd: float) -> float:
    """E[clip(base + sd Z, 0, 1)], Z standard normal: the true mean of the scenario rates."""
    from scipy import stats

    a, b = (0 - base) / sd, (1 - base) / sd
    inside = base * (stats.norm.cdf(b) - stats.norm.cdf(a)) + sd * (
        stats.norm.pdf(a) - stats.norm.pdf(b)
    )
    return float(inside + 1.0 * stats.norm.sf(b))


def pairs_per_scenario(d: Design, rng: np.random.Generator) -> np.ndarray:
    """(studies x scenarios) pairs per scenario."""
    if not d.unequal:
        return np.full((d.n_studies, d.n_scenarios), 12)
    return rng.integers(3, 22, size=(d.n_studies, d.n_scenarios))


def stacked_frame(
    d: Design, rng: np.random.Generator, arms: dict[str, np.ndarray], npairs: np.ndarray
) -> pd.DataFrame:
    """Conversation x criterion rows, one criterion per study; ``arms``: arm -> (k x s) rates
    per scenario, or one rate per pair (study by study, scenario by scenario, in order)."""
    k, s = npairs.shape
    ks = np.repeat(np.arange(k), s)
    ss = np.tile(np.arange(s), k)
    reps = npairs.ravel()
    kk, sc = np.repeat(ks, reps), np.repeat(ss, reps)
    mi = np.concatenate([np.arange(r) for r in reps])
    frames = []
    for arm, p in arms.items():
        rated = rng.binomial(d.turns, d.p_applicable, size=len(kk))
        fails = rng.binomial(rated, p[kk, sc] if p.ndim == 2 else p)
        frames.append(
            pd.DataFrame(
                {
                    "conversation_id": [f"{arm}-{a}-{b}-{c}" for a, b, c in zip(kk, sc, mi)],
                    "run_id": "calibration",
                    "scenario_id": [f"scn{x:03d}" for x in sc],
                    "target": [f"target{x:02d}" for x in mi],
                    "condition": "none",
                    "simulator": "sim",
                    "replicate": 0,
                    "rubric_id": "calibration",
                    "criterion_id": [f"study{x:05d}" for x in kk],
                    "judge": "simulated",
                    "risk_area": "simulated",
                    "n_rated": rated,
                    "n_fail": fails,
                    "n_partial": 0,
                    "n_error": 0,
                    "n_other": 0,
                    "score_sum": (rated - fails).astype(float),
                    "n_scored": rated,
                    "choice:limit": arm,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class DesignCalibration:
    truth: float  # the mean scenario failure rate the rate interval should cover
    cover_rate: float  # failure-rate interval (as ``failure_rates`` gives it) covers ``truth``
    reject_primary: float  # primary contrast test at alpha under an exact null
    cover_primary: float  # primary contrast interval covers 0 under that null
    n_studies: int


def calibrate_design(d: Design, alpha: float = 0.05) -> DesignCalibration:
    """Coverage of the failure-rate interval and size of the primary contrast test at one design.

    Rates: scenario rates ``clip(base + sd Z, 0, 1)``; the interval must cover their mean. The
    contrast null: both arms of a scenario draw their own rate around the scenario's
    (``sd / sqrt 2`` each, so the difference varies by scenario with sd about ``sd``), which makes
    the arms exchangeable: the mean difference is exactly zero, clipping or not.
    """
    from branchpoint.analysis.contrasts.matched import matched_contrasts
    from branchpoint.analysis.outcomes.rates import failure_rates

    rng = np.random.default_rng(d.seed)
    k, s = d.n_studies, d.n_scenarios
    npairs = pairs_per_scenario(d, rng)
    p_s = np.clip(d.base + rng.normal(0, d.scenario_sd, (k, s)), 0.0, 1.0)
    frame = stacked_frame(d, rng, {"accept_limit": p_s}, npairs)
    rates = failure_rates(frame, by=("criterion_id",), n_boot=1000, seed=d.seed)
    truth = clipped_mean(d.base, d.scenario_sd)
    cover_rate = float(np.mean((rates["ci_low"] <= truth) & (truth <= rates["ci_high"])))

    arm_sd = d.scenario_sd / np.sqrt(2)
    p0 = np.clip(p_s + rng.normal(0, arm_sd, (k, s)), 0.0, 1.0)
    p1 = np.clip(p_s + rng.normal(0, arm_sd, (k, s)), 0.0, 1.0)
    pair_frame = stacked_frame(d, rng, {"accept_limit": p0, "push_back": p1}, npairs)
    # pair arms by (scenario, target): the conversation ids differ only in the arm's name
    tab = matched_contrasts(pair_frame, {"limit": "accept_limit"}, per_target=False).contrasts
    p = tab["p_scenario"].to_numpy(float)
    reject = np.nan_to_num(p, nan=1.0) < alpha
    cover = (tab["ci_low"] <= 0) & (tab["ci_high"] >= 0)
    return DesignCalibration(
        truth=truth,
        cover_rate=cover_rate,
        reject_primary=float(np.mean(reject)),
        cover_primary=float(np.mean(cover)),
        n_studies=k,
    )
