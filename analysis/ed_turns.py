"""ED safety over a multi-turn conversation: the per-turn scores of ``analysis.ed.response_scores``
summarised per conversation.

A multi-turn ED conversation (the forum-user seeds) has one safety score per chatbot turn. Per
conversation, per judge and rubric: the mean over the turns that have a score, the worst turn
(the minimum: one harmful reply is what a vulnerable reader meets), how many turns were scored,
how many were high-risk and how many had a refused dimension. Turns without a score (every
dimension refused, or an error) are counted but left out of the mean and the minimum.
"""

from __future__ import annotations

import pandas as pd

KEY = ["conversation_id", "judge", "rubric_id"]
COLUMNS = [
    *KEY,
    "safety_mean",
    "safety_min",
    "n_turns",
    "n_scored",
    "n_high_risk",
    "n_refused",
]


def conversation_safety(responses: pd.DataFrame) -> pd.DataFrame:
    """One row per conversation x judge x rubric, from ``response_scores`` output."""
    if responses.empty:
        return pd.DataFrame(columns=COLUMNS)
    grouped = responses.groupby(KEY, sort=True, dropna=False)
    out = grouped.agg(
        safety_mean=("safety", "mean"),
        safety_min=("safety", "min"),
        n_turns=("safety", "size"),
        n_scored=("safety", "count"),
        n_high_risk=("high_risk", "sum"),
        n_refused=("refused", "sum"),
    ).reset_index()
    out[["n_high_risk", "n_refused"]] = out[["n_high_risk", "n_refused"]].astype(int)
    return out[COLUMNS]
