"""Blind means blind: no labelling or realism screen draws what identifies the arm or the model
(variant choices, fired branch points and branch state, target, condition, simulator, judge
verdicts), and a label is stored as blind only when none of that was shown."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from fixtures.tui.helpers import drawn_text, settle, small_teen_store

from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.screens.label import LabelScreen

pytestmark = pytest.mark.anyio

DESIGN = {
    "targets": ("scripted:tgtalpha", "scripted:tgtbeta"),
    "simulators": ("scripted:simgamma", "scripted:simdelta"),
    "conditions": ("condepsilon", "condzeta"),
    "condition_effect": {},
}


def _identifying(db: Path, conversation_id: str) -> list[str]:
    """Every string that would tell a labeller the arm or the model of this conversation."""
    with sqlite3.connect(db) as conn:
        target, condition, simulator, variant, choices = conn.execute(
            "SELECT target, condition, simulator, variant_id, choices FROM conversations "
            "WHERE id = ?",
            (conversation_id,),
        ).fetchone()
        turns = conn.execute(
            "SELECT fired, branch_state FROM turns WHERE conversation_id = ?", (conversation_id,)
        ).fetchall()
        judges = [j for (j,) in conn.execute("SELECT DISTINCT judge FROM judgments")]
    out = [target, condition, simulator, variant, "fired:", *judges]
    out += [f"{k}={v}" for k, v in json.loads(choices).items()]
    for fired, state in turns:
        out += [f"{k}={v}" for k, v in json.loads(state or "{}").items()]
        out += [f"{b}=" for b in json.loads(fired or "[]")]
    return [s for s in out if s]


@pytest.mark.slow
@pytest.mark.parametrize("key", ["L", "R"])
async def test_no_labelling_screen_shows_what_identifies_the_arm(tmp_path: Path, key: str) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db, **DESIGN)
    fired = sqlite3.connect(db).execute("SELECT count(*) FROM turns WHERE fired != '[]'")
    assert fired.fetchone()[0] > 0, "the fixture should have fired branch points"
    app = BranchpointApp(store, annotator="alice", sample_size=10, seed=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, LabelScreen) and screen.items
        for position, item in enumerate(screen.items):
            assert screen.position == position
            await settle(pilot)
            shown = drawn_text(screen)
            assert (
                "the turn you label" in shown
            )  # the context is drawn, so the scan means something
            leaks = [s for s in _identifying(db, item.conversation_id) if s in shown]
            assert not leaks, f"item {position} shows {leaks}"
            await pilot.press("right")
        # revealing shows them, and a label given then is not blind
        await pilot.press("left")
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        item = screen.items[-1]
        assert any(s in drawn_text(screen) for s in _identifying(db, item.conversation_id))
        await pilot.press("left", "right")  # away and back: still revealed
        await settle(pilot)
        await pilot.press("1")
        await settle(pilot)
    (blind,) = sqlite3.connect(db).execute("SELECT blind FROM human_labels").fetchone()
    assert blind == 0
    store.close()


async def test_labels_of_a_conversation_opened_from_its_transcript_are_not_blind(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    cid = sqlite3.connect(db).execute("SELECT id FROM conversations ORDER BY id").fetchone()[0]
    app = BranchpointApp(store, annotator="erin", conversation=cid)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("l")
        await settle(pilot)
        await pilot.press("1")
        await settle(pilot)
    (blind,) = sqlite3.connect(db).execute("SELECT blind FROM human_labels").fetchone()
    assert blind == 0  # the transcript showed the verdicts and the arm
    store.close()
