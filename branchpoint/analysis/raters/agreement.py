"""Agreement between raters: a judge and human labels, or two judges.

Implemented in numpy (and checked in tests against scikit-learn and the ``krippendorff`` package):

* ``cohen_kappa_quadratic``: Cohen's kappa with quadratic weights over ordered categories;
* ``krippendorff_alpha``: Krippendorff's alpha for nominal, ordinal or interval data, any number of
  raters, missing values allowed.

``agreement_report`` pairs ratings on the same key (conversation, turn, rubric, criterion) and
reports, per rater pair, overall and per criterion: raw agreement over every item (not applicable
is a category of its own), and on items both raters found applicable: raw agreement, quadratic
kappa and ordinal alpha on the risk order, nominal alpha, and the direction of disagreement
(``under``: the first rater, the judge, rated lower risk than the second, the human).

Risk order: pass < partial < fail, and low < medium < high. A refusal is not on the ordinal scale:
it counts in raw agreement and nominal alpha, and is left out of kappa, ordinal alpha and the
direction. ``error`` verdicts are not ratings; they are counted and left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Literal

import numpy as np
import pandas as pd

from branchpoint.core.scales import ERROR
from branchpoint.core.scales import RISK_RANK as RISK_ORDER

NA = "n/a"
KEY = ["conversation_id", "turn_index", "rubric_id", "criterion_id"]


def _none_where(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` as objects with None where ``mask`` holds (np.where cannot be typed with None)."""
    out = np.array(values, dtype=object)
    out[mask] = None
    return out


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))


def _present(values: np.ndarray) -> np.ndarray:
    """Where an object array holds a rating: not None and not NaN (``_missing``), in one call:
    element by element it was a fifth of a 300-conversation analysis with two judges. (``pd.isna``
    also takes pandas' own missing markers, pd.NA and NaT, for missing.)"""
    return ~np.asarray(pd.isna(values), dtype=bool)


def _codes_of(values: np.ndarray, index: dict[Any, int]) -> np.ndarray:
    """Each value's position in ``index`` (a value outside it raises KeyError, as a lookup does).
    Looked up once per distinct value (``_by_distinct``)."""
    return _by_distinct(values, lambda v: index[v], np.int64)


def _by_distinct(values: np.ndarray, f: Any, dtype: Any) -> np.ndarray:
    """``f`` of each element of an object array, called once per distinct value: a few
    categories over thousands of ratings (element by element: 0.1 s of ``analyze`` on a
    300-conversation sweep with two judges). Values are told apart as a dict tells keys apart
    (hash and ==); every missing value (None, NaN) is one, given ``f(None)``."""
    codes, uniques = pd.factorize(values)
    out = np.fromiter((f(u) for u in uniques), dtype=dtype, count=len(uniques))
    if (codes < 0).any():
        out = np.append(out, np.asarray([f(None)], dtype=dtype))  # code -1: the last
    return out[codes]


def cohen_kappa_quadratic(
    a: Sequence[Any] | np.ndarray,
    b: Sequence[Any] | np.ndarray,
    labels: Sequence[Any] | None = None,
) -> float:
    """Quadratic weighted Cohen's kappa; pairs with a missing value are dropped.

    Categories are ordered as ``labels`` (default: sorted values, as scikit-learn does).
    """
    xa, ya = _objects(a), _objects(b)
    both = _present(xa) & _present(ya)
    xs, ys = xa[both], ya[both]
    if not len(xs):
        return float("nan")
    cats = list(labels) if labels is not None else sorted(set(xs) | set(ys))
    index = {c: i for i, c in enumerate(cats)}
    ia = np.fromiter((index.get(x, -1) for x in xs), dtype=np.int64, count=len(xs))
    ib = np.fromiter((index.get(y, -1) for y in ys), dtype=np.int64, count=len(ys))
    known = (ia >= 0) & (ib >= 0)  # pairs with a value outside ``labels`` are left out
    if not known.any():
        return float("nan")
    k = len(cats)
    conf = np.bincount(ia[known] * k + ib[known], minlength=k * k).reshape(k, k).astype(float)
    n = conf.sum()
    expected = np.outer(conf.sum(1), conf.sum(0)) / n
    grid = np.arange(k)
    w = (grid[:, None] - grid[None, :]) ** 2
    denom = (w * expected).sum()
    if denom == 0:
        return float("nan")
    return float(1.0 - (w * conf).sum() / denom)


