"""PNG plots for the report (matplotlib, Agg backend). Each returns PNG bytes, or None without data."""

from __future__ import annotations

import io
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _plt() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def _short(s: object, n: int = 40) -> str:
    text = str(s)
    return text if len(text) <= n else text[: n - 1] + "…"


def _judged(title: str, judge: str | None) -> str:
    """A plot's title with the judge whose verdicts it shows (plots never pool judges)."""
    return title if not judge else f"{title}\njudge: {_short(judge, 60)}"


def _shorten_method(method: str) -> str:
    """The interval label without its counts, for a compact axis label."""
    return method.split(" (")[0]


def failure_by_target_condition(rates: pd.DataFrame, judge: str | None = None) -> bytes | None:
    """Paired dots: one row per target, one dot per condition (with its interval), joined by a line.

    Each target's label names the interval method of its points (Wilson or cluster bootstrap,
    which the rate table chose per row)."""
    if (
        rates is None
        or rates.empty
        or not {"target", "condition", "rate"} <= set(rates.columns)
        or rates["rate"].isna().all()
    ):
        return None
    plt = _plt()
    targets = sorted(rates["target"].unique(), key=str)
    conds = sorted(rates["condition"].unique(), key=str)
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.55 * len(targets)))
    colors = plt.get_cmap("tab10")
    y = {t: i for i, t in enumerate(targets)}
    for t in targets:
        sub = rates[rates["target"] == t].set_index("condition").reindex(conds)
        ax.plot(sub["rate"].to_numpy() * 100, [y[t]] * len(conds), color="0.7", lw=1.5, zorder=1)
    for ci_, c in enumerate(conds):
        sub = rates[rates["condition"] == c]
        ys = sub["target"].map(y).to_numpy()
        rate = sub["rate"].to_numpy() * 100
        err = np.vstack(
            [rate - sub["ci_low"].to_numpy() * 100, sub["ci_high"].to_numpy() * 100 - rate]
        )
        err = np.where(np.isnan(err), 0, err)
        ax.errorbar(
            rate,
            ys + (ci_ - (len(conds) - 1) / 2) * 0.12,
            xerr=err,
            fmt="o",
            color=colors(ci_),
            label=_short(c),
            capsize=2,
            zorder=2,
        )
    methods = _target_methods(rates, targets)
    ax.set_yticks(
        range(len(targets)),
        [f"{_short(t)}\n[{_short(m, 60)}]" if m else _short(t) for t, m in zip(targets, methods)],
        fontsize=8,
    )
    ax.set_xlabel(
        "failure rate (% of applicable ratings), 95% interval (method per row, in brackets)"
    )
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    ax.legend(title="condition", loc="best", fontsize=8)
    ax.set_title(_judged("Failure rate by target and system-prompt condition", judge))
    return _png(fig)


def _target_methods(rates: pd.DataFrame, targets: list[object]) -> list[str]:
    """Per target: its points' interval methods, counts dropped, each named once."""
    if "interval" not in rates.columns:
        return [""] * len(targets)
    out = []
    for t in targets:
        labels = rates.loc[rates["target"] == t, "interval"].dropna().astype(str)
        out.append(" / ".join(dict.fromkeys(_shorten_method(m) for m in labels)))
    return out


def criterion_heatmap(rates: pd.DataFrame, judge: str | None = None) -> bytes | None:
    """Failure rate per criterion (rows) and target x condition (columns)."""
    if (
        rates is None
        or rates.empty
        or not {"criterion_id", "target", "condition", "rate"} <= set(rates.columns)
        or rates["rate"].isna().all()
    ):
        return None
    plt = _plt()
    r = rates.assign(
        col=rates["target"].map(_short).astype(str) + " | " + rates["condition"].astype(str)
    )
    mat = r.pivot_table(index="criterion_id", columns="col", values="rate", aggfunc="mean") * 100
    fig, ax = plt.subplots(
        figsize=(max(6.0, 0.45 * mat.shape[1] + 3), max(3.0, 0.32 * mat.shape[0] + 1.5))
    )
    im = ax.imshow(mat.to_numpy(), aspect="auto", cmap="Reds", vmin=0, vmax=100)
    ax.set_yticks(range(mat.shape[0]), [_short(i) for i in mat.index], fontsize=8)
    ax.set_xticks(
        range(mat.shape[1]), [str(c) for c in mat.columns], rotation=70, ha="right", fontsize=7
    )
    fig.colorbar(im, ax=ax, label="failure rate (%)")
    if mat.size <= 400:
        for (i, j), v in np.ndenumerate(mat.to_numpy()):
            if not np.isnan(v):
                ax.text(
                    j,
                    i,
                    f"{v:.0f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if v > 60 else "black",
                )
    ax.set_title(_judged("Failure rate by criterion, target and condition", judge))
    return _png(fig)


