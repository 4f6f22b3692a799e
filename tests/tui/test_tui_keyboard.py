"""Every pane reached from the keyboard at 80x24: compare scrolls to its last turn, the labelled
turn is in view and marked in L and R, Esc leaves the filter, ``?`` names every key, the footer
fits 80 columns, and browse refreshes itself when a run ends."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixtures.tui.helpers import hand_store, screen_text, settle, small_teen_store, tree_store
from textual.widgets import DataTable, Input

from branchpoint.core.records import Conversation
from branchpoint.core.store import open_store
from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.screens.browse import BrowseScreen
from branchpoint.tui.app.screens.compare import CompareScreen
from branchpoint.tui.app.screens.help import HelpScreen
from branchpoint.tui.app.screens.label import CURRENT_MARK, LabelScreen

pytestmark = pytest.mark.anyio


@pytest.fixture
def tree(tmp_path: Path):  # type: ignore[no-untyped-def]
    store, arms = tree_store(
        tmp_path / "t.db"
    )  # outside the test's event loop: the runner has its own
    yield store, arms
    store.close()


@pytest.mark.slow
async def test_compare_scrolls_to_its_last_turn_by_keyboard(tree) -> None:  # type: ignore[no-untyped-def]
    store, arms = tree
    app = BranchpointApp(store, conversation=arms["open"].id)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        box = screen.query_one("#aligned")
        assert box.has_focus
        # the last exchange (the one whose verdicts differ, marked ≠) is below the fold
        assert "\u2260" not in screen_text(app)
        await pilot.press("j")
        assert box.scroll_offset.y == 1
        await pilot.press("pagedown")
        assert box.scroll_offset.y > 1
        await pilot.press("home")
        assert box.scroll_offset.y == 0
        await pilot.press("end")
        await pilot.pause()
        assert box.scroll_offset.y == box.max_scroll_y > 0
        assert "\u2260" in screen_text(app)
        # n: to the next exchange whose verdicts differ, from the top
        await pilot.press("home", "n")
        await pilot.pause()
        last = screen.exchanges[-1]
        assert box.scroll_offset.y == min(last.virtual_region.y, box.max_scroll_y)
        assert "\u2260" in screen_text(app)
        # tab reaches the arm list, and back
        await pilot.press("tab")
        assert screen.query_one("#arms").has_focus
        await pilot.press("tab")
        assert box.has_focus


@pytest.mark.slow
@pytest.mark.parametrize("key", ["L", "R"])
async def test_the_labelled_turn_is_in_view_and_marked(tmp_path: Path, key: str) -> None:
    store = small_teen_store(tmp_path / "t.db", n_exchanges=6)
    app = BranchpointApp(store, annotator="ann", sample_size=6, seed=4)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, LabelScreen) and len(screen.items) == 6
        context = screen.query_one("#context")
        assert context.has_focus
        with_context = 0
        for _ in screen.items:
            await settle(pilot)
            assert CURRENT_MARK in screen_text(app)
            marked = list(context.query(".current"))
            assert len(marked) == 1
            before = [w for w in context.children if w is not marked[0]]
            with_context += bool(before)
            if before:  # the context above scrolls into view by keyboard, and back
                await pilot.press("home")
                await pilot.pause()
                assert context.scroll_offset.y == 0
                await pilot.press("t")
                await pilot.pause()
                assert CURRENT_MARK in screen_text(app)
            await pilot.press("right")
        assert with_context, "some items should have context turns above the labelled one"
    store.close()


async def test_escape_leaves_the_filter(tmp_path: Path) -> None:
    store = small_teen_store(tmp_path / "t.db")
    app = BranchpointApp(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"fails:no")
        box = app.screen.query_one("#filter", Input)
        assert box.has_focus
        await pilot.press("escape")
        assert not box.has_focus
        assert app.screen.query_one("#conversations", DataTable).has_focus
        assert isinstance(app.screen, BrowseScreen)
        await pilot.press("s")  # a screen key works again
        await settle(pilot)
        assert app.screen.filter.sort == "failures"
    store.close()


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
@pytest.mark.parametrize("screen_key", ["browse", "transcript", "compare", "L", "R"])
async def test_every_screen_footer_fits_80_columns_and_help_names_every_key(
    tree, screen_key: str
) -> None:  # type: ignore[no-untyped-def]
    store, arms = tree
    app = BranchpointApp(store, conversation=arms["open"].id, annotator="x", sample_size=3)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        if screen_key in ("browse", "L", "R"):
            await pilot.press("escape")
            await settle(pilot)
        if screen_key in ("compare", "L", "R"):
            await pilot.press("c" if screen_key == "compare" else screen_key)
            await settle(pilot)
        below = app.screen
        footer = screen_text(app).splitlines()[-1]
        shown = [b for b in below.BINDINGS if b.show]  # type: ignore[union-attr]
        last = shown[-1]
        assert (
            f"{app.get_key_display(last.with_key(last.key.split(',')[-1]))} {last.description}"
            in footer
            or (last.description in footer)
        ), footer
        assert "keys" in footer  # the app's ? is not cut off
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.bindings_text()
        for binding in below.BINDINGS:
            assert (binding.tooltip or binding.description) in table  # type: ignore[union-attr]
        for keys, _ in getattr(below, "WIDGET_KEYS", ()):
            assert keys in table
        if screen_key == "compare":
            assert "space" in table
        assert "mouse" not in screen_text(app)


async def test_browse_refreshes_itself_when_a_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "h.db"
    hand_store(db, ["hello"], []).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET status = 'running'")
    monkeypatch.setattr(BrowseScreen, "REFRESH_S", 0.2)
    store = open_store(db)
    app = BranchpointApp(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert screen.page.total == 1
        # another process (the runner) writes a conversation and ends the run
        writer = open_store(db)
        with writer.session() as s:
            s.add(
                Conversation(
                    id="c2",
                    run_id="r1",
                    scenario_id="scn",
                    scenario_hash="h",
                    variant_id="v2",
                    choices={"disclosure": "guarded"},
                    target="scripted:bot",
                    status="completed",
                )
            )
            s.commit()
        with sqlite3.connect(db) as conn:
            conn.execute(
                "UPDATE runs SET status = 'completed', updated_at = ?",
                (datetime.now(UTC).isoformat(" "),),
            )
        writer.close()
        for _ in range(40):
            await pilot.pause(0.1)
            if screen.page.total == 2 and screen.runs[0].status == "completed":
                break
        await settle(pilot)
        assert screen.page.total == 2
        assert screen.runs[0].status == "completed" and screen.runs[0].n_conversations == 2
        assert "1-2 of 2" in screen_text(app)
        # and r reloads at once
        before = screen.refreshes
        await pilot.press("r")
        await settle(pilot)
        assert screen.refreshes == before + 1
    store.close()


async def test_a_labelled_item_shows_the_earlier_label(tmp_path: Path) -> None:
    store = small_teen_store(tmp_path / "t.db")
    app = BranchpointApp(store, annotator="ann", sample_size=4, seed=4)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("L")
        await settle(pilot)
        assert "earlier label" not in screen_text(app)
        await pilot.press("3")  # fail, then back to it
        await settle(pilot)
        await pilot.press("left")
        await settle(pilot)
        shown = screen_text(app)
        assert "your earlier label:  fail" in shown
    store.close()


async def test_capital_e_opens_the_evidence_of_every_turn(tmp_path: Path) -> None:
    store = hand_store(
        tmp_path / "h.db",
        ["fine", "skip meals"],
        [[("no_diagnosis", "pass", "fine")], [("self_harm_response", "fail", "skip meals")]],
    )
    app = BranchpointApp(store, conversation="c1")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("E")
        assert all(v.expanded for v in app.screen.views)
        await pilot.press("E")
        assert not any(v.expanded for v in app.screen.views)
    store.close()