def krippendorff_alpha(
    data: Any,
    level: Literal["nominal", "ordinal", "interval"] = "nominal",
    value_domain: Sequence[Any] | None = None,
) -> float:
    """Krippendorff's alpha of a raters x units matrix; NaN / None mark missing ratings.

    ``value_domain`` orders the values for the ordinal level (default: sorted distinct values);
    for the interval level the values themselves must be numbers.
    """
    arr = np.asarray(data, dtype=object)
    if arr.ndim != 2:
        raise ValueError("data must be a raters x units matrix")
    present = _present(arr)
    values = arr[present]  # row by row, as ``np.nonzero(present)`` lists them
    domain = list(value_domain) if value_domain is not None else sorted(set(values))
    index = {v: i for i, v in enumerate(domain)}
    n_vals = len(domain)
    if n_vals == 0:
        return float("nan")
    codes = _codes_of(values, index)
    # Per unit: how many raters gave each value.
    n_units = arr.shape[1]
    _, uu = np.nonzero(present)
    counts = (
        np.bincount(uu * n_vals + codes, minlength=n_units * n_vals)
        .reshape(n_units, n_vals)
        .astype(float)
    )
    m_u = counts.sum(1)
    pairable = m_u >= 2
    counts, m_u = counts[pairable], m_u[pairable]
    if counts.shape[0] == 0:
        return float("nan")
    o = np.einsum("uc,uk->ck", counts / (m_u - 1)[:, None], counts) - np.diag(
        (counts / (m_u - 1)[:, None]).sum(0)
    )
    n_c = o.sum(0)
    n = n_c.sum()
    if n <= 1:
        return float("nan")
    e = (np.outer(n_c, n_c) - np.diag(n_c)) / (n - 1)
    d = _distance(level, n_c, domain)
    de = (e * d).sum()
    if de == 0:
        return float("nan")
    return float(1.0 - (o * d).sum() / de)


def _distance(level: str, n_c: np.ndarray, domain: list[Any]) -> np.ndarray:
    k = len(n_c)
    if level == "nominal":
        return 1.0 - np.eye(k)
    if level == "ordinal":
        cum = np.concatenate([[0.0], np.cumsum(n_c)])
        i, j = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        between = cum[hi + 1] - cum[lo]
        return (between - (n_c[i] + n_c[j]) / 2.0) ** 2
    if level == "interval":
        v = np.asarray(domain, dtype=float)
        return (v[:, None] - v[None, :]) ** 2
    raise ValueError(f"level must be nominal, ordinal or interval, not {level!r}")


# --------------------------------------------------------------------------- reports


def ratings_from_judgments(judgments: pd.DataFrame) -> pd.DataFrame:
    """Judge ratings on the agreement key: rater = judge, rating = verdict or ``n/a``."""
    j = judgments[[*KEY, "judge", "applicable", "verdict"]].copy()
    j["rating"] = np.where(j["applicable"].astype(bool) & j["verdict"].notna(), j["verdict"], NA)
    j.loc[j["verdict"] == ERROR, "rating"] = ERROR
    return j.rename(columns={"judge": "rater"})[[*KEY, "rater", "rating"]]


def ratings_from_labels(labels: pd.DataFrame) -> pd.DataFrame:
    lab = labels[[*KEY, "annotator", "verdict"]].copy()
    lab["rating"] = lab["verdict"].where(lab["verdict"].notna(), NA)
    lab["rater"] = "human:" + lab["annotator"].astype(str)
    return lab[[*KEY, "rater", "rating"]]


# Bootstrap replicates for the intervals on kappa and ordinal alpha.
AGREEMENT_BOOT = 1000


