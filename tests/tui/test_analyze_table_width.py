"""``analyze`` chooses table or blocks by the table's natural width, counted from its cells'
lengths: the width rich measures the same table at."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from rich.measure import Measurement

from branchpoint.tui.commands.analysis_cmds import _natural_width, _printable, _rich_table

FRAMES = {
    "mixed": pd.DataFrame(
        {
            "judge": ["scripted:judge", "a", ""],
            "rate": [0.357, np.nan, 1.0],
            "n": [1630, 2, 3],
            "contrast": ["limit: accept_limit → push_back", "x", None],
        }
    ),
    "wide characters": pd.DataFrame({"目標": ["日本語のテキスト", "ok"], "e": ["🙂🙂", "a\tb"]}),
    "header widest": pd.DataFrame({"a very long column name indeed": [1, 2]}),
    "no rows": pd.DataFrame({"a": [], "bb": []}),
    "no columns": pd.DataFrame(index=[0, 1]),
    "many rows": pd.DataFrame({"x": [str(i) * (i % 7) for i in range(60)]}),  # 40 shown
}


@pytest.mark.parametrize("name", list(FRAMES))
def test_natural_width_is_what_rich_measures(name: str) -> None:
    frame = FRAMES[name]
    cols = [str(c) for c in frame.columns]
    cells = [[_printable(v) for v in row] for row in frame.head(40).itertuples(index=False)]
    console = Console(width=80)
    table = _rich_table("caption", cols, cells)
    want = Measurement.get(console, console.options.update_width(100_000), table).maximum
    assert _natural_width(cols, cells) == want
