"""Blind labelling and realism ratings in the app: each key stores a label at once, in a real store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fixtures.tui.helpers import settle, small_teen_store
from textual.widgets import DataTable, Static

from branchpoint.core.human_labels import REALISM_RUBRIC, LabelRow, sample_queue, save_label
from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.screens.label import LabelScreen

pytestmark = pytest.mark.anyio


def _labels(db: Path) -> list[sqlite3.Row]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    rows = conn.execute("SELECT * FROM human_labels ORDER BY created_at").fetchall()
    conn.close()
    return rows


def _shown(screen: LabelScreen, selector: str) -> str:
    w = screen.query_one(selector, Static)
    return "\n".join(
        "".join(s.text for s in line) for line in w.render_lines(w.region.reset_offset)
    )


@pytest.mark.slow
async def test_three_turns_labelled_blind_are_in_the_store(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    app = BranchpointApp(store, annotator="alice", sample_size=12, seed=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("L")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, LabelScreen)
        items = screen.items
        assert items == sample_queue(store, n=12, seed=5)  # the seeded queue, nothing else
        target_of_first = next(
            r[0]
            for r in sqlite3.connect(db).execute(
                "SELECT target FROM conversations WHERE id = ?", (items[0].conversation_id,)
            )
        )
        assert "hidden" in _shown(screen, "#reveal")
        assert target_of_first not in _shown(screen, "#reveal")
        await pilot.press("1", "3", "2")
        await settle(pilot)
        rows = _labels(db)
        assert len(rows) == 3
        for row, item, verdict in zip(rows, items, ("pass", "fail", "partial")):
            assert (row["conversation_id"], row["turn_index"], row["criterion_id"]) == (
                item.conversation_id,
                item.turn_index,
                item.criterion_id,
            )
            assert row["annotator"] == "alice" and row["verdict"] == verdict
            assert row["blind"] == 1 and row["time_spent_s"] is not None
            assert row["time_spent_s"] >= 0
        assert "3/12 labelled" in _shown(screen, "#progress")

        # revealing shows the target and the judge's verdict, and the label is then not blind
        await pilot.press("v")
        assert "target" in _shown(screen, "#reveal")
        # a note and a confidence go with the label
        await pilot.press("m", *"unsure", "enter", "c", "c", "0")
        await settle(pilot)
        fourth = _labels(db)[-1]
        assert fourth["blind"] == 0 and fourth["verdict"] is None  # 0: not applicable
        assert fourth["note"] == "unsure" and fourth["confidence"] == "medium"
        assert screen.position == 4
    store.close()


@pytest.mark.slow
async def test_a_queue_resumes_where_the_annotator_left_it(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    for annotator, presses in (("bob", ("1", "2")), ("bob", ()), ("carol", ())):
        app = BranchpointApp(store, annotator=annotator, sample_size=6)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("L")
            await settle(pilot)
            screen = app.screen
            if presses:
                assert screen.position == 0
                await pilot.press(*presses)
                await settle(pilot)
            elif annotator == "bob":
                assert screen.position == 2 and len(screen.done) == 2  # resumed
            else:
                assert screen.position == 0 and not screen.done  # another annotator starts fresh
    assert len(_labels(db)) == 2
    store.close()


@pytest.mark.slow
async def test_realism_ratings_are_blind_to_the_simulator(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db, simulators=("scripted:simA", "scripted:simB"))
    app = BranchpointApp(store, annotator="dana", sample_size=4)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("R")
        await settle(pilot)
        screen = app.screen
        assert {it.rubric_id for it in screen.items} == {REALISM_RUBRIC}
        assert "simulator hidden" in _shown(screen, "#reveal")
        assert "scripted:sim" not in _shown(screen, "#reveal")
        keys = _shown(screen, "#keys")
        assert "very" in keys and "not" in keys and "not applicable" not in keys
        await pilot.press("2", "0", "4")  # 0 is no level of the realism scale
        await settle(pilot)
    rows = _labels(db)
    assert [r["verdict"] for r in rows] == ["mostly", "not"]
    assert all(r["rubric_id"] == REALISM_RUBRIC and r["blind"] == 1 for r in rows)
    sims = {
        r[0]
        for r in sqlite3.connect(db).execute(
            "SELECT c.simulator FROM conversations c WHERE c.id IN (SELECT conversation_id FROM human_labels)"
        )
    }
    assert sims <= {"scripted:simA", "scripted:simB"}
    store.close()


@pytest.mark.slow
async def test_labelling_every_turn_of_one_conversation(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    cid = sqlite3.connect(db).execute("SELECT id FROM conversations ORDER BY id").fetchone()[0]
    expected = (
        sqlite3.connect(db)
        .execute(
            "SELECT count(DISTINCT turn_index || criterion_id) FROM judgments "
            "WHERE conversation_id = ? AND applicable",
            (cid,),
        )
        .fetchone()[0]
    )
    app = BranchpointApp(store, annotator="erin", conversation=cid)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("l")
        await settle(pilot)
        screen = app.screen
        assert len(screen.items) == expected
        assert {it.conversation_id for it in screen.items} == {cid}
        indexes = [it.turn_index for it in screen.items]
        assert indexes == sorted(indexes)  # turn by turn
    store.close()


async def test_agreement_with_the_judge_is_shown_in_the_app(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    judged = (
        sqlite3.connect(db)
        .execute(
            "SELECT conversation_id, turn_index, criterion_id, verdict FROM judgments "
            "WHERE applicable AND verdict IN ('pass', 'fail') ORDER BY id LIMIT 8"
        )
        .fetchall()
    )
    flip = {"pass": "fail", "fail": "pass"}
    for i, (cid, turn, crit, verdict) in enumerate(judged):
        save_label(
            store,
            LabelRow(
                conversation_id=cid,
                turn_index=turn,
                rubric_id="teen",
                criterion_id=crit,
                annotator="alice",
                verdict=flip[verdict] if i < 2 else verdict,
            ),
        )
    app = BranchpointApp(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("A")
        await settle(pilot)
        screen = app.screen
        overall = next(r for r in screen.pairs if r["criterion_id"] == "(all)")
        assert (overall["rater_a"], overall["rater_b"]) == ("scripted:judge", "human:alice")
        assert overall["n_items"] == 8 and overall["raw_agreement"] == 0.75
        assert screen.query_one("#pairs", DataTable).row_count == len(screen.pairs)
        # labels made outside a labelling design: no corrected rate, one line saying why
        note = str(screen.query_one("#corrected-note", Static).render())
        assert "no design-sampled blind labels yet" in note
        assert screen.query_one("#corrected", DataTable).row_count == 0
    store.close()
