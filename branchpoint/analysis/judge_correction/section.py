"""The report's "Judge-corrected failure rates" section and its plot, self-contained: built from
the store with ``branchpoint.analysis.judge_correction.estimators`` and appended to the report's sections."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.judge_correction.contrasts import (
    METHOD as CONTRAST_METHOD,
)
from branchpoint.analysis.judge_correction.contrasts import (
    TITLE as CONTRAST_TITLE,
)
from branchpoint.analysis.judge_correction.contrasts import (
    contrast_display,
    judge_corrected_contrasts,
    summary_line,
)
from branchpoint.analysis.judge_correction.estimators import (
    ALL,
    VARIANCE_BOTH,
    Correction,
    correct_frames,
    correct_score_frames,
    store_frames,
)
from branchpoint.analysis.report.sections import Section
from branchpoint.analysis.stats.intervals import MIN_LABELS_PER_STRATUM

TITLE = "Judge-corrected failure rates"
PLOT = "judge_corrected.png"

METHOD = (
    "Prediction-powered inference (PPI++; Angelopoulos et al., Science 2023; Angelopoulos, "
    "Duchi, Zrnic 2023): the judge's failure rate over every judged turn, corrected by the "
    "difference between people and judge on a random sample of turns drawn by the labelling "
    "design (`branchpoint tui`, key L), with the judge at full weight (lambda 1: plain PPI, "
    "not tuned on the labels). Only blind labels made from the design's queue count; "
    "intervals are 95%, clustered by scenario; a stratum with fewer than "
    f"{MIN_LABELS_PER_STRATUM} labels gets no "
    "corrected figure, and labels that all agree still leave the interval room (the "
    "rectifier's variance is floored: docs/methods/intervals.md); the variance is the larger "
    "of the clustered plug-in and the leave-one-scenario-out jackknife, or the plug-in alone "
    "where the jackknife cannot be computed, said below and in each row's `variance_rule`. "
    "Beside each: the judge-only rate (what the tables above report), the people's rate on the "
    "labelled turns, and the judge's sensitivity and specificity against the labels."
)


def _pct(x: Any) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * float(x):.1f}%"


def _iv(row: pd.Series, est: str, low: str, high: str) -> str:
    value, lo, hi = row.get(est), row.get(low), row.get(high)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return _pct(value)
    return f"{_pct(value)} ({_pct(lo)} to {_pct(hi)})"


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The corrected table for people: one column per estimate, each with its interval."""
    rows = []
    for _, r in table.iterrows():
        rows.append(
            {
                "judge": r["judge"],
                "target": r["target"],
                "condition": r["condition"],
                "criterion": r["criterion_id"],
                "judged": int(r["n_judged"]),
                "labelled": int(r["n_labelled"]),
                "judge only": _iv(r, "judge_rate", "judge_low", "judge_high"),
                "people only": _iv(r, "human_rate", "human_low", "human_high"),
                "corrected": _iv(r, "corrected", "corrected_low", "corrected_high")
                if not r.get("note")
                else f"n/a: {r['note']}",
                "lambda": "" if pd.isna(r.get("lam")) else f"{float(r['lam']):.2f}",
                "sensitivity": _iv(r, "sensitivity", "sensitivity_low", "sensitivity_high"),
                "specificity": _iv(r, "specificity", "specificity_low", "specificity_high"),
            }
        )
    return pd.DataFrame(rows)


def _num(row: pd.Series, est: str) -> str:
    value, lo, hi = row.get(est), row.get(f"{est}_low"), row.get(f"{est}_high")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return f"{value:.2f}"
    return f"{value:.2f} ({lo:.2f} to {hi:.2f})"


