"""The report's "Time to the first failure" section: Kaplan-Meier curves per target (plot and
table), per arm, and the matched comparison of each branch option with its baseline arm, shown
from the analysis' result (``summary.TimeToFailure``, which ``branchpoint analyze`` prints too)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from branchpoint.analysis.pairing.forks import attach_tree
from branchpoint.analysis.report.sections import Section
from branchpoint.analysis.survival.compare import km_curves
from branchpoint.analysis.survival.first_failure import ANY, first_failures, with_endings
from branchpoint.analysis.survival.summary import NO_TURNS, TimeToFailure
from branchpoint.analysis.tables.judgments import judgment_table

TITLE = "Time to the first failure"
PLOT = "time_to_failure.png"
METHOD = (
    "Each conversation's first failing verdict on any criterion, in exchanges (a persona message "
    "and the chatbot's reply). A conversation without a failure is censored at its last judged "
    "exchange, for the reason it ended there: the last exchange reached, the persona ended it, "
    "the target failed to answer, the persona model failed, or a budget stopped the sweep. "
    "Kaplan-Meier curves with 95% log(-log) intervals; the median is the first exchange at which "
    "the curve is at or below 50% (none: it never gets there), its interval read in continuous "
    "time (a failure at exchange t happened during exchange t): from the end of the exchange "
    "before the one where the curve's lower band reaches 50% to the exchange where its upper "
    "band does, so at least one exchange wide; the restricted mean is the "
    "expected number of exchanges without a failure over the first tau. Forks: an arm's "
    "exchanges include the prefix it shares with its parent, so a failure before the fork is a "
    "failure of every arm carrying that turn, at the same exchange; per-target curves leave out "
    "arms that never forked (their parent's transcript stored again). Branch options are "
    "compared with their baseline arm pair by pair: within each scenario the difference in "
    "restricted mean (option minus baseline; < 0: the option fails sooner), then the exact "
    "sign-flip test over those scenario differences at any number of scenarios (none below 3) "
    "and its inversion for the interval, Holm over the table (each judge apart); beside it the log-rank test "
    "stratified by scenario. Every criterion's curves: `branchpoint export --level first-failure`."
)
PER_TARGET = "Per target (any criterion)"
PER_ARM = "Per arm (any criterion, targets pooled)"
MATCHED = (
    "Branch option vs baseline, matched by scenario (restricted mean exchanges without a "
    "failure; < 0: the option fails sooner)"
)


def _num(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return (
        "none (above 50%)"
        if math.isinf(float(x))
        else f"{float(x):.{digits}f}".rstrip("0").rstrip(".")
    )


def _median(row: pd.Series) -> str:
    m = _num(row["median"])
    if m.startswith("none"):
        return m
    return f"{m} ({_num(row['median_ci_low'])} to {_num(row['median_ci_high'])})"


def _summary_display(tab: pd.DataFrame, by: str) -> pd.DataFrame:
    return pd.DataFrame({
        by: tab[by], "judge": tab["judge"], "conversations": tab["n"], "failed": tab["failures"],
        "censored (why)": [f"{n} ({why})" if n else "0" for n, why in
                           zip(tab["censored"], tab["censored_by"])],
        "median exchange (95%)": [_median(r) for _, r in tab.iterrows()],
        "restricted mean": [f"{_num(r)} of {_num(t)}" for r, t in zip(tab["rmst"], tab["tau"])],
        "no failure by the end": [f"{100 * s:.1f}%" for s in tab["survival_at_end"]],
    })  # fmt: skip


def _matched_display(tab: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "contrast": tab["contrast"], "condition": tab["condition"], "judge": tab["judge"],
        "restricted mean: baseline": [_num(x) for x in tab["rmst_a"]],
        "option": [_num(x) for x in tab["rmst_b"]],
        "option - baseline": [f"{x:+.2f}" for x in tab["rmst_diff"]],
        "95% interval": ["none" if math.isnan(lo) else f"{lo:+.2f} to {hi:+.2f}"
                         for lo, hi in zip(tab["ci_low"], tab["ci_high"])],
        "test": tab["interval"], "p (Holm)": ["n/a" if math.isnan(p) else f"{p:.3g}" for p in tab["p_scenario_holm"]],
        "log-rank p, stratified (Holm)": [
            "n/a" if math.isnan(p) else f"{p:.3g}" for p in tab["p_logrank_holm"]
        ],
        "pairs": tab["n_pairs"],
    })  # fmt: skip


def survival_plot(curves: pd.DataFrame, judge: str | None) -> bytes | None:
    """Step curves per target with their 95% bands (any criterion, one judge)."""
    if curves.empty:
        return None
    from branchpoint.analysis.report.plots import _judged, _plt, _png, _short

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for target, g in curves.groupby("target", sort=True):
        line = ax.step(g["time"], g["survival"], where="post", label=_short(target))[0]
        ax.fill_between(g["time"], g["ci_low"], g["ci_high"], step="post", alpha=0.15,
                        color=line.get_color())  # fmt: skip
    ax.set_xlabel("exchange")
    ax.set_ylabel("share of conversations without a failure")
    ax.set_ylim(0, 1.02)
    ax.set_title(_judged("Time to the first failure (any criterion), Kaplan-Meier", judge))
    ax.legend(fontsize=8)
    return _png(fig)


def first_failure_table(store_or_db: Any, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """Conversation-level time to the first failure (every outcome): the export."""
    jt = judgment_table(store_or_db, runs)
    if jt.empty:
        return pd.DataFrame()
    jt = with_endings(attach_tree(jt, store_or_db, runs), store_or_db, runs)
    return first_failures(jt)


def time_to_failure_tables(t: TimeToFailure) -> list[tuple[str, pd.DataFrame]]:
    """The section's tables as shown (``branchpoint analyze`` prints the same ones)."""
    tables = [(PER_TARGET, _summary_display(t.per_target, "target"))]
    if not t.per_arm.empty:
        tables.append((PER_ARM, _summary_display(t.per_arm, "arm")))
    if not t.matched.empty:
        tables.append((MATCHED, _matched_display(t.matched)))
    return tables


def time_to_failure_section(t: TimeToFailure | None, judge: str | None = None) -> Section:
    """The report's section from the analysis' result (``Analysis.time_to_failure``); the plot
    shows ``judge`` (default: the judge with the most conversations)."""
    section = Section(TITLE, [METHOD])
    if t is None or t.why_empty:
        section.text.append(t.why_empty if t is not None else NO_TURNS)
        section.plot = (PLOT, None, "no judged turns" if t is None or t.why_empty == NO_TURNS
                        else "no pass/partial/fail verdicts")  # fmt: skip
        return section
    section.tables += time_to_failure_tables(t)
    own = t.own
    shown = judge or str(own["judge"].value_counts().index[0])
    curves = km_curves(own[own["judge"] == shown], ["target"])
    png = survival_plot(curves[curves["outcome"] == ANY] if not curves.empty else curves, shown)
    why = f"judge {shown} has no applicable pass/partial/fail rating" if png is None else ""
    section.plot = (PLOT, png, why)
    section.text.append(t.counts_line())
    return section
