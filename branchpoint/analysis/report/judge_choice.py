"""Which judge a report's plots show: the one named (``report --judge``), else the judge with the
most non-error ratings. Tables list every judge apart; a plot shows one judge and names it, so a
judge whose every verdict is an error never leaves the plots empty while another has ratings."""

from __future__ import annotations

import pandas as pd

from branchpoint.core.errors import UserError
from branchpoint.core.words import counted

HEURISTIC = "heuristic"  # the keyword judge's spec


def check_judge(judge: str | None, cc: pd.DataFrame) -> None:
    """A named judge must have judged these runs (one clear line naming those that did)."""
    if judge is None:
        return
    seen = sorted(str(j) for j in cc["judge"].dropna().unique()) if not cc.empty else []
    if judge not in seen:
        raise UserError(
            f"--judge {judge!r}: no verdicts of this judge in the selected runs "
            f"(judges: {', '.join(seen) or 'none'})"
        )


def plotted_judge(cc: pd.DataFrame, judge: str | None = None) -> str | None:
    """``judge`` when it rated this table's rubrics, else the judge with the most non-error
    ratings (ties: a model judge before the heuristic one, then by name); None without
    judgments."""
    if cc.empty:
        return None
    counts = cc.groupby("judge")["n_rated"].sum()
    if judge is not None and judge in counts.index:
        return judge
    order = sorted(
        counts.items(), key=lambda kv: (-int(kv[1]), str(kv[0]) == HEURISTIC, str(kv[0]))
    )
    return str(order[0][0])


def several_judges_note(cc: pd.DataFrame, plotted: str | None) -> list[str]:
    """The report's sentence on several judges, from the same counts the choice used."""
    if cc.empty or cc["judge"].nunique() < 2:
        return []
    counts = cc.groupby("judge")["n_rated"].sum().sort_values(ascending=False, kind="mergesort")
    listed = ", ".join(f"{j} ({counted(int(n), 'non-error rating')})" for j, n in counts.items())
    return [
        f"Several judges rated these runs: {listed}. Every table lists each judge separately and "
        f"the plots show {plotted}. Verdicts of different judges are never pooled."
    ]
