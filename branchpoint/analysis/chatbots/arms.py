"""An arm's name: the choices of its variant (branch point options, profile attributes), as
text, so that the arms of different scenarios that made the same choices are one arm."""

from __future__ import annotations

import pandas as pd

from branchpoint.analysis.tables.judgments import CHOICE_PREFIX, choice_columns

NO_CHOICES = "(no branch points)"


def arm_labels(frame: pd.DataFrame) -> pd.Series:
    """Each row's arm as text: its choices, ``key=option`` joined, keys in order."""
    cols = sorted(choice_columns(frame))
    if not cols:
        return pd.Series(NO_CHOICES, index=frame.index, dtype=object)
    parts = [
        frame[c]
        .astype(object)
        .map(lambda v, k=c.removeprefix(CHOICE_PREFIX): "" if pd.isna(v) else f"{k}={v}")
        for c in cols
    ]
    joined = parts[0].astype(str)
    for p in parts[1:]:
        joined = joined.str.cat(p.astype(str), sep=", ")
    return joined.str.replace(r"(^(, )+|(, )+$)", "", regex=True).str.replace(
        r"(, ){2,}", ", ", regex=True
    )
