"""The live view follows a real run as the runner writes to the store."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fixtures.engine import engine_plugin
from fixtures.engine.helpers import HERE, run_engine
from fixtures.tui.helpers import settle
from textual.widgets import DataTable

from branchpoint.core.store import open_store
from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.app.screens.live import LiveScreen

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_the_live_view_updates_as_rows_arrive(tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    viewer = open_store(db)
    app = BranchpointApp(viewer, live_run="")  # "": whichever run is running
    seen: list[tuple[str, ...]] = []
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, LiveScreen)
        assert "no run" in str(screen.query_one("#run").render())

        def run() -> None:
            writer = open_store(db)  # its own connection, as a separate runner process would have
            run_engine(writer, HERE / "at_turn.yaml", bot=engine_plugin.make_bot(delay_s=0.25))
            writer.close()

        runner = threading.Thread(target=run)
        runner.start()
        table = screen.query_one("#targets", DataTable)
        for _ in range(120):
            await pilot.pause(0.25)
            row = screen.cells.get("scripted:bot")
            if row and (not seen or seen[-1] != row):
                seen.append(row)
            if not runner.is_alive() and row and row[1] == "2":
                break
        runner.join(60)
        await pilot.pause(screen.INTERVAL_S + 0.2)
        await settle(pilot)
        final = screen.cells["scripted:bot"]
        assert final[1] == "2" and final[3] == "0"  # both arms done, none failed
        assert any(r[1] != "2" for r in seen), f"never saw the run in progress: {seen}"
        assert table.row_count == 1  # updated in place, not rebuilt
        assert "completed" in str(screen.query_one("#run").render())
        assert screen.polls >= 3
    viewer.close()


@pytest.mark.slow
async def test_the_live_view_shows_only_the_selected_run(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from branchpoint.core.records import Conversation, Run

    db = tmp_path / "two.db"
    store = open_store(db)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    targets = {"old-run": ("scripted:old1", "scripted:old2"), "new-run": ("scripted:new",)}
    with store.session() as s:
        for i, (run_id, names) in enumerate(targets.items()):
            s.add(Run(id=run_id, status="completed", created_at=t0 + timedelta(hours=i)))
            s.flush()
            for target in names:
                s.add(
                    Conversation(
                        id=f"{run_id}:{target}",
                        run_id=run_id,
                        scenario_id="scn",
                        scenario_hash="h",
                        variant_id="v",
                        target=target,
                        status="completed",
                    )
                )
        s.commit()
    app = BranchpointApp(store, live_run="old-run")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, LiveScreen)
        table = screen.query_one("#targets", DataTable)
        assert set(screen.cells) == set(targets["old-run"]) and table.row_count == 2
        assert screen.run_ids == ["new-run", "old-run"]  # newest first
        await pilot.press("left_square_bracket")  # the newer run
        await settle(pilot)
        await pilot.pause(screen.INTERVAL_S + 0.2)  # a poll later it is still the one chosen
        await settle(pilot)
        assert screen.shown_run == "new-run"
        assert set(screen.cells) == {"scripted:new"} and table.row_count == 1
        assert "new-run" in str(screen.query_one("#run").render())
        await pilot.press("left_square_bracket")  # wraps round to the oldest
        await settle(pilot)
        assert screen.shown_run == "old-run" and table.row_count == 2
    store.close()


async def test_following_the_latest_run_replaces_the_finished_runs_rows(tmp_path: Path) -> None:
    import sqlite3
    from datetime import UTC, datetime, timedelta

    from branchpoint.core.records import Conversation, Run

    db = tmp_path / "follow.db"
    store = open_store(db)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def add_run(run_id: str, target: str, at: datetime) -> None:
        with store.session() as s:
            s.add(Run(id=run_id, status="running", created_at=at, updated_at=at))
            s.flush()
            s.add(
                Conversation(
                    id=f"{run_id}:c",
                    run_id=run_id,
                    scenario_id="scn",
                    scenario_hash="h",
                    variant_id="v",
                    target=target,
                    status="running",
                )
            )
            s.commit()

    add_run("first", "scripted:first", t0)
    app = BranchpointApp(store, live_run="")  # follow whichever run is running
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert set(screen.cells) == {"scripted:first"}
        with sqlite3.connect(db) as conn:  # the first run ends, a second starts
            conn.execute("UPDATE runs SET status = 'completed' WHERE id = 'first'")
        add_run("second", "scripted:second", t0 + timedelta(hours=1))
        await pilot.pause(screen.INTERVAL_S + 0.3)
        await settle(pilot)
        assert screen.shown_run == "second"
        assert set(screen.cells) == {"scripted:second"}
        assert screen.query_one("#targets", DataTable).row_count == 1
    store.close()
