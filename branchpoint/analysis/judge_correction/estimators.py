"""Judge-corrected failure rates: prediction-powered inference (PPI++) with a stratified,
clustered labelling design.

Every failure rate branchpoint reports is a judge's. A judge that misses failures makes the rates
too low, with intervals that look tight. Prediction-powered inference (Angelopoulos, Bates,
Fannjiang, Jordan, Zrnic, *Science* 2023) corrects the judge's rate with a random sample of human
labels: the judge's mean over every judged turn, plus the mean of (human - judge) on the labelled
ones. PPI++ (Angelopoulos, Duchi, Zrnic 2023) weighs the judge by a lambda in [0, 1]; here it is
1 (plain PPI) unless a caller fixes another: a lambda tuned on the same labels under-covered
(issue 44; ``DEFAULT_LAMBDA``). Each stratum needs ``MIN_LABELS_PER_STRATUM`` labels, and its
rectifier's variance is floored (``branchpoint.analysis.stats.intervals``), so labels that all
agree never give a zero-width interval.

The design (``branchpoint.core.human_labels``) draws items at random without replacement within strata
(target x condition, x criterion when asked), so the estimator here is post-stratified: within
each stratum of the design (intersected with the group estimated), the labelled items are a
simple random sample of that stratum's items, each standing for N_h / n_h of them. For a group

    theta = sum_h N_h / N * [ lambda * mean(judge over the N_h items)
                              + mean(human - lambda * judge over the n_h labelled) ]

Its variance is the cluster-robust (sandwich) variance over scenarios of the per-item influence
values, so turns, arms and targets of one scenario are not taken as independent, and it holds both
the judge's spread over scenarios and the sampling of labels. The interval is t-based on the
Satterthwaite degrees of freedom of that variance, symmetric, within [0, 1] (``rate_interval``).

Beside each corrected rate: the judge-only rate (lambda 1 without the correction: what the
report shows today, with the same clustered interval), the human-only rate on the labelled items
(lambda 0), and the judge's sensitivity and specificity against the labels (design-weighted
ratios with clustered intervals).

Only labels made from a design's queue, blind, count (``design_id`` set, ``blind`` true); labels
made outside a design are kept in the store and counted in the notes, never used here. Human
"not applicable" on a turn the judge rated counts as no failure. Several annotators of one item
are averaged.

``ppi_mean_iid`` is the plain i.i.d. PPI++ mean, written to equal ``ppi_py.ppi_mean_ci`` (the
reference implementation, ``ppi-python``) to floating-point precision; the tests check it, and
check that the design estimator with one stratum gives ``ppi_py``'s point estimate.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.stats.distributions import norm_ppf, t_ppf
from branchpoint.analysis.stats.intervals import (
    MIN_LABELS_PER_STRATUM,
    no_spread_interval,
    rectifier_floor,
)
from branchpoint.core.human_labels import STRATUM_SEP
from branchpoint.core.scales import RISK_LEVELS, WORST_LEVELS

ALL = "(all)"  # the condition / criterion of a per-target row
# Planning before any label: the judge and a person are assumed to disagree on this share of
# items (the residual variance of human - judge is at most the disagreement rate).
PRIOR_DISAGREEMENT = 0.15
PRIOR_WEIGHT = 10  # observed disagreement is shrunk toward the prior as if by this many labels
DEFAULT_WIDTH = 5.0  # percentage points: the half-width the tables count labels toward


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    se: float


@dataclass(frozen=True)
class PPIEstimate:
    corrected: Interval
    judge_only: Interval
    human_only: Interval
    lam: float
    n_items: int
    n_labelled: int
    n_clusters: int
    lambda_rule: str = ""  # how lambda was chosen (``_lambda_and_se``)
    variance_rule: str = ""  # which variance the corrected interval rests on (``_lambda_and_se``)


def _nan_interval() -> Interval:
    return Interval(math.nan, math.nan, math.nan, math.nan)


# --------------------------------------------------------------------------- i.i.d. PPI++


def ppi_mean_iid(
    y: np.ndarray,
    yhat: np.ndarray,
    yhat_unlabelled: np.ndarray,
    *,
    alpha: float = 0.05,
    lam: float | None = None,
) -> tuple[float, float, float, float]:
    """PPI++ mean of i.i.d. data: (estimate, low, high, lambda), as ``ppi_py.ppi_mean_ci`` and
    ``ppi_mean_pointestimate`` compute them (``yhat_unlabelled`` are the judge's predictions on
    the unlabelled items; lambda tuned and clipped to [0, 1] when not given)."""
    y, yhat, yu = (np.asarray(a, dtype=float) for a in (y, yhat, yhat_unlabelled))
    n, big_n = len(y), len(yu)
    if lam is None:
        est1 = yu.mean() + (y - yhat).mean()  # the lambda = 1 estimate, centring the gradients
        g, gh, ghu = y - est1, yhat - est1, yu - est1
        cov = 2 * np.mean((g - g.mean()) * (gh - gh.mean()))
        var_hat = np.var(np.concatenate([gh, ghu]), ddof=1)
        lam = float(np.clip(cov / (2 * (1 + n / big_n) * var_hat), 0, 1))
    est = float((lam * yu).mean() + (y - lam * yhat).mean())
    se = math.sqrt(np.std(lam * yu) ** 2 / big_n + np.std(y - lam * yhat) ** 2 / n)
    z = norm_ppf(1 - alpha / 2)
    return est, est - z * se, est + z * se, lam


# --------------------------------------------------------------------------- design PPI++


def ppi_design(
    yhat: np.ndarray,
    y: np.ndarray,
    labelled: np.ndarray,
    stratum: np.ndarray,
    cluster: np.ndarray,
    *,
    alpha: float = 0.05,
    lam: float | None = None,
) -> PPIEstimate | str:
    """PPI++ mean over every item of a group, with labels drawn at random within strata.

    ``yhat``: the judge's value on each item (1 failed, 0 not; or any score); ``y``: the human
    value where ``labelled`` (anything elsewhere); ``stratum``: each item's design stratum;
    ``cluster``: each item's scenario. Returns the estimates, or one line saying why there are
    none (a stratum with fewer than ``MIN_LABELS_PER_STRATUM`` labels, one scenario).

    Lambda and the variance follow ``_lambda_and_se`` (lambda 1 unless fixed: never tuned on the
    labels it corrects; the larger of the plug-in and the scenario-jackknife variance), and
    each stratum's rectifier variance is at least ``rectifier_floor`` (labels that all agree do
    not make the interval zero width)."""
    yhat = np.asarray(yhat, dtype=float)
    lab = np.asarray(labelled, dtype=bool)
    y = np.where(lab, np.asarray(y, dtype=float), 0.0)
    if len(yhat) == 0:
        return "no judged items"
    c_codes, c_names = pd.factorize(pd.Series(cluster).astype(str))
    got = _influence(yhat, y, lab, np.asarray(stratum), c_codes, len(c_names))
    if isinstance(got, str):
        return got
    if len(c_names) < 2:
        return "one scenario: the clustering cannot be estimated"
    o = got
    lam, jack, rule, variance_rule = _lambda_and_se(o, None, lam)
    g = len(c_names)
    scale = g / (g - 1) / o.n**2
    bounded = yhat.min() >= 0 and yhat.max() <= 1  # rates; scores are not clipped

    def interval(
        estimate: float, z: np.ndarray, lam_: float | None, se: float | None = None
    ) -> Interval:
        plug_in = math.sqrt(scale * float(z @ z))
        se = plug_in if se is None else max(se, plug_in)
        extra = o.floor_variance(lam_) if lam_ is not None else 0.0  # rests on labels: floor
        t = t_ppf(1 - alpha / 2, floored_df(effective_df(z), se**2, extra))
        se = math.sqrt(se**2 + extra)
        if bounded and se == 0:  # every scenario the same (the judge-only rate at 0%): rule 3
            return Interval(estimate, *no_spread_interval(estimate, g, (0.0, 1.0), 1 - alpha), se)
        if bounded:
            return rate_interval(estimate, se, t)
        return Interval(estimate, estimate - t * se, estimate + t * se, se)

    return PPIEstimate(
        corrected=interval(o.theta_b + lam * o.theta_a, o.u + lam * o.v, lam, jack),
        judge_only=interval(o.theta_j, o.r, None),
        human_only=interval(o.theta_b, o.u, 0.0),
        lam=lam,
        n_items=o.n,
        n_labelled=int(lab.sum()),
        n_clusters=g,
        lambda_rule=rule,
        variance_rule=variance_rule,
    )


@dataclass(frozen=True)
class _Influence:
    """One group's per-scenario totals of the influence values (b + lambda a) and of the judge,
    centred, and its mean pieces: theta = theta_b + lambda theta_a; ``cells``: its sums per
    scenario x stratum, from which any subset of scenarios is estimated again (the jackknife)."""

    u: np.ndarray
    v: np.ndarray
    r: np.ndarray
    theta_b: float
    theta_a: float
    theta_j: float
    n: int
    cells: np.ndarray
    # per stratum, over its labels: n_h, N_h, sum y, sum yhat, sum y^2, sum yhat^2, sum y yhat
    moments: np.ndarray = field(default_factory=lambda: np.zeros((7, 0)))
    span: float = 1.0  # the range of the outcome: the floor is scaled by its square

    def floor_variance(self, lam: float) -> float:
        """The variance added to this side's estimate so that each stratum's rectifier
        (human - lambda * judge) counts at least ``rectifier_floor(n_h)`` (interval rule 4):
        sum_h (N_h / N)^2 max(0, floor_h - s_h^2) / n_h, s_h^2 its observed sample variance."""
        n_h, big_n_h, sy, sh, syy, shh, syh = self.moments
        with np.errstate(invalid="ignore", divide="ignore"):
            total = syy - 2 * lam * syh + lam**2 * shh
            mean = (sy - lam * sh) / n_h
            observed = np.where(n_h > 1, (total - n_h * mean**2) / (n_h - 1), 0.0)
        short = np.maximum(0.0, self.span**2 * rectifier_floor(n_h) - observed)
        return float(np.sum((big_n_h / self.n) ** 2 * short / n_h))


# Per scenario x stratum sums of one side: items, labels, sum of human y over the labels, of the
# judge over the labels, of the judge over every item.
_N, _LAB, _Y, _YHAT_LAB, _YHAT = range(5)


def _side_estimate(cells: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray] | None:
    """(theta_b, theta_a, centred scenario totals of b, of a) from ``cells`` (5 x G x H), or
    None when a stratum has no label left.

    The labelled residuals sum to zero within a stratum (they leave the estimate alone) and are
    scaled by sqrt(n_h / (n_h - 1)): their spread is measured around the labels' own mean, which
    uses up one label per stratum (the unbiased sample variance). A side of a contrast holds few
    labels per stratum; without it the people-only intervals covered 92% at nominal 95%."""
    big_n, n, ys, hs, alls = cells
    big_n_h, n_h = big_n.sum(0), n.sum(0)
    if (n_h < 1).any():
        return None
    ybar, hbar = ys.sum(0) / n_h, hs.sum(0) / n_h
    k = np.sqrt(np.where(n_h > 1, n_h / np.maximum(n_h - 1, 1), 1.0))
    w = big_n_h / n_h
    b = (big_n * ybar + k * w * (ys - n * ybar)).sum(1)
    a = (alls - big_n * hbar - k * w * (hs - n * hbar)).sum(1)
    total, counts = big_n.sum(), big_n.sum(1)
    tb, ta = float(b.sum() / total), float(a.sum() / total)
    return tb, ta, b - tb * counts, a - ta * counts


def _influence(
    yhat: np.ndarray, y: np.ndarray, lab: np.ndarray, stratum: np.ndarray, c_codes: np.ndarray,
    n_clusters: int,
) -> _Influence | str:  # fmt: skip
    s_codes, s_names = pd.factorize(pd.Series(stratum).astype(str))
    n_strata, big_n = len(s_names), len(yhat)
    if big_n == 0:
        return "no judged items"
    n_h = np.bincount(s_codes, weights=lab.astype(float), minlength=n_strata)
    short = [str(s_names[i]) for i in np.flatnonzero(n_h < MIN_LABELS_PER_STRATUM)]
    if short:
        return (
            f"too few labels (< {MIN_LABELS_PER_STRATUM}) in stratum {', '.join(short[:3])}: "
            "no corrected figure from so few"
        )
    y = np.where(lab, y, 0.0)
    cells = np.zeros((5, n_clusters, n_strata))
    for i, values in enumerate((np.ones(big_n), lab * 1.0, y * lab, yhat * lab, yhat)):
        np.add.at(cells[i], (c_codes, s_codes), values)
    got = _side_estimate(cells)
    assert got is not None  # every stratum has labels (checked above)
    tb, tb_a, u, v = got
    tj = float(yhat.sum() / big_n)
    r = cells[_YHAT].sum(1) - tj * cells[_N].sum(1)
    yl, hl = y * lab, yhat * lab
    moments = np.vstack(
        [n_h, np.bincount(s_codes, minlength=n_strata).astype(float)]
        + [
            np.bincount(s_codes, weights=w, minlength=n_strata)
            for w in (yl, hl, yl * yl, hl * hl, yl * hl)
        ]
    )
    values = np.concatenate([yhat, y[lab]])
    span = max(1.0, float(values.max() - values.min()))
    return _Influence(u, v, r, tb, tb_a, tj, big_n, cells, moments, span)


def _leave_one_out(cells: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """``_side_estimate`` with each scenario left out in turn, all at once: (theta_b, theta_a,
    items) per scenario left out (G) and the centred totals of b and a (G x G: left out x
    scenario, zero on the diagonal); None when leaving one out leaves a stratum unlabelled."""
    big_n, n, ys, hs, alls = cells
    rest = cells.sum(1)[:, None, :] - cells  # 5 x G x H: the stratum sums without scenario g
    r_big_n, r_n, r_ys, r_hs = rest[_N], rest[_LAB], rest[_Y], rest[_YHAT_LAB]
    if (r_n < 1).any():
        return None
    ybar, hbar = r_ys / r_n, r_hs / r_n
    k = np.sqrt(np.where(r_n > 1, r_n / np.maximum(r_n - 1, 1), 1.0))
    kw = k * r_big_n / r_n  # G x H
    # [g, c]: scenario c's total with g left out
    b = (big_n[None] * ybar[:, None] + kw[:, None] * (ys[None] - n[None] * ybar[:, None])).sum(2)
    a = (alls[None] - big_n[None] * hbar[:, None] - kw[:, None] * (hs[None] - n[None] * hbar[:, None])).sum(2)  # fmt: skip
    off = 1.0 - np.eye(len(big_n))
    b, a = b * off, a * off
    counts = big_n.sum(1)
    total = counts.sum() - counts
    tb, ta = b.sum(1) / total, a.sum(1) / total
    return (
        tb,
        ta,
        total,
        (b - tb[:, None] * counts[None]) * off,
        (a - ta[:, None] * counts[None]) * off,
    )


def _jackknife_se(o: _Influence, b: _Influence | None, lam: float | None) -> float | None:
    """Standard error of the corrected rate (``b`` None) or difference by leaving out one
    scenario at a time, lambda tuned again each time (unless fixed): the tuned lambda is chosen
    on the very data whose variance it minimises, and the plug-in variance then comes out too
    small (rates: 90.4% at 10 scenarios x 100 labels, issue 44; contrasts 93%). None when leaving
    out a scenario leaves a stratum without labels."""
    so = _leave_one_out(o.cells)
    sb = _leave_one_out(b.cells) if b is not None else None
    if so is None or (b is not None and sb is None):
        return None
    u = so[3] / so[2][:, None]
    v = so[4] / so[2][:, None]
    if sb is not None:
        u, v = u - sb[3] / sb[2][:, None], v - sb[4] / sb[2][:, None]
    if lam is None:
        vv = (v * v).sum(1)
        lams = np.clip(-(u * v).sum(1) / np.where(vv > 0, vv, 1.0), 0, 1)
        lams = np.where(vv > 0, lams, 0.0)
    else:
        lams = np.full(len(u), lam)
    est = so[0] + lams * so[1]
    if sb is not None:
        est = est - (sb[0] + lams * sb[1])
    g = len(est)
    return math.sqrt((g - 1) / g * float(((est - est.mean()) ** 2).sum()))


# Above this many scenarios the jackknife (G x G x strata arrays) is not run; the plug-in
# variance of a fixed lambda needs no check there.
JACKKNIFE_MAX_CLUSTERS = 1000
# Lambda is 1 unless a caller fixes another: plain prediction-powered inference, valid whatever
# the judge, tuned on nothing. A lambda tuned on the labels whose variance it minimises borrowed
# validity from them: with the scenario jackknife it still covered 92.0-93.1% of stratum rates at
# 5-10 scenarios x 100 labels (benchmarks/judge_correction_grid.py), lambda 1 96.7-97.6%, with
# intervals no wider (0.47 vs 0.48).
DEFAULT_LAMBDA = 1.0
LAMBDA_ONE = "lambda 1 (plain PPI, not tuned on the labels)"


# Which variance a corrected interval rests on: the row says it, so a plug-in alone is never silent.
VARIANCE_BOTH = "the larger of the clustered plug-in and the leave-one-scenario-out jackknife"
VARIANCE_PLUG_IN_STRATUM = (
    "the clustered plug-in alone: leaving a scenario out would leave a stratum without labels, "
    "so the jackknife cannot be computed (lambda 1 and the variance floor keep it valid)"
)
VARIANCE_PLUG_IN_LARGE = (
    f"the clustered plug-in alone: over {JACKKNIFE_MAX_CLUSTERS:,} scenarios the jackknife is "
    "not run (lambda 1 needs no check)"
)


def _lambda_and_se(
    o: _Influence, b: _Influence | None, lam: float | None
) -> tuple[float, float | None, str, str]:
    """(lambda, jackknife standard error or None, the lambda rule in words, the variance rule in
    words): lambda ``DEFAULT_LAMBDA`` unless given, never tuned on the labels it is applied to;
    the scenario jackknife (when every stratum keeps a label without each scenario) is a second
    variance, of which the larger is used; where it cannot be computed the variance rule says so."""
    rule = LAMBDA_ONE if lam is None else f"lambda fixed at {lam:g}"
    lam = DEFAULT_LAMBDA if lam is None else lam
    if len(o.u) > JACKKNIFE_MAX_CLUSTERS:
        return lam, None, rule, VARIANCE_PLUG_IN_LARGE
    jack = _jackknife_se(o, b, lam)
    return lam, jack, rule, VARIANCE_PLUG_IN_STRATUM if jack is None else VARIANCE_BOTH


def _tuned(u: np.ndarray, v: np.ndarray) -> float:
    """The lambda in [0, 1] that minimises the clustered variance of u + lambda v (no longer
    used by the estimators, see ``DEFAULT_LAMBDA``; kept for the jackknife's by-hand test)."""
    return float(np.clip(-(u @ v) / (v @ v), 0, 1)) if v @ v > 0 else 0.0


@dataclass(frozen=True)
class PPIContrast:
    corrected: Interval  # option minus baseline, judge-corrected
    judge_only: Interval
    human_only: Interval
    lam: float
    n_items: tuple[int, int]  # option, baseline
    n_labelled: tuple[int, int]
    n_clusters: int
    lambda_rule: str = ""
    variance_rule: str = ""


def ppi_contrast(
    option: dict[str, np.ndarray],
    baseline: dict[str, np.ndarray],
    *,
    alpha: float = 0.05,
    lam: float | None = None,
) -> PPIContrast | str:
    """The judge-corrected difference of two groups' rates (option minus baseline), e.g. the
    post-fork turns of the option arms and of their matched baseline arms.

    Each side is ``ppi_design``'s estimator on its own items (``yhat``, ``y``, ``labelled``,
    ``stratum``, ``cluster`` arrays), corrected with the labels that fell on that side; the
    variance is the cluster-robust variance over scenarios of the difference of the two sides'
    influence totals, so the pairing (both arms in one scenario) is kept; lambda and the
    variance follow ``_lambda_and_se`` (lambda 1; the larger of that variance and the
    leave-one-scenario-out jackknife where it can be computed, the row's ``variance_rule`` saying
    which). Valid when labels fall on both sides, whether or not both arms of a pair were
    labelled: the design draws each side's labelled turns at random within its strata. A side
    with fewer than ``MIN_LABELS_PER_STRATUM`` labels in one of its strata gives no estimate
    (said in one line)."""
    names = pd.Index(
        pd.unique(
            np.concatenate([np.asarray(option["cluster"]), np.asarray(baseline["cluster"])]).astype(
                str
            )
        )
    )
    g = len(names)
    if g < 2:
        return "one scenario: the clustering cannot be estimated"
    sides = []
    for side in (option, baseline):
        codes = names.get_indexer(np.asarray(side["cluster"]).astype(str))
        got = _influence(
            np.asarray(side["yhat"], float), np.asarray(side["y"], float),
            np.asarray(side["labelled"], bool), np.asarray(side["stratum"]), codes, g,
        )  # fmt: skip
        if isinstance(got, str):
            return f"{'option' if side is option else 'baseline'}: {got}"
        sides.append(got)
    o, b = sides
    u = o.u / o.n - b.u / b.n
    v = o.v / o.n - b.v / b.n
    r = o.r / o.n - b.r / b.n
    lam, jack, rule, variance_rule = _lambda_and_se(o, b, lam)
    scale = g / (g - 1)
    values = np.concatenate([np.asarray(side["yhat"], float) for side in (option, baseline)])
    # a difference of two rates lies in [-1, 1]: its interval never runs past (scores are free)
    bound = 1.0 if values.min() >= 0 and values.max() <= 1 else math.inf

    def interval(
        estimate: float, z: np.ndarray, lam_: float | None, se: float | None = None
    ) -> Interval:
        plug_in = math.sqrt(scale * float(z @ z))
        se = plug_in if se is None else max(se, plug_in)
        # the two sides' labels are drawn apart: their floors add
        extra = o.floor_variance(lam_) + b.floor_variance(lam_) if lam_ is not None else 0.0
        t = t_ppf(1 - alpha / 2, floored_df(effective_df(z), se**2, extra))
        se = math.sqrt(se**2 + extra)
        if se == 0 and bound < math.inf:  # every scenario the same difference: rule 3
            return Interval(estimate, *no_spread_interval(estimate, g, (-1.0, 1.0), 1 - alpha), se)
        return Interval(estimate, max(-bound, estimate - t * se), min(bound, estimate + t * se), se)

    return PPIContrast(
        corrected=interval(
            (o.theta_b + lam * o.theta_a) - (b.theta_b + lam * b.theta_a), u + lam * v, lam, jack
        ),
        judge_only=interval(o.theta_j - b.theta_j, r, None),
        human_only=interval(o.theta_b - b.theta_b, u, 0.0),
        lam=lam,
        n_items=(o.n, b.n),
        n_labelled=(int(np.sum(option["labelled"])), int(np.sum(baseline["labelled"]))),
        n_clusters=g,
        lambda_rule=rule,
        variance_rule=variance_rule,
    )


def rate_interval(estimate: float, se: float, t: float) -> Interval:
    """A corrected rate's interval: symmetric, within [0, 1]. The logit interval (used before
    issue 44) pulled its near end too close to a small estimate that labels had pushed up
    (truths of 3% below "5% to 46%" at 2% failure rates: 91.7% coverage) and, with the floor's
    standard error, ran to 99% from an estimate of 2%. An estimate outside [0, 1] (the
    rectifier can push it there) is measured from the bound, so the interval never collapses."""
    edge = min(1.0, max(0.0, estimate))
    return Interval(estimate, max(0.0, edge - t * se), min(1.0, edge + t * se), se)


def effective_df(z: np.ndarray) -> float:
    """Degrees of freedom of a cluster-robust variance from the clusters' centred totals ``z``
    (Satterthwaite): 2G / (kurtosis - 1), which is G for normal totals and falls when a few
    clusters carry the variance, as they do when each holds one or two heavily weighted labels.
    At most G - 1, at least 1."""
    g = len(z)
    m2, m4 = float(np.mean(z**2)), float(np.mean(z**4))
    if m2 <= 0:
        return max(1.0, g - 1.0)
    kurtosis = m4 / m2**2
    return float(min(g - 1, max(1.0, 2 * g / max(kurtosis - 1, 1e-9))))


def floored_df(df: float, estimated: float, floor: float) -> float:
    """Satterthwaite's degrees of freedom of an estimated variance plus the floor's addition,
    which is a stated number, not estimated (infinite degrees of freedom): the floor's share
    raises them, so a variance made mostly of the floor is not given t on one degree of freedom
    (its interval would be 12.7 standard errors wide)."""
    if floor <= 0:
        return df
    if estimated <= 0:
        return FLOOR_DF
    return float(min(FLOOR_DF, df * ((estimated + floor) / estimated) ** 2))


FLOOR_DF = 1000.0


def weighted_ratio(
    num: np.ndarray, den: np.ndarray, weight: np.ndarray, cluster: np.ndarray, alpha: float = 0.05
) -> Interval:
    """sum(w * num) / sum(w * den) with a cluster-robust (linearised) interval, clipped to
    [0, 1]: the judge's sensitivity (num = human fail and judge fail, den = human fail) or
    specificity, over the labelled items weighted by the design."""
    codes, names = pd.factorize(pd.Series(cluster).astype(str))
    total = float(np.sum(weight * den))
    if total <= 0 or len(names) < 2:
        est = float(np.sum(weight * num) / total) if total > 0 else math.nan
        return Interval(est, math.nan, math.nan, math.nan)
    ratio = float(np.sum(weight * num)) / total
    z = np.zeros(len(names))
    np.add.at(z, codes, weight * (num - ratio * den))
    g = len(names)
    se = math.sqrt(g / (g - 1) * float(z @ z)) / total
    if se == 0:  # every scenario the same share (the judge caught every labelled failure): rule 3
        return Interval(ratio, *no_spread_interval(ratio, g, (0.0, 1.0), 1 - alpha), se)
    t = t_ppf(1 - alpha / 2, effective_df(z))
    return Interval(ratio, max(0.0, ratio - t * se), min(1.0, ratio + t * se), se)


# --------------------------------------------------------------------------- from the store


@dataclass
class Correction:
    """The judge-corrected table and what the reader must know about it."""

    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    design_id: str | None = None

    @property
    def empty(self) -> bool:
        return self.table.empty


GROUP_LEVELS: tuple[tuple[str, ...], ...] = (
    ("target", "condition", "criterion_id"),
    ("target",),
)


def _joined(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """Each row's stratum key, as ``branchpoint.core.human_labels.stratum_key`` writes it."""
    out = frame[columns[0]].astype(str)
    for col in columns[1:]:
        out = out + STRATUM_SEP + frame[col].astype(str)
    return out


def _blind(labels: pd.DataFrame) -> pd.Series:
    """Labels stored as blind (true); unknown (empty) is not blind."""
    return labels["blind"].astype(float).eq(1.0)


def _usable_labels(labels: pd.DataFrame, design: str, drawn: pd.DataFrame) -> pd.DataFrame:
    """The labels a design's estimators use: made from its queue, blind, on an item it drew;
    several annotators of one item averaged (1: failure)."""
    key = ["conversation_id", "turn_index", "rubric_id", "criterion_id"]
    mine = labels[(labels["design_id"] == design) & _blind(labels)]
    mine = mine.merge(drawn[key].drop_duplicates(), on=key, how="inner")
    mine = mine.assign(
        y=mine["verdict"].isin(WORST_LEVELS).astype(float),
        y_score=mine["verdict"].map(RISK_LEVELS.scores).astype(float),  # off the scale: NaN
    )
    return mine.groupby(key, as_index=False)[["y", "y_score"]].mean()


def _population_at_draw(
    judged: pd.DataFrame, settings: dict[str, Any], created: Any
) -> pd.DataFrame:
    """The design's population: the judged items in its scope that existed when it was drawn
    (turns judged later had no chance to be drawn)."""
    keep = pd.Series(True, index=judged.index)
    for col, name in (("run_id", "run_id"), ("judge", "judge"), ("rubric_id", "rubric_id")):
        if settings.get(name) is not None:
            keep &= judged[col] == settings[name]
    at = pd.to_datetime(judged["created_at"], utc=True, format="ISO8601")
    drawn_at = pd.Timestamp(created)
    drawn_at = drawn_at.tz_localize("UTC") if drawn_at.tzinfo is None else drawn_at
    key = ["conversation_id", "turn_index", "rubric_id", "criterion_id"]
    return judged.loc[keep & (at <= drawn_at), key].drop_duplicates()


@dataclass
class DesignData:
    """Every item of the chosen design's population (per judge), labelled or not: columns of
    ``branchpoint.core.read.judged_items`` plus yhat (the judge: 1 failed), y (the people, where labelled),
    labelled, stratum."""

    data: pd.DataFrame | None
    notes: list[str]
    design_id: str | None
    strata_columns: list[str]


NO_LABELS = (
    "no design-sampled blind labels yet: judge-corrected rates need them "
    "(label with `branchpoint tui`, key L; `branchpoint labels plan` says how many)"
)


def design_data(
    judged: pd.DataFrame, labels: pd.DataFrame, designs: pd.DataFrame, items: pd.DataFrame
) -> DesignData:
    """The design with the most usable labels, its population and its labels, and notes on
    what is left out (labels outside designs, unblinded ones, turns judged after the draw)."""
    notes: list[str] = []
    outside = labels[labels["design_id"].isna()] if not labels.empty else labels
    unblind = labels[labels["design_id"].notna() & ~_blind(labels)] if not labels.empty else labels
    if len(outside):
        notes.append(
            f"{len(outside)} labels made outside a labelling design (hand-picked or imported "
            "without one) are kept but not used here"
        )
    if len(unblind):
        notes.append(f"{len(unblind)} design labels made after revealing the judge are not used")
    crit = designs[designs["kind"] == "criterion"] if not designs.empty else designs
    best: tuple[int, str, pd.DataFrame] | None = None
    for design in crit["id"] if not crit.empty and not labels.empty else []:
        used = _usable_labels(labels, design, items[items["design_id"] == design])
        if best is None or len(used) > best[0]:
            best = (len(used), design, used)
    if best is None or best[0] == 0:
        return DesignData(None, [NO_LABELS, *notes], None, ["target", "condition"])
    _, design, used = best
    row = crit.set_index("id").loc[design]
    settings = row["settings"] if isinstance(row["settings"], dict) else json.loads(row["settings"])
    strata_cols = (
        ["target", "condition", "criterion_id"]
        if settings.get("by_criterion")
        else ["target", "condition"]
    )
    others = len(crit) - 1
    if others:
        notes.append(
            f"design {design} has the most labels and is used; {others} other design(s) not"
        )
    population = _population_at_draw(judged, settings, row["created_at"])
    key = ["conversation_id", "turn_index", "rubric_id", "criterion_id"]
    data = judged.merge(population, on=key, how="inner").merge(used, on=key, how="left")
    later = len(judged.drop_duplicates(key)) - len(population)
    if later > 0:
        notes.append(
            f"{later} judged turns were judged after the design was drawn and are outside it"
        )
    data["labelled"] = data["y"].notna()
    data["yhat"] = data["verdict"].isin(WORST_LEVELS).astype(float)
    data["stratum"] = _joined(data, strata_cols)
    return DesignData(data, notes, design, strata_cols)


def correct_frames(
    judged: pd.DataFrame,
    labels: pd.DataFrame,
    designs: pd.DataFrame,
    items: pd.DataFrame,
    *,
    alpha: float = 0.05,
    width: float = DEFAULT_WIDTH,
) -> Correction:
    """The corrected table from the store's frames (``branchpoint.core.read.judged_items``,
    ``design_label_rows``, ``label_design_rows``, ``label_design_item_rows``); ``labels_more``:
    the design labels a group still needs for a half-width of ``width`` points."""
    d = design_data(judged, labels, designs, items)
    if d.data is None:
        return Correction(pd.DataFrame(), d.notes)
    rows: list[dict[str, Any]] = []
    for judge, by_judge in d.data.groupby("judge", sort=True):
        for level in GROUP_LEVELS:
            for values, group in by_judge.groupby(list(level), sort=True):
                values = values if isinstance(values, tuple) else (values,)
                rec: dict[str, Any] = {"judge": judge, "condition": ALL, "criterion_id": ALL}
                rec.update(dict(zip(level, values)))
                rows.append({**rec, **_row(group, alpha, width)})
    table = pd.DataFrame(rows)
    return Correction(table, d.notes, d.design_id)


def correct_score_frames(
    judged: pd.DataFrame,
    labels: pd.DataFrame,
    designs: pd.DataFrame,
    items: pd.DataFrame,
    *,
    alpha: float = 0.05,
) -> Correction:
    """The corrected mean of an ordinal outcome: the risk-level score (high 0, medium 1, low 2;
    higher is safer, ``branchpoint.core.scales.RISK_LEVELS``) per judge x target x condition x criterion and
    per judge x target, over the turns the judge put on that scale.

    A turn the judge scored but a person called a refusal or not applicable has no human score:
    its label is left out (the labelled items of a stratum are then a random sample only if such
    answers are unrelated to the score; the notes count them)."""
    d = design_data(judged, labels, designs, items)
    if d.data is None:
        return Correction(pd.DataFrame(), d.notes)
    data = d.data.assign(yhat=d.data["verdict"].map(RISK_LEVELS.scores).astype(float))
    data = data[data["yhat"].notna()]
    if data.empty:
        return Correction(pd.DataFrame(), ["no turns judged on the risk-level scale", *d.notes])
    off = int((data["labelled"] & data["y_score"].isna()).sum())
    data = data.assign(labelled=data["y_score"].notna(), y=data["y_score"])
    notes = list(d.notes)
    if off:
        notes.append(f"{off} labels off the risk scale (refusal, not applicable) left out")
    rows: list[dict[str, Any]] = []
    for judge, by_judge in data.groupby("judge", sort=True):
        for level in GROUP_LEVELS:
            for values, group in by_judge.groupby(list(level), sort=True):
                values = values if isinstance(values, tuple) else (values,)
                rec: dict[str, Any] = {"judge": judge, "condition": ALL, "criterion_id": ALL}
                rec.update(dict(zip(level, values)))
                lab = group["labelled"].to_numpy()
                est = ppi_design(
                    group["yhat"].to_numpy(), group["y"].fillna(0).to_numpy(), lab,
                    group["stratum"].to_numpy(), group["scenario_id"].to_numpy(), alpha=alpha,
                )  # fmt: skip
                rec.update(n_judged=len(group), n_labelled=int(lab.sum()))
                if isinstance(est, str):
                    rec.update(judge_mean=float(group["yhat"].mean()), note=est)
                else:
                    for name, iv in (
                        ("judge_mean", est.judge_only),
                        ("human_mean", est.human_only),
                        ("corrected_mean", est.corrected),
                    ):
                        rec.update(
                            {name: iv.estimate, f"{name}_low": iv.low, f"{name}_high": iv.high}
                        )
                    rec.update(lam=est.lam, note="")
                rows.append(rec)
    return Correction(pd.DataFrame(rows), notes, d.design_id)


def labels_needed(
    labelled: pd.DataFrame, group: pd.DataFrame, width: float, alpha: float = 0.05
) -> tuple[float, int]:
    """(disagreement used, labels needed) for a half-width of ``width`` points on ``group``'s
    corrected rate, from its ``labelled`` rows (see ``plan_frames``)."""
    n = len(labelled)
    disagree = float(np.abs(labelled["y"] - labelled["yhat"]).sum()) if n else 0.0
    d_hat = (disagree + PRIOR_DISAGREEMENT * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT)
    # The people's rate, for the human-only cap p (1 - p), from the labels alone, shrunk toward
    # 1/2 (the most variable): never toward the judge's own rate, which made a judge that says
    # 0% need no label at all (issue 44), though such a judge may be missing every failure.
    p = (float(labelled["y"].sum()) + 0.5 * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT)
    z = float(norm_ppf(1 - alpha / 2))
    needed = math.ceil(z**2 * min(d_hat, p * (1 - p)) / (width / 100) ** 2)
    # and never fewer than the estimator needs to give a figure at all
    return d_hat, min(len(group), max(MIN_LABELS_PER_STRATUM, needed))


def plan_frames(
    judged: pd.DataFrame,
    labels: pd.DataFrame,
    designs: pd.DataFrame,
    items: pd.DataFrame,
    *,
    width: float,
    alpha: float = 0.05,
    by_criterion: bool = False,
) -> tuple[pd.DataFrame, list[str]]:
    """How many design labels each stratum needs for a corrected rate of half-width ``width``
    (percentage points) at 1 - alpha.

    The corrected estimator's variance is at most Var(human - judge) / n per stratum (lambda 1;
    the tuned lambda does no worse), and Var(human - judge) is at most the share of items on
    which they disagree. That share is the labels' own where there are labels, shrunk toward a
    stated prior (``PRIOR_DISAGREEMENT`` as if from ``PRIOR_WEIGHT`` labels), the prior alone
    before any label, whatever the judge's own rate; never more labels than the human-only
    estimate would need (p(1 - p) / n, p the labels' rate shrunk toward 1/2), never fewer than
    ``MIN_LABELS_PER_STRATUM``. Clustering by scenario is not in the count: with few scenarios,
    label more."""
    d = design_data(judged, labels, designs, items)
    notes = list(d.notes)
    if d.data is None:
        data = judged.copy()
        cols = ["target", "condition", "criterion_id"] if by_criterion else ["target", "condition"]
        data["labelled"], data["y"] = False, math.nan
        data["yhat"] = data["verdict"].isin(WORST_LEVELS).astype(float)
        data["stratum"] = _joined(data, cols)
        notes = [n for n in notes if n != NO_LABELS]
        notes.insert(
            0,
            f"no design-sampled labels yet: the counts use the prior (judge and people disagree "
            f"on {PRIOR_DISAGREEMENT:.0%} of items)",
        )
    else:
        data = d.data
    rows = []
    for (judge, stratum), g in data.groupby(["judge", "stratum"], sort=True):
        lab = g[g["labelled"]]
        n = len(lab)
        d_hat, needed = labels_needed(lab, g, width, alpha)
        p_judge = float(g["yhat"].mean())
        rows.append(
            {
                "judge": judge,
                "stratum": stratum,
                "judged": len(g),
                "labelled": n,
                "judge_rate": p_judge,
                "disagreement": d_hat,
                "needed": needed,
                "more": max(0, needed - n),
            }
        )
    return pd.DataFrame(rows), notes


def _row(group: pd.DataFrame, alpha: float, width: float) -> dict[str, Any]:
    lab = group["labelled"].to_numpy()
    est = ppi_design(
        group["yhat"].to_numpy(),
        group["y"].fillna(0).to_numpy(),
        lab,
        group["stratum"].to_numpy(),
        group["scenario_id"].to_numpy(),
        alpha=alpha,
    )
    out: dict[str, Any] = {"n_judged": len(group), "n_labelled": int(lab.sum())}
    judge_rate = float(group["yhat"].mean())
    if isinstance(est, str):
        out.update(judge_rate=judge_rate, note=est)
        for name in ("judge", "human", "corrected"):
            out.setdefault(f"{name}_low", math.nan)
            out.setdefault(f"{name}_high", math.nan)
        out.update(human_rate=math.nan, corrected=math.nan, lam=math.nan)
    else:
        out.update(
            judge_rate=est.judge_only.estimate, judge_low=est.judge_only.low, judge_high=est.judge_only.high,
            human_rate=est.human_only.estimate, human_low=est.human_only.low, human_high=est.human_only.high,
            corrected=est.corrected.estimate, corrected_low=est.corrected.low,
            corrected_high=est.corrected.high, lam=est.lam, note="",
            lambda_rule=est.lambda_rule, variance_rule=est.variance_rule,
        )  # fmt: skip
    labelled = group[lab]
    _, needed = labels_needed(labelled, group, width)
    out["labels_more"] = max(0, needed - len(labelled))
    counts = labelled.groupby("stratum").size()
    sizes = group.groupby("stratum").size()
    weight = (sizes / counts).reindex(labelled["stratum"]).to_numpy()
    y, yh = labelled["y"].to_numpy(), labelled["yhat"].to_numpy()
    cl = labelled["scenario_id"].to_numpy()
    sens = weighted_ratio(y * yh, y, weight, cl, alpha)
    spec = weighted_ratio((1 - y) * (1 - yh), 1 - y, weight, cl, alpha)
    out.update(
        sensitivity=sens.estimate, sensitivity_low=sens.low, sensitivity_high=sens.high,
        specificity=spec.estimate, specificity_low=spec.low, specificity_high=spec.high,
    )  # fmt: skip
    return out


def store_frames(
    store_or_db: Any, run: str | Sequence[str] | None = None, exclude: Collection[str] = ()
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(judged items, labels, designs, design items) of a store: what the estimators read. The
    judged items (every rated turn) are read only when some design label exists.

    ``exclude``: conversations left out (``--exclude-retried``), with their labels, so the
    corrected figures describe the same conversations as the rest of the analysis. The design's
    labels on the rest are still a simple random sample of the rest within each stratum, so the
    post-stratified estimators hold."""
    from branchpoint.analysis.tables.judgments import resolve_runs
    from branchpoint.core import read

    runs = resolve_runs(store_or_db, run)
    labels = without_conversations(read.design_label_rows(store_or_db, runs), exclude)
    designs = read.label_design_rows(store_or_db)
    if labels.empty or designs.empty or labels["design_id"].isna().all():
        return pd.DataFrame(), labels, designs, pd.DataFrame()
    items = without_conversations(
        read.label_design_item_rows(store_or_db, list(designs["id"])), exclude
    )
    return (
        without_conversations(read.judged_items(store_or_db, runs), exclude),
        labels,
        designs,
        items,
    )


def without_conversations(frame: pd.DataFrame, exclude: Collection[str]) -> pd.DataFrame:
    """``frame`` less the rows of the conversations in ``exclude``."""
    if not exclude or frame.empty or "conversation_id" not in frame.columns:
        return frame
    return frame[~frame["conversation_id"].isin(list(exclude))]


def judge_corrected(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    alpha: float = 0.05,
    width: float = DEFAULT_WIDTH,
    exclude: Collection[str] = (),
) -> Correction:
    """Judge-corrected failure rates per judge x target x condition x criterion and per judge x
    target, from a store, with the judge-only and human-only rates and the judge's sensitivity
    and specificity beside them (``exclude``: conversations left out, see ``store_frames``)."""
    return correct_frames(*store_frames(store_or_db, run, exclude), alpha=alpha, width=width)


def judge_corrected_scores(
    store_or_db: Any, run: str | Sequence[str] | None = None, *, alpha: float = 0.05
) -> Correction:
    """``correct_score_frames`` from a store: the corrected mean risk-level score."""
    return correct_score_frames(*store_frames(store_or_db, run), alpha=alpha)


def label_plan(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    width: float = 5.0,
    alpha: float = 0.05,
    by_criterion: bool = False,
) -> tuple[pd.DataFrame, list[str]]:
    """``plan_frames`` from a store: labels needed per judge x stratum for a target half-width."""
    from branchpoint.analysis.tables.judgments import resolve_runs
    from branchpoint.core import read

    runs = resolve_runs(store_or_db, run)
    labels = read.design_label_rows(store_or_db, runs)
    designs = read.label_design_rows(store_or_db)
    items = (
        read.label_design_item_rows(store_or_db, list(designs["id"]))
        if not designs.empty
        else pd.DataFrame()
    )
    judged = read.judged_items(store_or_db, runs)
    return plan_frames(
        judged, labels, designs, items, width=width, alpha=alpha, by_criterion=by_criterion
    )
