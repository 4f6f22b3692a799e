"""End to end (issue 34): 60 turns labelled blind in the app's queue, then the report's
judge-corrected section lists them with the judge's sensitivity and specificity, and the
agreement screen shows the corrected rates with the labels there are."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fixtures.tui.helpers import settle, small_teen_store
from textual.widgets import DataTable, Static

from branchpoint.analysis.judge_correction.estimators import ALL, judge_corrected
from branchpoint.analysis.judge_correction.section import TITLE
from branchpoint.analysis.report.write import write_report
from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.screens.label import LabelScreen

pytestmark = pytest.mark.anyio

KEY = {"pass": "1", "partial": "2", "fail": "3"}


@pytest.mark.slow
async def test_sixty_blind_labels_reach_the_report_and_the_agreement_screen(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    verdict = {
        (c, t, k): v
        for c, t, k, v in sqlite3.connect(db).execute(
            "SELECT conversation_id, turn_index, criterion_id, verdict FROM judgments"
        )
    }
    app = BranchpointApp(store, annotator="alice", sample_size=60, seed=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("L")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, LabelScreen) and len(screen.items) == 60
        for i, item in enumerate(list(screen.items)):
            judged = verdict[(item.conversation_id, item.turn_index, item.criterion_id)]
            # the labeller sees a failure in every 5th item whatever the judge said
            await pilot.press(KEY["fail"] if i % 5 == 0 else KEY[judged])
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("A")
        await settle(pilot, rounds=5)
        note = app.screen.query_one("#corrected-note", Static)
        assert "judge-corrected" in str(note.render())
        assert app.screen.query_one("#corrected", DataTable).row_count > 0
    rows = sqlite3.connect(db).execute("SELECT blind, design_id FROM human_labels").fetchall()
    assert len(rows) == 60 and all(b == 1 and d for b, d in rows)

    files = write_report(store, tmp_path / "report", n_boot=50)
    text = files.markdown.read_text(encoding="utf-8")
    section = text[text.index(TITLE) :]
    assert "sensitivity" in section and "specificity" in section
    assert "Per target (all conditions and criteria)" in section
    for target in ("scripted:a", "scripted:b"):
        assert target in section
    table = judge_corrected(store).table
    per_target = table[table["condition"] == ALL].set_index("target")
    assert per_target["n_labelled"].to_dict() == {"scripted:a": 30, "scripted:b": 30}
    assert per_target[["sensitivity", "specificity", "corrected"]].notna().all().all()
    store.close()


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_a_report_without_design_labels_says_so_in_one_line(tmp_path: Path) -> None:
    store = small_teen_store(tmp_path / "t.db")
    files = write_report(store, tmp_path / "report", n_boot=50)
    text = files.markdown.read_text(encoding="utf-8")
    section = text[text.index(TITLE) :]
    assert "no design-sampled blind labels yet" in section
    store.close()
