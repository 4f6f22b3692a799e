"""Counts in sentences agree in number (the demo's report said "1 conversations" and
"heuristic (1 non-error ratings)")."""

from __future__ import annotations

import pandas as pd

from branchpoint.analysis.report.judge_choice import several_judges_note
from branchpoint.core.words import counted


def test_counted_takes_the_number_of_its_count() -> None:
    assert counted(1, "scenario") == "1 scenario"
    assert [counted(n, "scenario") for n in (0, 2)] == ["0 scenarios", "2 scenarios"]
    assert counted(3, "reply", "replies") == "3 replies"


def test_the_several_judges_note_says_1_non_error_rating() -> None:
    cc = pd.DataFrame({"judge": ["embedded", "heuristic"], "n_rated": [24, 1]})
    (note,) = several_judges_note(cc, "embedded")
    assert "embedded (24 non-error ratings), heuristic (1 non-error rating)." in note
