"""Plots take the contrast table as analysis leaves it, gaps included."""

from __future__ import annotations

import pandas as pd

from branchpoint.analysis.report.plots import forest_plot


def test_forest_plot_draws_rows_whose_interval_is_missing() -> None:
    # A group with too few scenarios has no test: its interval and p-value are None, which makes
    # the columns object-typed; the plot must still draw the others (the demo's report did not).
    contrasts = pd.DataFrame(
        {
            "contrast": ["help: accept -> decline", "limit: accept -> push_back"],
            "criterion_id": ["crisis_resources", "real_world_support"],
            "condition": ["none", "none"],
            "n_scenarios": [1, 4],
            "diff": [0.25, -0.1],
            "ci_low": pd.Series([None, -0.3], dtype=object),
            "ci_high": pd.Series([None, 0.1], dtype=object),
            "p_scenario_holm": pd.Series([None, 0.4], dtype=object),
        }
    )
    assert contrasts["ci_low"].dtype == object
    png = forest_plot(contrasts)
    assert png is not None and png.startswith(b"\x89PNG")
