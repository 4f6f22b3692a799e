"""Calibration of the judge-corrected rates and contrasts at the settings of issue 44: 5, 10 and
30 scenarios x 50, 100 and 300 labels; strata with 2 to 10 labels; 2% failure rates; judges at
0%, 100% and near-perfect; no true difference (the false-positive rate). 3 targets x 2 conditions,
judge sensitivity 0.5-0.9 and specificity 0.85-0.98 by target, scenarios clustered.

Per setting: the coverage of the nominal 95% corrected rate per stratum (target x condition) over
the strata given an interval, the share declined (too few labels, said in the row), the share of
zero width among those given, the mean width; and the same for the corrected contrast (option
arm minus baseline arm per target), with its false-positive rate where the truth is 0. Target:
>= 94% coverage wherever an interval is given.

Enactment that depends on the chatbot (issue 44, ``Grid.enact``): each scenario x target x
condition is one pair of arms; a firm reply (P 0.5) lowers the arm's failure logit by 1 and the
option arm enacts with P 0.3 after it, 0.9 otherwise (+10 points where enacted). The corrected
contrast over every pair is the intention-to-treat one (scored against the ITT truth); "PP" is
the same estimator on the enacted pairs only (as ``per_protocol_pairs`` keeps), scored against
the ITT truth too. Measured (300 studies a setting, 3 contrasts each; seed 0): ITT covered
96.4-98.1% at 5, 10, 20 scenarios x 300 labels (both mechanisms), 97.1% / 97.7% with no
difference (false-positive rate 2.9% / 2.3%); PP covered the ITT truth at 94.3-99.0% where
given (1-11% declined): its intervals (about 35 points wide) dwarf the selection bias here.

Strata in one scenario (``Grid.confined``): the rows rest on the plug-in variance alone, and the
script lists their coverage apart (300 studies: rates 96.4-98.9%, contrasts 97.6-98.8%).

    python benchmarks/judge_correction_grid.py [--reps 300] [--seed 0] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from branchpoint.analysis.judge_correction.estimators import (
    VARIANCE_BOTH,
    ppi_contrast,
    ppi_design,
)

TARGETS = 3
CONDITIONS = 2


@dataclass(frozen=True)
class Grid:
    name: str
    scenarios: int
    labels: int  # in all: spread equally over the target x condition strata
    base: tuple[float, ...] = (0.25, 0.15, 0.08)  # per target, at scenario effect 0
    sens: tuple[float, ...] = (0.5, 0.7, 0.9)
    spec: tuple[float, ...] = (0.85, 0.92, 0.98)
    delta: float = 0.1  # option minus baseline, added on the probability scale
    turns: int = 20  # judged turns per scenario x target x condition x arm
    spread: float = 0.8  # scenario effect, logit scale
    # "" (every option arm enacts its option) or where the chatbot decides enactment: each
    # scenario x target x condition is one pair of arms, and a firm reply (ENACTMENT) lowers the
    # arm's failure logit and makes the option arm's persona give in. "pre-fork": one reply before
    # the fork, shared by both arms; "post-fork": each arm's own reply at the branch.
    enact: str = ""
    # scenario 0's items form strata of their own (a criterion only that scenario triggers): the
    # labels of those strata all lie in one scenario, so the scenario jackknife cannot be
    # computed and the interval rests on the plug-in variance alone (said in the row)
    confined: bool = False


# P(firm reply), its shift of the failure logit, P(option enacted | firm), P(enacted | soft)
ENACTMENT = (0.5, 1.0, 0.3, 0.9)


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(60)
WEIGHTS = WEIGHTS / WEIGHTS.sum()


def _mixture(g: Grid) -> list[tuple[float, float, float]]:
    """(P(reply), its logit shift, P(option enacted | reply)) over the chatbot's replies."""
    if not g.enact:
        return [(1.0, 0.0, 1.0)]
    p_firm, shift, e_firm, e_soft = ENACTMENT
    return [(p_firm, shift, e_firm), (1 - p_firm, 0.0, e_soft)]


def truth(g: Grid, t: int, c: int, arm: int) -> float:
    """The arm's mean failure rate over scenarios (and replies; the option acts where enacted):
    every assigned arm, so contrasts of it are the intention-to-treat truth."""
    out = 0.0
    for w, shift, enacted in _mixture(g):
        eta = _logit(np.array(g.base[t])) - 0.5 * c - shift + g.spread * NODES
        p = 1 / (1 + np.exp(-eta))
        moved = np.sum(WEIGHTS * np.clip(p + g.delta, 0, 1)) - np.sum(WEIGHTS * p)
        out += w * (float(np.sum(WEIGHTS * p)) + arm * enacted * float(moved))
    return out


