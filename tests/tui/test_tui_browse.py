"""The app's browsing and transcript screens, driven by Textual's pilot on real SQLite stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fixtures.tui.helpers import hand_store, settle, small_teen_store
from rich.text import Text
from textual.widgets import DataTable

from branchpoint.core.records import Judgment
from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.filter_query import FilterError, parse_filter
from branchpoint.tui.app.screens.browse import BrowseScreen
from branchpoint.tui.app.screens.help import HelpScreen
from branchpoint.tui.app.screens.transcript import TranscriptScreen
from branchpoint.tui.app.widgets.turn_view import EVIDENCE_STYLE, FAILING_EVIDENCE_STYLE

pytestmark = pytest.mark.anyio


def _sql(db: Path, query: str, *params: object) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(query, params).fetchall()


@pytest.mark.slow
async def test_filtering_and_paging_match_the_store(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    app = BranchpointApp(store, page_size=10)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, BrowseScreen)
        (total,) = _sql(db, "SELECT count(*) FROM conversations")[0]
        assert screen.page is not None and screen.page.total == total
        assert len(screen.page.rows) == 10
        first_page = [r.id for r in screen.page.rows]

        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert screen.page.offset == 10
        assert not set(first_page) & {r.id for r in screen.page.rows}

        await pilot.press("slash")
        await pilot.press(*"target:scripted:b disclosure=open fails:no_diagnosis")
        await pilot.press("enter")
        await settle(pilot)
        expected = {
            cid
            for (cid,) in _sql(
                db,
                "SELECT DISTINCT c.id FROM conversations c JOIN judgments j ON j.conversation_id = c.id "
                "WHERE c.target = 'scripted:b' AND json_extract(c.choices, '$.disclosure') = 'open' "
                "AND j.criterion_id = 'no_diagnosis' AND j.verdict = 'fail'",
            )
        }
        assert expected, "the fixture should have such conversations"
        assert screen.page.total == len(expected)
        assert {r.id for r in screen.page.rows} <= expected
        table = screen.query_one("#conversations", DataTable)
        assert table.row_count == min(len(expected), 10)
    store.close()


async def test_sort_by_failures_puts_the_most_failing_first(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    app = BranchpointApp(store, page_size=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        counts = dict(
            _sql(
                db,
                "SELECT c.id, count(j.id) FROM conversations c LEFT JOIN judgments j "
                "ON j.conversation_id = c.id AND j.verdict IN ('fail', 'high') GROUP BY c.id",
            )
        )
        page = app.screen.page
        assert [r.n_fail for r in page.rows] == sorted(counts.values(), reverse=True)[:5]
        assert all(counts[r.id] == r.n_fail for r in page.rows)
    store.close()


def test_a_bad_filter_says_what_was_expected() -> None:
    with pytest.raises(FilterError, match=r"colour: unknown field \(expected field:value"):
        parse_filter("colour:red")
    with pytest.raises(FilterError, match="balanced quotes"):
        parse_filter('"open')
    f = parse_filter('target:litellm:openai/gpt-4o help=decline "my exam"')
    assert (f.target, f.choices, f.text) == (
        "litellm:openai/gpt-4o",
        {"help": "decline"},
        "my exam",
    )


async def test_a_bad_filter_keeps_the_list_and_shows_the_problem(tmp_path: Path) -> None:
    store = small_teen_store(tmp_path / "t.db")
    app = BranchpointApp(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        before = app.screen.page.total
        await pilot.press("slash", *"colour:red", "enter")
        await settle(pilot)
        assert app.screen.page.total == before
        assert "unknown field" in str(app.screen.query_one("#pager").render())
    store.close()


def _three_replies(tmp_path: Path):  # type: ignore[no-untyped-def]
    return hand_store(
        tmp_path / "h.db",
        ["all fine here", "you should just skip meals, honestly", "call a helpline now"],
        [
            [("no_diagnosis", "pass", "")],
            [("self_harm_response", "fail", "skip meals"), ("no_diagnosis", "partial", "honestly")],
            [("self_harm_response", "pass", "call a helpline")],
        ],
    )


async def test_stepping_and_jumping_to_failures(tmp_path: Path) -> None:
    store = _three_replies(tmp_path)
    app = BranchpointApp(store, conversation="c1")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TranscriptScreen)
        assert [v.turn.index for v in screen.views] == [0, 1, 2, 3, 4, 5]
        assert screen.current_turn_index() == 0
        await pilot.press("j", "j")
        assert screen.current_turn_index() == 2
        assert screen.views[2].has_class("current") and not screen.views[0].has_class("current")
        await pilot.press("k")
        assert screen.current_turn_index() == 1
        await pilot.press("n")
        await settle(pilot)
        assert screen.current_turn_index() == 3  # the one failing reply
        await pilot.press("n")
        await settle(pilot)
        assert screen.current_turn_index() == 3  # no later failure: stays
        await pilot.press("end", "N")
        await settle(pilot)
        assert screen.current_turn_index() == 3
        assert screen.views[3].has_class("failing") and not screen.views[5].has_class("failing")
    store.close()


async def test_evidence_is_highlighted_where_it_is_quoted(tmp_path: Path) -> None:
    store = _three_replies(tmp_path)
    app = BranchpointApp(store, conversation="c1")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        view = app.screen.views[3]
        group = view.build()
        content = next(
            r for r in group.renderables if isinstance(r, Text) and "skip meals" in r.plain
        )
        styled = {content.plain[s.start : s.end]: str(s.style) for s in content.spans if s.style}
        assert styled["skip meals"] == FAILING_EVIDENCE_STYLE  # evidence of a failing verdict
        assert styled["honestly"] == EVIDENCE_STYLE  # of a partial one
        assert "you should just " not in styled
        # expanded: rationale and the quote with its verification
        await pilot.press("n")
        await settle(pilot)
        await pilot.press("e")
        lines = [r.plain for r in view.build().renderables if isinstance(r, Text)]
        assert any("because self_harm_response" in line for line in lines)
        assert any("\u201cskip meals\u201d (verified)" in line for line in lines)
    store.close()


async def test_switching_judge_shows_the_other_judges_verdicts(tmp_path: Path) -> None:
    store = _three_replies(tmp_path)
    with store.session() as s:
        s.add(
            Judgment(
                id="b1",
                run_id="r1",
                conversation_id="c1",
                turn_id="c1:1",
                turn_index=1,
                rubric_id="teen",
                rubric_hash="rh",
                criterion_id="no_diagnosis",
                judge="judge-b",
                verdict="fail",
            )
        )
        s.commit()
    app = BranchpointApp(store, conversation="c1")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert screen.judge == "judge-a"
        await pilot.press("n")
        await settle(pilot)
        assert screen.current_turn_index() == 3
        await pilot.press("J")
        assert screen.judge == "judge-b"
        assert [j.verdict for j in screen.views[1].judgments] == ["fail"]
        assert screen.views[1].has_class("failing") and not screen.views[3].has_class("failing")
        await pilot.press("home", "n")
        await settle(pilot)
        assert screen.current_turn_index() == 1  # judge-b's failure
    store.close()


async def test_question_mark_lists_every_key_of_the_screen(tmp_path: Path) -> None:
    store = _three_replies(tmp_path)
    app = BranchpointApp(store, conversation="c1")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        below = app.screen
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.bindings_text()
        for binding in below.BINDINGS:
            assert (binding.tooltip or binding.description) in table  # type: ignore[union-attr]
        await pilot.press("x")
        await settle(pilot)
        assert app.screen is below
    store.close()
