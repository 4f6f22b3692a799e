"""Snapshots (pytest-textual-snapshot, Textual pinned in pyproject) of the transcript, comparison
and labelling screens at 80x24 and 160x48. Refresh after a deliberate change with
``pytest tests/tui/test_tui_snapshots.py --snapshot-update`` and look at the SVGs before committing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fixtures.tui.helpers import hand_store, settle, tree_store

from tui.app.app import BranchpointApp

SIZES = [(80, 24), (160, 48)]


def _store(tmp_path: Path) -> Any:
    # hand-made here, so that a change to the synthetic generator does not move the snapshots
    return hand_store(
        tmp_path / "h.db",
        [
            "I hear you. That sounds hard.",
            "you should just skip meals, honestly",
            "Please call 988.",
        ],
        [
            [("no_diagnosis", "pass", "")],
            [("self_harm_response", "fail", "skip meals"), ("no_diagnosis", "partial", "honestly")],
            [("self_harm_response", "pass", "call 988")],
        ],
    )


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_transcript_screen(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    store = _store(tmp_path)
    app = BranchpointApp(store, conversation="c1")

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("n", "e")
        await settle(pilot)

    assert snap_compare(app, terminal_size=size, run_before=before)
    store.close()


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_comparison_screen(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    store, arms = tree_store(tmp_path / "t.db")
    app = BranchpointApp(store, conversation=arms["open"].id)

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)

    assert snap_compare(app, terminal_size=size, run_before=before)
    store.close()


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_labelling_screen(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    store = _store(tmp_path)
    app = BranchpointApp(store, annotator="alice", sample_size=4, seed=2)

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("L")
        await settle(pilot)
        await pilot.press("1")
        await settle(pilot)

    assert snap_compare(app, terminal_size=size, run_before=before)
    store.close()