_DIFF_CI = ("diff", "ci_low", "ci_high")


CLIP_PP = 100.0  # forest plot axis: +-100 points is every possible difference of two rates


def forest_plot(
    contrasts: pd.DataFrame, max_rows: int = 30, judge: str | None = None
) -> bytes | None:
    """Paired differences in failure rate (points) with their intervals, largest first.

    The axis runs to at most +-100 points (no difference of two rates lies beyond); an interval
    that reaches past it (a t interval over two or three scenarios can) is cut at the edge and
    marked with an arrow. Each row names its interval method when the rows differ."""
    if (
        contrasts is None
        or contrasts.empty
        or "diff" not in contrasts.columns
        or contrasts["diff"].isna().all()
    ):
        return None
    plt = _plt()
    c = (
        contrasts.assign(_abs=contrasts["diff"].abs())
        .sort_values("_abs", ascending=False)
        .head(max_rows)
    )
    c = c.iloc[::-1]
    cond = c["condition"] if "condition" in c.columns else pd.Series([""] * len(c), index=c.index)
    methods = (
        c["interval"].astype(str).map(_shorten_method).tolist()
        if "interval" in c.columns
        else [""] * len(c)
    )
    per_row = len(set(methods)) > 1
    labels = [
        f"{_short(a, 34)} / {_short(b, 28)}{f' [{_short(k, 14)}]' if k else ''}  ({s} scen."
        + (f"; {_short(m, 30)})" if per_row and m else ")")
        for a, b, k, s, m in zip(c["contrast"], c["criterion_id"], cond, c["n_scenarios"], methods)
    ]
    fig, ax = plt.subplots(figsize=(8.5, 1.1 + 0.3 * len(c)))
    # Groups without a test carry None in their intervals (object columns): as NaN, no bar.
    d, lo, hi = (pd.to_numeric(c[k], errors="coerce").to_numpy(float) * 100 for k in _DIFF_CI)
    clipped_lo, clipped_hi = lo < -CLIP_PP, hi > CLIP_PP
    lo, hi = np.clip(lo, -CLIP_PP, CLIP_PP), np.clip(hi, -CLIP_PP, CLIP_PP)
    err = np.where(np.isnan(np.vstack([d - lo, hi - d])), 0, np.vstack([d - lo, hi - d]))
    p = c["p_scenario_holm"] if "p_scenario_holm" in c.columns else pd.Series(1.0, index=c.index)
    sig = pd.to_numeric(p, errors="coerce").fillna(1.0).to_numpy(float) < 0.05
    ax.errorbar(d, range(len(c)), xerr=err, fmt="none", ecolor="0.5", capsize=2)
    ax.scatter(d, range(len(c)), c=np.where(sig, "tab:red", "tab:blue"), zorder=3, s=18)
    rows = np.arange(len(c))
    ax.scatter(np.full(clipped_lo.sum(), -CLIP_PP), rows[clipped_lo], marker="<", color="0.3", zorder=4, s=30)  # fmt: skip
    ax.scatter(np.full(clipped_hi.sum(), CLIP_PP), rows[clipped_hi], marker=">", color="0.3", zorder=4, s=30)  # fmt: skip
    ax.axvline(0, color="black", lw=0.8)
    # At least +-5 points wide: near-zero differences would otherwise get an axis of hundredths,
    # which reads like fractions; ticks carry their unit. At most +-100 (plus room for arrows).
    reach = np.nanmax(np.abs(np.concatenate([d, lo, hi]))) if np.isfinite(d).any() else 0.0
    half = max(5.0, float(reach) * 1.1 if np.isfinite(reach) else 5.0)
    ax.set_xlim(-min(half, CLIP_PP * 1.05), min(half, CLIP_PP * 1.05))
    ax.xaxis.set_major_formatter(_plt().FuncFormatter(lambda v, _pos: f"{v:+.0f} pp"))
    ax.set_yticks(range(len(c)), labels, fontsize=7)
    method = (
        "method per row"
        if per_row
        else (methods[0] if methods and methods[0] else "t interval over scenario means")
    )
    clipped = (
        f"; arrow: interval cut at +-{CLIP_PP:.0f} pp" if (clipped_lo | clipped_hi).any() else ""
    )
    ax.set_xlabel(
        f"option minus baseline, post-fork failure rate (points), 95% interval ({method}){clipped};"
        "\nred: scenario-level Holm p < 0.05"
    )
    ax.set_title(_judged("Matched contrasts", judge))
    return _png(fig)


