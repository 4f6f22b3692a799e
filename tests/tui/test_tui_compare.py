"""Comparing the arms of one tree: aligned at the fork, shared prefix once, differences marked."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.tui.helpers import settle, tree_store
from textual.widgets import SelectionList, Static

from branchpoint.core.read.browse import shared_prefix, tree_arms
from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.screens.compare import CompareScreen

pytestmark = pytest.mark.anyio


@pytest.fixture
def tree(tmp_path: Path):  # type: ignore[no-untyped-def]
    # built outside the test's event loop: the runner runs its own
    store, arms = tree_store(tmp_path / "t.db")
    yield store, arms
    store.close()


def _text(widget: Static) -> str:
    return "\n".join(
        "".join(s.text for s in strip) for strip in widget.render_lines(widget.region.reset_offset)
    )


async def test_two_arms_are_aligned_at_the_fork(tree) -> None:  # type: ignore[no-untyped-def]
    store, arms = tree
    child = arms["open"]
    assert child.parent_id == arms["guarded"].id and child.fork_turn == 4
    app = BranchpointApp(store, conversation=child.id)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        assert set(screen.chosen) == {child.id, arms["guarded"].id}
        assert screen.fork_at == child.fork_turn  # where the engine forked, not where text differs
        box = screen.query_one("#aligned")
        statics = [w for w in box.children if isinstance(w, Static)]
        summary = next(w for w in statics if "shared prefix" in _text(w))
        assert "4 turns (exchanges 1-2)" in _text(summary)
        exchanges = list(box.query(".exchange"))
        assert len(exchanges) == 3  # exchanges 3, 4, 5 after the fork, one each
        last = _text(exchanges[-1])
        guarded_col, open_col = zip(
            *(line.split("\u2502") for line in last.splitlines() if "\u2502" in line)
        )
        assert "OPT_GUARDED" in "".join(guarded_col) and "OPT_OPEN" in "".join(open_col)
        # one line per criterion across the arms: the verdicts line up, marked where they differ
        lines = {
            crit: line
            for line in last.splitlines()
            for crit in ("self_harm_response", "no_diagnosis")
            if crit in line
        }
        assert lines["self_harm_response"].count("self_harm_response") == 2
        assert lines["self_harm_response"].count("\u2260") == 2
        assert (
            lines["self_harm_response"].count("pass") == 1 and "fail" in lines["self_harm_response"]
        )
        assert (
            lines["no_diagnosis"].count("no_diagnosis") == 2
            and "\u2260" not in lines["no_diagnosis"]
        )
        assert screen.differing == [2]  # the last exchange is the one whose verdicts differ
        # the shared prefix opens on p, shown once (not once per arm)
        await pilot.press("p")
        await settle(pilot)
        opened = "\n".join(
            _text(w) for w in screen.query_one("#aligned").children if isinstance(w, Static)
        )
        assert opened.count("i say STAGE_START") == 1
        # unpicking an arm leaves nothing to compare
        await pilot.press("tab")  # from the aligned arms to the arm list
        await pilot.press("space")
        await settle(pilot)
        assert len(screen.query_one("#arms", SelectionList).selected) == 1
        assert "pick two or more arms" in _text(screen.query_one("#aligned").children[0])


def test_shared_prefix_is_the_stored_fork_not_equal_text(tree) -> None:  # type: ignore[no-untyped-def]
    store, arms = tree
    from branchpoint.core.read.browse import get_transcript

    transcripts = [get_transcript(store, c.id) for c in tree_arms(store, arms["open"].id)]
    turns = [t.turns for t in transcripts if t is not None]
    assert len(turns) == 2 and shared_prefix(turns) == 4
    # identical text in two independent conversations is not a shared prefix
    assert (
        shared_prefix(
            [
                turns[0],
                [t.model_copy(update={"origin_turn_id": None, "id": "x" + t.id}) for t in turns[0]],
            ]
        )
        == 0
    )
    store.close()


@pytest.fixture
def two_targets(tmp_path: Path):  # type: ignore[no-untyped-def]
    """One design cell run by two chatbots (a synthetic store: 8 exchanges each, judged)."""
    import sqlite3

    from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store
    from branchpoint.core.store import open_store

    db = tmp_path / "two.db"
    d = TeenDesign(n_scenarios=1, targets=("scripted:old", "scripted:new"), conditions=("none",))
    write_teen_store(db, d, seed=0)
    with sqlite3.connect(db) as con:  # each chatbot's replies say who it is
        con.execute("update turns set content = 'REPLY_OF_' || (select upper(substr(target, 10)) "
                    "from conversations c where c.id = turns.conversation_id) where role = "
                    "'assistant'")  # fmt: skip
        cid = con.execute("select id from conversations where target = 'scripted:old' and "
                          "choices like '%accept_limit%' and choices like '%guarded%' and "
                          "choices like '%\"accept\"%'").fetchone()[0]  # fmt: skip
    store = open_store(db, create=False)
    yield store, cid
    store.close()


async def test_t_shows_the_two_targets_conversations_of_one_cell_side_by_side(two_targets) -> None:  # type: ignore[no-untyped-def]
    store, cid = two_targets
    app = BranchpointApp(store, conversation=cid)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("T")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen) and screen.across == "targets"
        targets = [screen.transcripts[c].conversation.target for c in screen.chosen]
        assert sorted(targets) == ["scripted:new", "scripted:old"]
        cells = {(t.conversation.scenario_id, t.conversation.variant_id, t.conversation.replicate)
                 for t in screen.transcripts.values()}  # fmt: skip
        assert len(cells) == 1  # one design cell, its two chatbots
        box = screen.query_one("#aligned")
        exchanges = list(box.query(".exchange"))
        assert len(exchanges) == 8  # nothing shared between two chatbots: every exchange
        first = _text(exchanges[0])
        cols = list(zip(*(ln.split("\u2502") for ln in first.splitlines() if "\u2502" in ln)))
        joined = ["".join(c) for c in cols]
        assert any("REPLY_OF_OLD" in c for c in joined) and any("REPLY_OF_NEW" in c for c in joined)
        assert "nothing shared" in _text(box.query_one("#fork", Static))