def study(g: Grid, rng: np.random.Generator) -> dict[str, np.ndarray]:
    s, n = g.scenarios, g.turns
    u = rng.standard_normal(s)
    t, c, arm, scen = (
        a.ravel()
        for a in np.meshgrid(
            np.arange(TARGETS), np.arange(CONDITIONS), np.arange(2), np.arange(s), indexing="ij"
        )
    )
    t, c, arm, scen = (np.repeat(a, n) for a in (t, c, arm, scen))
    base = np.array(g.base)[t]
    firm, enacted = _replies(g, rng, t, c, arm, scen)
    shift = ENACTMENT[1] * firm
    p = 1 / (1 + np.exp(-(_logit(base) - 0.5 * c - shift + g.spread * u[scen])))
    y = rng.random(len(p)) < np.clip(p + arm * enacted * g.delta, 0, 1)
    sens, spec = np.array(g.sens)[t], np.array(g.spec)[t]
    sens = np.where(arm == 1, sens * 0.8, sens)  # the judge errs differently by arm
    yhat = np.where(y, rng.random(len(y)) < sens, rng.random(len(y)) >= spec)
    stratum = t * 10 + c  # the design's strata: target x condition, both arms
    if g.confined:
        stratum = stratum + 100 * (scen == 0)
    labelled = np.zeros(len(y), bool)
    per, extra = divmod(g.labels, len(np.unique(stratum)))
    for i, h in enumerate(np.unique(stratum)):
        idx = np.flatnonzero(stratum == h)
        labelled[rng.choice(idx, min(len(idx), per + (i < extra)), replace=False)] = True
    return {"t": t, "c": c, "arm": arm, "scen": scen, "y": y.astype(float),
            "yhat": yhat.astype(float), "stratum": stratum, "labelled": labelled,
            "enacted": enacted}  # fmt: skip