def ed_safety(
    by_model: pd.DataFrame, bio: pd.DataFrame | None = None, judge: str | None = None
) -> bytes | None:
    """ED safety score per model with its interval; no-bio vs bio beside it when some question was
    asked both with and without a bio. The two panels share their rows (one label column, on the
    left), so the right panel never prints over the left."""
    if (
        by_model is None
        or by_model.empty
        or "safety" not in by_model.columns
        or by_model["safety"].isna().all()
    ):
        return None
    plt = _plt()
    m = by_model.reset_index(drop=True)
    keys = [k for k in ("target", "condition", "judge") if k in m.columns]
    has_bio = (
        bio is not None
        and not bio.empty
        and {"safety_no_bio", "safety_bio"} <= set(bio.columns)
        and bool((bio["safety_no_bio"].notna() & bio["safety_bio"].notna()).any())
    )
    ncols = 2 if has_bio else 1
    fig, axes = plt.subplots(
        1,
        ncols,
        figsize=(5.0 * ncols + 2.5, 1.1 + 0.45 * len(m)),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    ax = axes[0][0]
    s = m["safety"].to_numpy()
    err = np.vstack([s - m["ci_low"].to_numpy(), m["ci_high"].to_numpy() - s])
    ax.errorbar(s, range(len(m)), xerr=np.where(np.isnan(err), 0, err), fmt="o", capsize=3)
    methods = (
        m["interval"].fillna("none").astype(str).map(_shorten_method).tolist()
        if "interval" in m.columns
        else []
    )
    per_row = len(set(methods)) > 1
    labels = _target_labels(m)
    if per_row:
        labels = [f"{lab}\n[{_short(meth, 40)}]" for lab, meth in zip(labels, methods)]
    ax.set_yticks(range(len(m)), labels, fontsize=8)
    ax.set_xlim(0, 100)
    method = "method per row" if per_row else (methods[0] if methods else "")
    ax.set_xlabel(
        "safety score (0-100, complete ratings), 95% interval" + (f" ({method})" if method else "")
    )
    ax.set_title("ED safety score by model")
    if has_bio and bio is not None:
        ax2 = axes[0][1]
        b = m[keys].merge(bio, on=keys, how="left")  # the left panel's rows, in its order
        for i, (nb, wb) in enumerate(zip(b["safety_no_bio"], b["safety_bio"])):
            ax2.plot([nb, wb], [i, i], color="0.7")
        ax2.scatter(b["safety_no_bio"], range(len(b)), label="no bio", zorder=3)
        ax2.scatter(b["safety_bio"], range(len(b)), label="bio", zorder=3)
        ax2.tick_params(axis="y", labelleft=False)
        ax2.set_xlim(0, 100)
        ax2.set_xlabel("mean safety score, questions asked without / with a bio")
        ax2.legend(fontsize=8)
        ax2.set_title("No bio vs bio")
    ax.invert_yaxis()
    if judge:
        fig.suptitle(f"judge: {_short(judge, 60)}", fontsize=9)
    return _png(fig)


def _target_labels(frame: pd.DataFrame) -> list[str]:
    """Target, and condition / judge when the table has them: one row each, never pooled."""
    parts = [frame["target"].map(_short)]
    for col in ("condition", "judge"):
        if col in frame.columns and frame[col].nunique() > 1:
            parts.append(frame[col].map(lambda v: _short(v, 18)))
    return [" | ".join(str(p) for p in row) for row in zip(*parts)]
