"""Issue 36, where it shows: persona turns whose manipulation check says not enacted, and those
rated below "mostly" realistic, are marked in the transcript and can be filtered on; driven by
Textual's pilot at 80x24 on real SQLite stores."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixtures.tui.helpers import HOSTILE, drawn_text, settle, small_teen_store

from branchpoint.core.domain import ENACTMENT_RUBRIC
from branchpoint.core.human_labels import REALISM_RUBRIC, REALISM_TURN
from branchpoint.core.read.persona_flags import persona_flag_counts, turn_flags
from branchpoint.core.read.realisation import realisation_rows
from branchpoint.core.records import Conversation, Judgment, Run, Turn
from branchpoint.core.store import Store, open_store
from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.filter_query import FilterError, parse_filter
from branchpoint.tui.app.screens.browse import BrowseScreen
from branchpoint.tui.app.screens.transcript import TranscriptScreen
from branchpoint.tui.app.widgets.turn_view import turn_header

pytestmark = pytest.mark.anyio

# (conversation, persona turn index, rubric, criterion, judge, verdict, created second)
Rating = tuple[str, int, str, str, str, str, int]


def _flag_store(path: Path, ratings: list[Rating], option: str = "decline") -> Store:
    """Conversations c1..c4 of one run, three exchanges each; branch point ``help`` fires on
    the persona turn of exchange 2 (turn 2), its option in force from there on."""
    store = open_store(path)
    with store.session() as s:
        s.add(Run(id="r1", status="completed", name="flags"))
        s.flush()
        for cid in ("c1", "c2", "c3", "c4"):
            s.add(
                Conversation(
                    id=cid,
                    run_id="r1",
                    scenario_id="scn",
                    scenario_hash="h",
                    variant_id="v1",
                    choices={"help": option},
                    target="scripted:bot",
                    status="completed",
                    n_turns=6,
                )
            )
            s.flush()
            for exchange in (1, 2, 3):
                for index, role in ((2 * exchange - 2, "user"), (2 * exchange - 1, "assistant")):
                    persona = role == "user"
                    s.add(
                        Turn(
                            id=f"{cid}:{index}",
                            conversation_id=cid,
                            index=index,
                            exchange=exchange,
                            role=role,
                            content=f"{role} {index} of {cid}",
                            fired=["help"] if persona and exchange == 2 else [],
                            branch_state={"help": option} if persona and exchange >= 2 else {},
                        )
                    )
        s.flush()
        for n, (cid, index, rubric, criterion, judge, verdict, second) in enumerate(ratings):
            s.add(
                Judgment(
                    id=f"p{n}",
                    run_id="r1",
                    conversation_id=cid,
                    turn_id=f"{cid}:{index}",
                    turn_index=index,
                    rubric_id=rubric,
                    rubric_hash="ph",
                    criterion_id=criterion,
                    judge=judge,
                    verdict=verdict,
                    created_at=datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC),
                )
            )
        s.commit()
    return store


E, R = ENACTMENT_RUBRIC, REALISM_RUBRIC
RATINGS: list[Rating] = [
    # c1: the decline was not enacted on turn 2; every persona turn realistic enough
    ("c1", 2, E, "help", "heuristic", "not_enacted", 1),
    ("c1", 0, R, REALISM_TURN, "heuristic", "very", 1),
    ("c1", 2, R, REALISM_TURN, "heuristic", "mostly", 1),
    ("c1", 4, R, REALISM_TURN, "heuristic", "mostly", 1),
    # c2: enacted, but turn 4 drifted into assistant-speak
    ("c2", 2, E, "help", "heuristic", "enacted", 1),
    ("c2", 2, R, REALISM_TURN, "heuristic", "very", 1),
    ("c2", 4, R, REALISM_TURN, "heuristic", "not", 1),
    # c3: raters disagree; the model rater's verdict is the one that counts (as in the
    # realisation read), so nothing is flagged; an error is never a flag
    ("c3", 2, E, "help", "heuristic", "not_enacted", 1),
    ("c3", 2, E, "help", "model:x", "enacted", 1),
    ("c3", 4, R, REALISM_TURN, "model:x", "error", 1),
    ("c3", 4, R, REALISM_TURN, "heuristic", "mixed", 1),
    # c4: one rater rated twice; the newest (enacted, mixed -> very) counts
    ("c4", 2, E, "help", "heuristic", "not_enacted", 1),
    ("c4", 2, E, "help", "heuristic", "enacted", 2),
    ("c4", 0, R, REALISM_TURN, "heuristic", "mixed", 1),
    ("c4", 0, R, REALISM_TURN, "heuristic", "very", 2),
]


def test_turn_flags_choose_one_rating_per_turn(tmp_path: Path) -> None:
    store = _flag_store(tmp_path / "f.db", RATINGS)
    assert {i: (f.not_enacted, f.realism) for i, f in turn_flags(store, "c1").items()} == {
        2: (["help"], None)
    }
    assert {i: (f.not_enacted, f.realism) for i, f in turn_flags(store, "c2").items()} == {
        4: ([], "not")
    }
    # c3: the model rater's "enacted" wins; realism: the heuristic's verdict beats the error
    assert {i: (f.not_enacted, f.realism) for i, f in turn_flags(store, "c3").items()} == {
        4: ([], "mixed")
    }
    assert turn_flags(store, "c4") == {}
    # the same choice as the realisation table's enactment column, turn for turn
    frame = realisation_rows(str(tmp_path / "f.db"), ["r1"])
    assert dict(zip(frame["conversation_id"], frame["enactment"], strict=True)) == {
        "c1": "not_enacted",
        "c2": "enacted",
        "c3": "enacted",
        "c4": "enacted",
    }
    assert persona_flag_counts(store).keys() == {"r1"}
    counts = persona_flag_counts(store, "r1")["r1"]
    assert counts.model_dump() == {
        "enactment_rated": 4,
        "not_enacted": 1,
        "realism_rated": 7,
        "low_realism": 2,
    }
    store.close()


async def test_transcript_marks_the_flagged_persona_turns_only(tmp_path: Path) -> None:
    store = _flag_store(tmp_path / "f.db", RATINGS)
    for cid, marks in (
        ("c1", {2: "not enacted: help=decline"}),
        ("c2", {4: "low realism: not"}),
        ("c4", {}),
    ):
        app = BranchpointApp(store, conversation=cid)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, TranscriptScreen)
            assert [v.turn.index for v in screen.views] == [0, 1, 2, 3, 4, 5]
            for view in screen.views:
                header = turn_header(view.turn, flags=view.flags).plain
                expected = marks.get(view.turn.index)
                if expected is None:
                    assert "not enacted" not in header and "low realism" not in header, header
                else:
                    assert expected in header
            shown = drawn_text(screen)
            for text in marks.values():
                assert shown.count(text) == 1
            if not marks:
                assert "not enacted" not in shown and "low realism" not in shown
    store.close()


@pytest.mark.slow
async def test_no_persona_ratings_no_marks_and_filters_match_nothing(tmp_path: Path) -> None:
    store = small_teen_store(tmp_path / "t.db")
    app = BranchpointApp(store, page_size=10)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, BrowseScreen)
        first = screen.page.rows[0].id
        for line in ("enacted:no", "realism:low", "enacted:no realism:low"):
            await pilot.press("slash", *line, "enter")
            await settle(pilot)
            assert screen.page.total == 0 and screen.page.rows == [], line
            await pilot.press("escape")
        await settle(pilot)
    app = BranchpointApp(store, conversation=first)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        text = drawn_text(app.screen)
        assert app.screen.views and "not enacted" not in text and "low realism" not in text
    store.close()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("enacted:no", {"c1"}),
        ("realism:low", {"c2", "c3"}),
        ("enacted:no realism:low", set()),
        ("realism:low scenario:scn", {"c2", "c3"}),
    ],
)
@pytest.mark.slow
async def test_filter_keeps_exactly_the_flagged_conversations(
    tmp_path: Path, line: str, expected: set[str]
) -> None:
    store = _flag_store(tmp_path / "f.db", RATINGS)
    app = BranchpointApp(store, page_size=10)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, BrowseScreen)
        assert screen.page.total == 4
        await pilot.press("slash", *line, "enter")
        await settle(pilot)
        assert {r.id for r in screen.page.rows} == expected
        assert screen.page.total == len(expected)
    store.close()


def test_flag_filters_take_one_value_each() -> None:
    f = parse_filter("enacted:no realism:low")
    assert (f.not_enacted, f.low_realism) == (True, True)
    assert (parse_filter("fails:x").not_enacted, parse_filter("").low_realism) == (False, False)
    with pytest.raises(FilterError, match=r"enacted: 'yes' \(expected enacted:no\)"):
        parse_filter("enacted:yes")
    with pytest.raises(FilterError, match=r"realism: 'mostly' \(expected realism:low\)"):
        parse_filter("realism:mostly")


async def test_the_marked_option_is_shown_literally(tmp_path: Path) -> None:
    store = _flag_store(
        tmp_path / "f.db", [("c1", 2, E, "help", "heuristic", "not_enacted", 1)], option=HOSTILE
    )
    app = BranchpointApp(store, conversation="c1")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        header = turn_header(app.screen.views[2].turn, flags=app.screen.views[2].flags)
        assert "not enacted: help=[bold red]LOUD[/]" in header.plain
        assert "\x1b" not in header.plain
    store.close()


def _runs_listing(db: Path) -> str:
    env = {**os.environ, "COLUMNS": "200", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(
        [sys.executable, "-m", "branchpoint.tui.cli", "runs", "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_runs_counts_not_enacted_and_low_realism_turns(tmp_path: Path) -> None:
    _flag_store(tmp_path / "f.db", RATINGS).close()
    listing = _runs_listing(tmp_path / "f.db")
    assert "not enacted" in listing and "low realism" in listing
    line = next(ln for ln in listing.splitlines() if ln.strip().startswith("r1 "))
    # c1..c4: one of four checked branch-point turns not enacted; two of seven rated turns low
    assert "1/4" in line.split() and "2/7" in line.split()


def test_runs_without_persona_ratings_shows_dashes(tmp_path: Path) -> None:
    small_teen_store(tmp_path / "t.db").close()
    listing = _runs_listing(tmp_path / "t.db")
    line = next(ln for ln in listing.splitlines() if ln.strip().startswith("synthetic-teen "))
    # reserved, not enacted, low realism, then the created date and time
    assert line.split()[-5:-2] == ["-", "-", "-"], line


async def test_the_live_view_counts_not_enacted_and_low_realism_turns(tmp_path: Path) -> None:
    from branchpoint.tui.app.screens.live import LiveScreen

    store = _flag_store(tmp_path / "f.db", RATINGS)
    app = BranchpointApp(store, live_run="r1")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, LiveScreen)
        # the same counts as `runs` (1/4, 2/7), in the words of the run and sweep summaries, on
        # a line of their own that 80 columns show whole
        run = app.screen.query_one("#run")
        lines = str(run.render()).splitlines()
        assert lines[-1] == "persona turns: 1 of 4 checks not enacted, 2 of 7 low in realism"
        assert run.size.height == 2 and len(lines[-1]) <= run.size.width, (run.size, lines)
    store.close()


def test_the_summaries_say_nothing_of_persona_turns_without_ratings(tmp_path: Path) -> None:
    from branchpoint.core.read.persona_flags import persona_flags_line

    store = small_teen_store(tmp_path / "t.db")
    assert persona_flags_line(store, "synthetic-teen") is None
    store.close()
    flagged = _flag_store(tmp_path / "f.db", RATINGS)
    assert persona_flags_line(flagged, "r1") == (
        "persona turns: 1 of 4 checks not enacted, 2 of 7 low in realism"
    )
    flagged.close()