def _replies(
    g: Grid, rng: np.random.Generator, *cells: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per item (``cells``: target, condition, arm, scenario): was its arm's reply firm, and did
    its pair's option arm enact (True for every item without ``g.enact``)."""
    t, c, arm, scen = cells
    if not g.enact:
        return np.zeros(len(t), bool), np.ones(len(t), bool)
    p_firm, _, e_firm, e_soft = ENACTMENT
    pair = (t * CONDITIONS + c) * g.scenarios + scen
    arm_firm = rng.random((TARGETS * CONDITIONS * g.scenarios, 2)) < p_firm
    if g.enact == "pre-fork":
        arm_firm[:, 1] = arm_firm[:, 0]
    pair_enacted = rng.random(len(arm_firm)) < np.where(arm_firm[:, 1], e_firm, e_soft)
    return arm_firm[pair, arm], pair_enacted[pair]


def one(g: Grid, rng: np.random.Generator) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """Scores of the rates, the (intention-to-treat) contrasts, and the per-protocol contrasts
    (enacted pairs only, scored against the intention-to-treat truth; none without ``enact``)."""
    d = study(g, rng)
    rates, contrasts, per_protocol = [], [], []
    for t in range(TARGETS):
        for c in range(CONDITIONS):
            m = (d["t"] == t) & (d["c"] == c)
            est = ppi_design(
                d["yhat"][m], d["y"][m], d["labelled"][m], d["stratum"][m], d["scen"][m]
            )
            tr = (truth(g, t, c, 0) + truth(g, t, c, 1)) / 2
            rates.append(_score(est, tr))
        tr = float(np.mean([truth(g, t, c, 1) - truth(g, t, c, 0) for c in range(CONDITIONS)]))
        for keep, out in ((True, contrasts), (d["enacted"], per_protocol)):
            if keep is not True and not g.enact:
                continue
            sides = []
            for a in (1, 0):
                m = (d["t"] == t) & (d["arm"] == a) & keep
                sides.append({"yhat": d["yhat"][m], "y": d["y"][m], "labelled": d["labelled"][m],
                              "stratum": d["stratum"][m], "cluster": d["scen"][m]})  # fmt: skip
            out.append(_score(ppi_contrast(sides[0], sides[1]), tr))
    return rates, contrasts, per_protocol


def _score(est: object, tr: float) -> tuple:
    """(given, covered, zero width, width, excludes 0, on the plug-in variance alone)"""
    if isinstance(est, str):
        return (False, False, False, np.nan, False, False)
    iv = est.corrected  # type: ignore[attr-defined]
    return (True, iv.low <= tr <= iv.high, iv.high <= iv.low, iv.high - iv.low,
            not iv.low <= 0 <= iv.high, est.variance_rule != VARIANCE_BOTH)  # type: ignore[attr-defined]  # fmt: skip


JUDGE0 = dict(sens=(0.0,) * 3, spec=(1.0,) * 3)
JUDGE100 = dict(sens=(1.0,) * 3, spec=(0.0,) * 3)
NEAR = dict(sens=(0.98,) * 3, spec=(0.995,) * 3)
GRIDS = [
    *(Grid(f"{s} scenarios x {n} labels", s, n) for s in (5, 10, 30) for n in (50, 100, 300)),
    *(Grid(f"strata of {k} labels, 10 scenarios", 10, 6 * k) for k in (2, 3, 5, 7, 10)),
    Grid("2% failures, 10 x 100", 10, 100, base=(0.02,) * 3, delta=0.02),
    Grid("2% failures, 30 x 300", 30, 300, base=(0.02,) * 3, delta=0.02),
    Grid("2% failures, near-perfect judge, 10 x 100", 10, 100, base=(0.02,) * 3, delta=0.0, **NEAR),
    Grid("judge says 0%, 10 x 100", 10, 100, **JUDGE0),
    Grid("judge says 100%, 10 x 100", 10, 100, **JUDGE100),
    Grid("near-perfect judge, 10 x 100", 10, 100, **NEAR),
    Grid("no difference (false positives), 10 x 100", 10, 100, delta=0.0),
    Grid("no difference, 5 x 50", 5, 50, delta=0.0),
    *(Grid(f"one-scenario strata, {s} x {n}", s, n, confined=True)
      for s, n in ((5, 100), (5, 300), (10, 100), (10, 300), (30, 300))),
    Grid("one-scenario strata, no difference, 10 x 300", 10, 300, delta=0.0, confined=True),
    *(Grid(f"enactment {m}, {s} x {n}", s, n, enact=m)
      for m in ("pre-fork", "post-fork") for s, n in ((5, 300), (10, 300), (20, 300))),
    *(Grid(f"enactment {m}, no difference, 10 x 300", 10, 300, delta=0.0, enact=m)
      for m in ("pre-fork", "post-fork")),
]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", help="settings whose name contains any of these")
    args = ap.parse_args()
    print(f"nominal 95%, {args.reps} studies a setting; rate: per stratum (6 a study); "
          "contrast: per target (3 a study); cover = over intervals given")  # fmt: skip
    print(
        f"{'setting':44} | {'rate cover':>10} {'declined':>8} {'zero':>5} {'width':>6} | "
        f"{'contr cover':>11} {'declined':>8} {'zero':>5} {'width':>6} {'excl 0':>6} | "
        f"{'PP cover':>8} {'declined':>8} {'excl 0':>6}"
    )
    plug_in = []  # rows given on the plug-in variance alone (the jackknife not computable)
    start = time.perf_counter()
    for i, g in enumerate(GRIDS):
        if args.only and not any(o in g.name for o in args.only):
            continue
        rng = np.random.default_rng([args.seed, i])
        r_all, c_all, pp_all = [], [], []
        for _ in range(args.reps):
            r, c, pp = one(g, rng)
            r_all += r
            c_all += c
            pp_all += pp
        line = f"{g.name:44}"
        for rows, last in (
            (np.array(r_all, dtype=float), False),
            (np.array(c_all, dtype=float), True),
        ):
            given = rows[:, 0] == 1
            cov = rows[given, 1].mean() if given.any() else np.nan
            line += (f" | {cov:>10.1%} {1 - given.mean():>8.1%} {rows[given, 2].mean() if given.any() else 0:>5.1%}"
                     f" {np.nanmean(rows[given, 3]) if given.any() else np.nan:>6.3f}")  # fmt: skip
            if last:
                fp = rows[given, 4].mean() if given.any() else np.nan
                line += f" {fp:>6.1%}" if g.delta == 0 else f" {'':>6}"
            alone = given & (rows[:, 5] == 1)
            if alone.any():
                kind = "contrasts" if last else "rates"
                plug_in.append(f"{g.name:44} | {kind:9} {alone.sum() / given.sum():>6.1%} of "
                               f"those given, covering {rows[alone, 1].mean():.1%}")  # fmt: skip
        if pp_all:  # per protocol, scored against the intention-to-treat truth
            rows = np.array(pp_all, dtype=float)
            given = rows[:, 0] == 1
            line += (f" | {rows[given, 1].mean():>8.1%} {1 - given.mean():>8.1%}"
                     f" {rows[given, 4].mean():>6.1%}")  # fmt: skip
        print(line, flush=True)
    if plug_in:
        print("on the plug-in variance alone (the scenario jackknife not computable):")
        print("\n".join(plug_in))
    print(f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