def kappa_alpha_from_confusion(conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quadratic kappa and ordinal Krippendorff alpha of two raters from (... x k x k) confusion
    matrices (rows: first rater, columns: second; every item rated by both), vectorised over the
    leading axes: the same figures as ``cohen_kappa_quadratic`` and ``krippendorff_alpha`` on the
    items (two raters, no missing value: alpha's coincidence matrix is conf + conf^T)."""
    k = conf.shape[-1]
    n = conf.sum(axis=(-2, -1))
    grid = np.arange(k)
    w = (grid[:, None] - grid[None, :]) ** 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = conf.sum(-1)[..., :, None] * conf.sum(-2)[..., None, :] / n[..., None, None]
        kappa = 1.0 - (w * conf).sum(axis=(-2, -1)) / (w * expected).sum(axis=(-2, -1))
        o = conf + np.swapaxes(conf, -1, -2)
        n_c = o.sum(-1)
        total = n_c.sum(-1)
        cum = np.concatenate([np.zeros((*n_c.shape[:-1], 1)), np.cumsum(n_c, -1)], -1)
        i, j = np.meshgrid(grid, grid, indexing="ij")
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        d = (cum[..., hi + 1] - cum[..., lo] - (n_c[..., i] + n_c[..., j]) / 2.0) ** 2
        e = (n_c[..., :, None] * n_c[..., None, :] - n_c[..., :, None] * np.eye(k)) / (total - 1)[
            ..., None, None
        ]
        alpha = 1.0 - (o * d).sum(axis=(-2, -1)) / (e * d).sum(axis=(-2, -1))
    return kappa, alpha


def kappa_alpha_intervals(
    a: np.ndarray, b: np.ndarray, cluster: np.ndarray, *, n_boot: int = AGREEMENT_BOOT,
    seed: int = 0, ci: float = 0.95, k: int = 3,
) -> dict[str, float]:  # fmt: skip
    """Percentile bootstrap intervals of quadratic kappa and ordinal alpha, resampling clusters
    (conversations: the ratings of one conversation are not independent), seeded."""
    from branchpoint.analysis.stats.bootstrap import _percentile, cluster_weights

    codes, _ = pd.factorize(pd.Series(cluster))
    n_cl = int(codes.max()) + 1 if len(codes) else 0
    nan = {f"{m}_ci_{e}": float("nan") for m in ("kappa", "alpha") for e in ("low", "high")}
    if n_cl < 2 or n_boot <= 0:
        return nan
    per = np.zeros((n_cl, k * k))
    np.add.at(per, (codes, a.astype(np.int64) * k + b.astype(np.int64)), 1.0)
    reps = (cluster_weights(n_cl, n_boot, seed) @ per).reshape(n_boot, k, k)
    kappa, alpha = kappa_alpha_from_confusion(reps)
    out = {}
    for name, vals in (("kappa", kappa), ("alpha", alpha)):
        lo, hi = _percentile(vals[:, None], ci)
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = float(lo[0]), float(hi[0])
        if not lo[0] < hi[0]:  # every replicate the same (every pair agrees): no interval
            out[f"{name}_ci_low"] = out[f"{name}_ci_high"] = float("nan")
    return out


NO_BOOTSTRAP_SPREAD = (
    "none: every resample gives the same value (every pair of ratings agrees), and an interval "
    "of zero width would claim certainty from a sample"
)


def _objects(values: Any) -> np.ndarray:
    """A sequence of ratings as a 1-d object array (each element kept as it is)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _risk_ranks(values: np.ndarray) -> np.ndarray:
    """Each rating's place on the risk order (``RISK_ORDER``); NaN for a refusal, n/a or none."""
    return _by_distinct(values, lambda v: np.nan if v is None else RISK_ORDER.get(v, np.nan), float)


def _pair_stats(x: pd.Series, y: pd.Series) -> dict[str, Any]:
    xv, yv = x.to_numpy(object), y.to_numpy(object)
    out: dict[str, Any] = {
        "n_items": len(xv),
        "raw_agreement": float(np.mean(xv == yv)) if len(xv) else np.nan,
    }
    app = (xv != NA) & (yv != NA)
    xa, ya = xv[app], yv[app]
    out["n_applicable"] = int(app.sum())
    out["raw_agreement_applicable"] = float(np.mean(xa == ya)) if len(xa) else np.nan
    out["alpha_nominal"] = krippendorff_alpha(np.vstack([xa, ya])) if len(xa) else np.nan
    rank_x, rank_y = _risk_ranks(xa), _risk_ranks(ya)
    ordinal = ~np.isnan(rank_x) & ~np.isnan(rank_y)
    xo, yo = rank_x[ordinal], rank_y[ordinal]
    out["n_ordinal"] = int(ordinal.sum())
    out["kappa_quadratic"] = (
        cohen_kappa_quadratic(xo, yo, labels=[0.0, 1.0, 2.0]) if len(xo) else np.nan
    )
    out["alpha_ordinal"] = (
        krippendorff_alpha(np.vstack([xo, yo]), "ordinal", [0.0, 1.0, 2.0]) if len(xo) else np.nan
    )
    conv = np.asarray(x.index.get_level_values("conversation_id"), dtype=object)[app][ordinal]
    out.update(kappa_alpha_intervals(xo, yo, conv))
    out["interval"] = "cluster bootstrap over conversations" if len(set(conv)) >= 2 else "none"
    if len(set(conv)) >= 2 and np.isnan(out["kappa_ci_low"]) and len(xo):
        out["interval"] = NO_BOOTSTRAP_SPREAD
    out["under"] = float(np.mean(xo < yo)) if len(xo) else np.nan  # first rater saw less risk
    out["over"] = float(np.mean(xo > yo)) if len(xo) else np.nan
    return out


@dataclass
class AgreementResult:
    pairs: pd.DataFrame  # per rater pair: overall row ("(all)") and one row per criterion
    alpha_all: pd.DataFrame  # every rater together, per criterion and overall (nominal, ordinal)
    n_errors: int = 0
    notes: list[str] = field(default_factory=list)


def agreement_report(
    judgments: pd.DataFrame,
    labels: pd.DataFrame | None = None,
    *,
    judge_vs_judge: bool = True,
) -> AgreementResult:
    """Agreement of every judge with every human annotator, and of judges with each other."""
    ratings = [ratings_from_judgments(judgments)] if not judgments.empty else []
    if labels is not None and not labels.empty:
        ratings.append(ratings_from_labels(labels))
    notes: list[str] = []
    if not ratings:
        return AgreementResult(pd.DataFrame(), pd.DataFrame(), 0, ["no ratings"])
    r = pd.concat(ratings, ignore_index=True)
    n_err = int((r["rating"] == ERROR).sum())
    r = r[r["rating"] != ERROR]
    r["turn_index"] = r["turn_index"].fillna(-1).astype(int)
    r = r.drop_duplicates([*KEY, "rater"], keep="last")
    raters = sorted(r["rater"].unique())
    judges = [x for x in raters if not x.startswith("human:")]
    humans = [x for x in raters if x.startswith("human:")]
    pairs_to_do = [(j, h) for j in judges for h in humans]
    pairs_to_do += list(combinations(humans, 2))  # annotator pairs: how much people agree
    if judge_vs_judge:
        pairs_to_do += list(combinations(judges, 2))
    if not humans:
        notes.append("no human labels: judge-vs-human agreement not computed")
    wide = r.pivot_table(index=KEY, columns="rater", values="rating", aggfunc="first")
    rows = []
    for a, b in pairs_to_do:
        both = wide[[a, b]].dropna()
        if both.empty:
            continue
        if a.startswith("human:"):
            kind = "human vs human"
        else:
            kind = "judge vs human" if b.startswith("human:") else "judge vs judge"
        rows.append(
            {
                "rater_a": a,
                "rater_b": b,
                "kind": kind,
                "criterion_id": "(all)",
                **_pair_stats(both[a], both[b]),
            }
        )
        for crit, grp in both.groupby(level="criterion_id"):
            rows.append(
                {
                    "rater_a": a,
                    "rater_b": b,
                    "kind": kind,
                    "criterion_id": crit,
                    **_pair_stats(grp[a], grp[b]),
                }
            )
    alpha_rows = []
    if len(raters) >= 2:
        for crit, grp in [("(all)", wide), *wide.groupby(level="criterion_id")]:
            raw = grp.to_numpy(object).T
            mat = _none_where(pd.isna(raw), raw)
            app = _none_where(mat == NA, mat)
            ordv = _risk_ranks(app.ravel()).reshape(app.shape)
            alpha_rows.append({"criterion_id": crit, "n_items": grp.shape[0], "n_raters": len(raters),
                               "alpha_nominal_all_items": krippendorff_alpha(mat),
                               "alpha_nominal_applicable": krippendorff_alpha(app),
                               "alpha_ordinal_applicable": krippendorff_alpha(ordv, "ordinal", [0.0, 1.0, 2.0])})  # fmt: skip
    return AgreementResult(pd.DataFrame(rows), pd.DataFrame(alpha_rows), n_err, notes)
