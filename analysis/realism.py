"""Persona realism by simulator: how people rated the turns each simulator wrote.

The ratings are human labels under the pseudo-rubric ``realism`` (``core.human_labels``), given
in the TUI blind to the simulator or imported from a spreadsheet. Simulators are compared the way
the teen study chose its simulator: the share rated very or mostly realistic, with a Wilson 95%
interval, and the count at each level.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from sqlalchemy import select

from core.human_labels import REALISM_LEVELS, REALISM_RUBRIC
from core.read.schema import CONVERSATIONS, HUMAN_LABELS
from core.read.source import StoreRef, read_frame

REALISTIC = ("very", "mostly")
Z95 = 1.959963984540054


def realism_ratings(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per realism rating: simulator, annotator, verdict (and its conversation and turn)."""
    h, c = HUMAN_LABELS.c, CONVERSATIONS.c
    q = (
        select(c.simulator, h.annotator, h.verdict, h.conversation_id, h.turn_index, h.blind)
        .join_from(HUMAN_LABELS, CONVERSATIONS, c.id == h.conversation_id)
        .where(h.rubric_id == REALISM_RUBRIC)
    )
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    return read_frame(q, ref)


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (sensible at 0 and 1 and for small n)."""
    if n == 0:
        return (np.nan, np.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def realism_by_simulator(ratings: pd.DataFrame) -> pd.DataFrame:
    """Per simulator: ratings, annotators, share very/mostly realistic with its interval, and the
    count at each level. Empty when there are no realism ratings."""
    cols = ["simulator", "n_ratings", "n_annotators", "share_realistic", "ci_low", "ci_high"]
    rated = ratings[ratings["verdict"].isin(REALISM_LEVELS)] if not ratings.empty else ratings
    if rated.empty:
        return pd.DataFrame(columns=cols + [f"n_{level}" for level in REALISM_LEVELS])
    rows = []
    for simulator, grp in rated.groupby("simulator", sort=True):
        n = len(grp)
        good = int(grp["verdict"].isin(REALISTIC).sum())
        low, high = wilson(good, n)
        row = {
            "simulator": simulator or "(none)",
            "n_ratings": n,
            "n_annotators": grp["annotator"].nunique(),
            "share_realistic": good / n,
            "ci_low": low,
            "ci_high": high,
        }
        for level in REALISM_LEVELS:
            row[f"n_{level}"] = int((grp["verdict"] == level).sum())
        rows.append(row)
    return pd.DataFrame(rows)
