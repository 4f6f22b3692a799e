"""Runs whose configurations differ are never pooled silently (issue 13, point 4): two runs that
hold the same cells under different settings are refused with one line naming both."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.engine.helpers import run_engine, write_scenario

from branchpoint.analysis.report.write import refuse_pooled_configs, run_analysis
from branchpoint.core.errors import UserError


def _scenario(tmp_path: Path) -> Path:
    return write_scenario(tmp_path, "cfg.yaml", id="cfg-runs", max_turns=3)


def test_same_cells_under_different_settings_are_refused_with_one_line(store, tmp_path) -> None:
    scenario = _scenario(tmp_path)
    run_engine(store, scenario, run_id="short", max_turns=2)
    run_engine(store, scenario, run_id="long", max_turns=3)

    with pytest.raises(UserError) as err:
        run_analysis(store)
    message = str(err.value)
    assert "\n" not in message
    assert "runs long" in message and "and short" in message
    assert "scripted:bot" in message and "--run long" in message
    # Each run on its own is fine: the refusal is about pooling, not about either run.
    refuse_pooled_configs(store, ["short"])
    refuse_pooled_configs(store, ["long"])


def test_runs_with_one_configuration_or_disjoint_cells_pool(store, tmp_path) -> None:
    scenario = _scenario(tmp_path)
    run_engine(store, scenario, run_id="first", max_turns=2)
    run_engine(store, scenario, run_id="second", max_turns=2)  # same settings: replicates
    other = write_scenario(tmp_path, "other.yaml", id="cfg-other", max_turns=3)
    run_engine(store, other, run_id="third", max_turns=3)  # other cells: nothing pooled
    refuse_pooled_configs(store, None)
