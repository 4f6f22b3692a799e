"""Snapshots (pytest-textual-snapshot, Textual pinned in pyproject) of the browse, transcript,
comparison and labelling screens at 80x24 and 160x48 (browse: the columns widen with the
terminal). Refresh after a deliberate change with
``pytest tests/tui/test_tui_snapshots.py --snapshot-update`` and look at the SVGs before committing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fixtures.tui.helpers import hand_store, settle, tree_store

from branchpoint.core.records import Conversation, Run
from branchpoint.core.store import open_store
from branchpoint.tui.app.app import BranchpointApp

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


def _browse_store(path: Path) -> Any:
    """Hand-made: one run with a long id, arms of three branch points on four targets that share a
    long prefix (what the columns must tell apart)."""
    store = open_store(path)
    run = "sweep-2026-01-01-teen-one-at-a-time-x4"
    arms = [
        {"disclosure": "guarded", "help": "accept", "limit": "accept_limit"},
        {"disclosure": "open", "help": "accept", "limit": "accept_limit"},
        {"disclosure": "guarded", "help": "decline", "limit": "accept_limit"},
        {"disclosure": "guarded", "help": "accept", "limit": "push_back"},
    ]
    with store.session() as s:
        s.add(Run(id=run, status="completed", name="teen study"))
        s.flush()
        for t in range(3):
            for a, choices in enumerate(arms):
                s.add(
                    Conversation(
                        id=f"conv-{t}{a}-0123456789",
                        run_id=run,
                        scenario_id="teen-ah-rail-bridge-jump",
                        scenario_hash="h",
                        variant_id=f"v{a}",
                        choices=choices,
                        target=f"litellm:openrouter/provider/model-{t}",
                        condition="teen_aware",
                        status="completed",
                    )
                )
        s.commit()
    return store


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_browse_screen(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    store = _browse_store(tmp_path / "b.db")
    app = BranchpointApp(store)

    async def before(pilot: Any) -> None:
        await settle(pilot)

    assert snap_compare(app, terminal_size=size, run_before=before)
    store.close()
