"""Calibration where enactment depends on the chatbot (issue 44): a firm help offer makes the
persona give in, so whether the option arm enacts its option is decided after assignment.

A simulated study: ``n_scenarios`` scenarios with 3 to 21 matched pairs each (a baseline arm
that always enacts, an option arm that may not), each arm rated on ``turns`` post-fork turns. A
*firm* chatbot reply (probability ``p_firm``) lowers the arm's failure probability by
``firm_shift`` and makes the persona give in: the option arm enacts with probability
``enact_firm`` after a firm reply, ``enact_soft`` otherwise. The option changes the failure
probability by ``b_s ~ Normal(mean_effect, effect_sd)`` in scenario s, only where enacted.

Two mechanisms (``Enactment.mechanism``):

* ``pre-fork``: the firm reply comes before the fork, shared by both arms of a pair. The pairs
  enacted are the soft ones, whose failure rate and effect differ from the firm pairs': per
  protocol estimates the effect where enacted, not the effect of assigning the option.
* ``post-fork``: the reply at the branch, drawn in each arm on its own (the option does not
  change the chatbot). The option arm enacts where its own reply was soft, so per protocol keeps
  the option arms that fail more: a difference with no effect at all.

Either way the intention-to-treat difference (every assigned pair) estimates the effect of
assigning the option; its truth (``truth``) is the population mean of the pair difference.
Studies are stacked one criterion per study and analysed in one call of the real
``matched_contrasts`` with the manipulation checks as realisation rows (``not_enacted`` where the
persona gave in), as the report computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from branchpoint.analysis.testing.calibration import Design, pairs_per_scenario, stacked_frame
from branchpoint.core.domain import ENACTED, NOT_ENACTED

MECHANISMS = ("pre-fork", "post-fork")
BASELINE, OPTION = "accept_limit", "push_back"


@dataclass(frozen=True)
class Enactment:
    n_scenarios: int
    mechanism: str = "post-fork"
    mean_effect: float = 0.0
    n_studies: int = 1000
    p_firm: float = 0.5
    firm_shift: float = 0.15  # a firm reply's failure probability is lower by this
    enact_firm: float = 0.3
    enact_soft: float = 0.9
    base: float = 0.35
    base_sd: float = 0.05  # scenario-level spread of the (soft) failure probability
    effect_sd: float = 0.08  # scenario-level spread of the option's effect
    turns: int = 6
    p_applicable: float = 0.7
    seed: int = 0


def _draw(e: Enactment, rng: np.random.Generator, scen: np.ndarray, n_scen: int) -> dict:
    """Per pair (``scen``: its scenario, 0 .. n_scen - 1): failure probabilities of both arms and
    whether the option arm enacted."""
    n = len(scen)
    base = e.base + rng.normal(0, e.base_sd, n_scen)
    eff = rng.normal(e.mean_effect, e.effect_sd, n_scen)
    firm_a = rng.random(n) < e.p_firm
    firm_b = firm_a if e.mechanism == "pre-fork" else rng.random(n) < e.p_firm
    enacted = rng.random(n) < np.where(firm_b, e.enact_firm, e.enact_soft)
    p0 = np.clip(base[scen] - e.firm_shift * firm_a, 0.0, 1.0)
    soft_b = np.clip(base[scen] - e.firm_shift * firm_b, 0.0, 1.0)
    p1 = np.clip(soft_b + enacted * eff[scen], 0.0, 1.0)
    return {"p0": p0, "p1": p1, "enacted": enacted}


def truth(e: Enactment, n: int = 4_000_000, seed: int = 12345) -> dict[str, float]:
    """The intention-to-treat truth (mean pair difference of every assigned pair) and the
    per-protocol one (of enacted pairs), from ``n`` draws of one pair per scenario (Monte Carlo
    error about 0.00004). With ``mean_effect`` 0 the ITT truth is 0 but for the clipping of a
    probability at 0 (about 0.0002)."""
    d = _draw(e, np.random.default_rng(seed), np.arange(n), n)
    diff = d["p1"] - d["p0"]
    itt = float(diff.mean())
    return {"itt": itt, "per_protocol": float(diff[d["enacted"]].mean())}


def simulate(e: Enactment) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The stacked conversation x criterion frame (criterion ``study00000`` ... per study) and its
    realisation rows (``branchpoint.core.read.realisation_rows``' columns) with the checks."""
    if e.mechanism not in MECHANISMS:
        raise ValueError(f"mechanism {e.mechanism!r}: one of {MECHANISMS}")
    rng = np.random.default_rng(e.seed)
    layout = Design(e.n_scenarios, 0.0, e.base, n_studies=e.n_studies, turns=e.turns,
                    p_applicable=e.p_applicable)  # fmt: skip
    npairs = pairs_per_scenario(layout, rng)
    k, s = npairs.shape
    scen = np.repeat(np.arange(k * s), npairs.ravel())  # study x scenario, per pair
    d = _draw(e, rng, scen, k * s)
    frame = stacked_frame(layout, rng, {BASELINE: d["p0"], OPTION: d["p1"]}, npairs)
    n = len(scen)  # ``stacked_frame`` writes the baseline arms, then the option arms, pair by pair
    # One target per pair and study ("study-scenario-pair", the conversation id less its arm):
    # the pairing names a pair by its first conversation of the matched keys, and realisation is
    # looked up by that name, so studies stacked in one frame must not share keys.
    frame["target"] = frame["conversation_id"].str.split("-", n=1).str[1]
    real = pd.DataFrame(
        {
            "conversation_id": frame["conversation_id"].to_numpy(),
            "branch_point": "limit",
            "option": np.repeat([BASELINE, OPTION], n),
            "realised": True,  # the branch fired in every arm: enactment is the question
            "exchange": 1,
            "recorded": True,
            "enactment": np.concatenate(
                [np.full(n, ENACTED, object), np.where(d["enacted"], ENACTED, NOT_ENACTED)]
            ),
        }
    )
    return frame, real


