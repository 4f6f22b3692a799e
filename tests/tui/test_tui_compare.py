"""Comparing the arms of one tree: aligned at the fork, shared prefix once, differences marked."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.tui.helpers import settle, tree_store
from textual.containers import Horizontal
from textual.widgets import SelectionList, Static

from core.read.browse import shared_prefix, tree_arms
from tui.app.app import BranchpointApp
from tui.app.screens.compare import CompareScreen

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
        rows = [w for w in box.children if isinstance(w, Horizontal)][1:]  # the first is the header
        assert len(rows) == 3  # exchanges 3, 4, 5 after the fork, one row each
        assert all(len(r.children) == 2 for r in rows)
        last = rows[-1]
        guarded_cell, open_cell = (_text(c) for c in last.children)
        assert "OPT_GUARDED" in guarded_cell and "OPT_OPEN" in open_cell
        for cell in (guarded_cell, open_cell):
            marked = [
                line for line in cell.splitlines() if line.lstrip("\u2502 ").startswith("\u2260")
            ]
            assert len(marked) == 1 and "self_harm_response" in marked[0]
            assert any(
                "no_diagnosis" in line and not line.lstrip("\u2502 ").startswith("\u2260")
                for line in cell.splitlines()
            )
        # the shared prefix opens on p, shown once (not once per arm)
        await pilot.press("p")
        await settle(pilot)
        opened = "\n".join(
            _text(w) for w in screen.query_one("#aligned").children if isinstance(w, Static)
        )
        assert opened.count("i say STAGE_START") == 1
        # unpicking an arm leaves nothing to compare
        await pilot.press("space")
        await settle(pilot)
        assert len(screen.query_one("#arms", SelectionList).selected) == 1
        assert "pick two or more arms" in _text(screen.query_one("#aligned").children[0])


def test_shared_prefix_is_the_stored_fork_not_equal_text(tree) -> None:  # type: ignore[no-untyped-def]
    store, arms = tree
    from core.read.browse import get_transcript

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