def score_table(table: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, r in table.iterrows():
        rows.append(
            {
                "judge": r["judge"],
                "target": r["target"],
                "condition": r["condition"],
                "criterion": r["criterion_id"],
                "judged": int(r["n_judged"]),
                "labelled": int(r["n_labelled"]),
                "judge only": _num(r, "judge_mean"),
                "people only": _num(r, "human_mean"),
                "corrected": _num(r, "corrected_mean")
                if not r.get("note")
                else f"n/a: {r['note']}",
            }
        )
    return pd.DataFrame(rows)


def corrected_plot(table: pd.DataFrame) -> bytes | None:
    """Judge-only and corrected rate per target (one row each, with intervals)."""
    per_target = table[(table["condition"] == ALL) & table["corrected"].notna()]
    if per_target.empty:
        return None
    from branchpoint.analysis.report.plots import _plt, _png, _short

    plt = _plt()
    labels = [_short(f"{r.target} ({r.judge})", 48) for r in per_target.itertuples()]
    fig, ax = plt.subplots(figsize=(7.5, 1.0 + 0.45 * len(labels)))
    y = np.arange(len(labels))
    for offset, (col, lo, hi, name) in zip(
        (-0.12, 0.12),
        (
            ("judge_rate", "judge_low", "judge_high", "judge only"),
            ("corrected", "corrected_low", "corrected_high", "judge-corrected"),
        ),
    ):
        rate = per_target[col].to_numpy(float) * 100
        err = np.vstack(
            [
                rate - per_target[lo].to_numpy(float) * 100,
                per_target[hi].to_numpy(float) * 100 - rate,
            ]
        )
        ax.errorbar(rate, y + offset, xerr=np.nan_to_num(err), fmt="o", capsize=3, label=name)
    ax.set_yticks(y, labels)
    ax.set_xlabel("failure rate, % of judged turns (95% interval)")
    ax.legend(loc="best", fontsize=8)
    ax.invert_yaxis()
    return _png(fig)


def variance_note(table: pd.DataFrame, what: str) -> str | None:
    """One line when some corrected figures rest on the plug-in variance alone (never silent)."""
    if "variance_rule" not in table or table.empty:
        return None
    rules = table["variance_rule"].dropna()
    rules = rules[rules != ""]
    alone = rules[rules != VARIANCE_BOTH]
    if alone.empty:
        return None
    reasons = "; ".join(sorted(set(alone)))
    return f"{len(alone)} of {len(rules)} corrected {what} rest on {reasons}."


def judge_correction_section(
    store_or_db: Any,
    runs: Sequence[str] | None = None,
    correction: Correction | None = None,
    *,
    contrasts: Correction | None = None,
    baselines: Mapping[str, str] | None = None,
    exclude: Collection[str] = (),
) -> Section:
    """The report section; one line when there are no design-sampled labels. ``contrasts``: the
    corrected contrasts (``judge_corrected_contrasts``), read from the store when not given."""
    frames = store_frames(store_or_db, runs, exclude) if correction is None else None
    c = correction if correction is not None else correct_frames(*frames)  # type: ignore[misc]
    s = Section(TITLE)
    if c.empty:
        s.text.append(c.notes[0])
        s.text += c.notes[1:]
        return s
    s.text.append(METHOD)
    s.text.append(f"Labelling design: {c.design_id}.")
    s.text += c.notes
    s.text += [n for n in (variance_note(c.table, "rates"),) if n]
    per_target = c.table[c.table["condition"] == ALL]
    cells = c.table[c.table["condition"] != ALL]
    s.tables.append(("Per target (all conditions and criteria)", display_table(per_target)))
    s.tables.append(("Per target x condition x criterion", display_table(cells)))
    scores = correct_score_frames(*frames) if frames is not None else None
    if scores is not None and not scores.empty:
        s.tables.append(
            (
                "Mean risk-level score (high 0, medium 1, low 2; higher is safer), corrected",
                score_table(scores.table),
            )
        )
        s.text += [n for n in scores.notes if n not in c.notes]
    if contrasts is None:
        contrasts = judge_corrected_contrasts(
            store_or_db, runs, baselines=baselines, frames=frames, exclude=exclude
        )
    add_contrasts(s, contrasts, c.notes)
    png = corrected_plot(c.table)
    s.plot = (PLOT, png, "" if png else "no corrected rate to plot")
    return s


def add_contrasts(s: Section, contrasts: Correction, shown: Sequence[str] = ()) -> None:
    """The corrected contrasts' paragraph and table, or one line saying why there are none."""
    s.text.append(f"{CONTRAST_TITLE}: {CONTRAST_METHOD}")
    line = summary_line(contrasts)
    s.text += [n for n in contrasts.notes if n not in shown and (line is None or n not in line)]
    s.text += [n for n in (variance_note(contrasts.table, "contrasts"),) if n]
    if line is not None:
        s.text.append(f"{CONTRAST_TITLE}: {line}")
        return
    s.tables.append(
        (
            f"{CONTRAST_TITLE} (option minus baseline, percentage points, 95% interval)",
            contrast_display(contrasts.table),
        )
    )