@dataclass(frozen=True)
class EnactmentCalibration:
    """Per analysis (intention to treat, per protocol): coverage of the ITT truth, the share of
    studies rejecting H0 at alpha, and the mean estimate; with the truths and studies."""

    n_studies: int
    truth_itt: float
    truth_pp: float
    cover_itt: float
    reject_itt: float
    mean_itt: float
    cover_pp: float  # of the ITT truth: per protocol answers another question
    reject_pp: float
    mean_pp: float
    enacted: float  # share of option arms enacted


def calibrate_enactment(e: Enactment, alpha: float = 0.05) -> EnactmentCalibration:
    from branchpoint.analysis.contrasts.matched import matched_contrasts

    frame, real = simulate(e)
    res = matched_contrasts(
        frame, {"limit": BASELINE}, per_target=False, realisation=real, n_boot=0
    )
    tab = res.contrasts.sort_values("criterion_id").reset_index(drop=True)
    tr = truth(e)

    def summary(sfx: str) -> tuple[float, float, float]:
        lo, hi = tab[f"ci_low{sfx}"].to_numpy(float), tab[f"ci_high{sfx}"].to_numpy(float)
        p = np.nan_to_num(tab[f"p_scenario{sfx}"].to_numpy(float), nan=1.0)
        # a study without an interval (every pair of a scenario left out) does not cover
        cover = (lo <= tr["itt"]) & (tr["itt"] <= hi)
        return (
            float(np.mean(cover)),
            float(np.mean(p < alpha)),
            float(np.nanmean(tab[f"diff{sfx}"])),
        )

    ci, ri, mi = summary("_itt")
    cp, rp, mp = summary("")
    enacted = real["enactment"].iloc[len(real) // 2 :] == ENACTED
    return EnactmentCalibration(
        n_studies=len(tab), truth_itt=tr["itt"], truth_pp=tr["per_protocol"], cover_itt=ci,
        reject_itt=ri, mean_itt=mi, cover_pp=cp, reject_pp=rp, mean_pp=mp,
        enacted=float(enacted.mean()),
    )  # fmt: skip
