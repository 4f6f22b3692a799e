"""How a table names its judge, for every table shown to people: a column when several judges
are in it (first, so that two rows of one criterion are told apart)."""

from __future__ import annotations

import pandas as pd


def with_judge(src: pd.DataFrame, shown: pd.DataFrame) -> pd.DataFrame:
    """``shown`` with ``src``'s judge column first when several judges are in ``src``."""
    if "judge" in src.columns and src["judge"].nunique() > 1 and "judge" not in shown.columns:
        shown = shown.copy()
        shown.insert(0, "judge", src["judge"].to_numpy())
    return shown
