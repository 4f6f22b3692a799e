"""The sweep's live view: the monitor's figures on a real sweep (a real SQLite store, the scripted
models of tests/fixtures/sweep/sweep_plugin.py, one target that always fails), and what the view
draws on a recorded rich Console, literally."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

from rich.console import Console
from test_sweep_cli import SWEEP, write

from branchpoint.gateway.completion import ModelError
from branchpoint.study.monitor import (
    JudgingFigures,
    MonitorSnapshot,
    ProviderFigures,
    SweepMonitor,
    TargetFigures,
)
from branchpoint.tui.commands.live_view import LiveView, plain_line, render

if str(SWEEP) not in sys.path:
    sys.path.insert(0, str(SWEEP))


def _store_counts(store: object, sweep_id: str) -> dict[str, dict[str, int]]:
    from sqlalchemy import text

    out: dict[str, dict[str, int]] = {}
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        for target, status, n in conn.execute(
            text(
                "select target, status, count(*) from conversations where run_id = :r "
                "group by target, status"
            ),
            {"r": sweep_id},
        ):
            out.setdefault(target, {})[status] = n
    return out


def _store_spend(store: object, sweep_id: str) -> dict[str, tuple[int, int]]:
    from sqlalchemy import text

    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        return {
            t: (int(n), int(tok))
            for t, n, tok in conn.execute(
                text(
                    "select c.target, count(*), sum(m.tokens_in + m.tokens_out) from model_calls m "
                    "join conversations c on c.id = m.conversation_id where m.run_id = :r "
                    "group by c.target"
                ),
                {"r": sweep_id},
            )
        }


def _store_turns(store: object, sweep_id: str) -> int:
    from sqlalchemy import text

    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(
            conn.execute(
                text(
                    "select count(*) from turns t join conversations c on c.id = "
                    "t.conversation_id where c.run_id = :r"
                ),
                {"r": sweep_id},
            ).scalar_one()
        )


def test_the_monitor_counts_what_the_store_holds_during_and_after_a_sweep(tmp_path: Path) -> None:
    import sweep_plugin

    from branchpoint.core.store import open_store
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.gateway.providers.scripted import ScriptedModel
    from branchpoint.study.manifest import load_manifest, sweep_id_for
    from branchpoint.study.plan import plan_sweep
    from branchpoint.study.run import run_sweep

    manifest_file = write(
        tmp_path / "study.yaml", ["scripted:slow", "scripted:broken"], replicates=2
    )
    manifest = load_manifest(manifest_file)
    sweep_id = sweep_id_for(manifest, manifest_file)
    store = open_store(str(tmp_path / "results.db"))
    plan = plan_sweep(manifest, manifest_file, sweep_id, store=store, with_keys=False)
    planned: dict[str, list[str]] = {}
    for _, run_plan in plan.runs:
        for tree in run_plan.trees:
            planned.setdefault(tree.target, []).extend(a.conversation_id for a in tree.arms)
    monitor = SweepMonitor(store, sweep_id, planned, interval_s=0.05, judging_planned=1)
    seen: list[MonitorSnapshot] = []
    checked: list[str] = []

    async def main() -> None:
        gateway = Gateway(store=store, max_attempts=1, write_behind=True)
        sweep_plugin.register(gateway)
        gateway.register("scripted:slow", ScriptedModel(default=sweep_plugin.QUIET, delay_s=0.1))
        gateway.register("scripted:broken", ScriptedModel(default=ModelError("down")))

        async def target_done(ids: list[str]) -> None:
            # this target's trees are done and committed: the monitor's figures are the store's
            await asyncio.to_thread(monitor.refresh)
            counts = _store_counts(store, sweep_id)
            for t in monitor.snapshot().targets:
                if set(planned[t.target]) <= set(ids):
                    got = counts.get(t.target, {})
                    assert (t.done, t.failed) == (got.get("completed", 0), got.get("failed", 0))
                    assert t.done + t.failed == t.planned and t.running == 0
                    checked.append(t.target)

        async def sample() -> None:
            while True:
                seen.append(monitor.snapshot())
                await asyncio.sleep(0.03)

        sampler = asyncio.create_task(sample())
        try:
            await run_sweep(
                plan, store, gateway=gateway, on_target_done=target_done, monitor=monitor
            )
        finally:
            sampler.cancel()
            await gateway.aclose()

    asyncio.run(main())
    assert sorted(checked) == sorted(planned)
    final = monitor.snapshot()
    counts, spend = _store_counts(store, sweep_id), _store_spend(store, sweep_id)
    by_target = {t.target: t for t in final.targets}
    assert (
        by_target["scripted:slow"].done
        == counts["scripted:slow"]["completed"]
        == len(planned["scripted:slow"])
    )
    assert by_target["scripted:broken"].failed == counts["scripted:broken"]["failed"] > 0
    for target, (n, tokens) in spend.items():
        assert (by_target[target].calls, by_target[target].tokens) == (n, tokens)
    assert final.tokens == sum(tok for _, tok in spend.values()) > 0
    assert final.turns_done == _store_turns(store, sweep_id) > 0 and final.eta_s == 0.0
    # while it ran, the oldest running conversation was one of the planned ones
    running = [s.oldest_running for s in seen if s.oldest_running is not None]
    assert running and all(
        r[0] in planned["scripted:slow"] + planned["scripted:broken"] for r in running
    )
    assert any(s.calls_per_s > 0 for s in seen)
    store.close()


def _snapshot(**overrides: object) -> MonitorSnapshot:
    base: dict[str, object] = dict(
        sweep_id="teen-study",
        elapsed_s=75.0,
        turns_done=120,
        turns_total=480,
        calls=130,
        calls_per_s=2.5,
        tokens=45_000,
        usd=0.1234,
        eta_s=225.0,
        targets=[
            TargetFigures("litellm:openai/gpt-4o-mini", 40, 10, 4, 1, 60, 30_000, 0.1),
            TargetFigures("[red]x[/red]", 40, 3, 2, 0, 20, 15_000, 0.0234),
        ],
        providers=[ProviderFigures("litellm:openai", 7, 8, 10, 3, 1.5)],
        oldest_running=("3f2a9c1d0b", 42.0),
        judging=[
            JudgingFigures("heuristic/teen live on [bold]y", "live", 15, "done", 300, 2),
            JudgingFigures("litellm:openai/gpt-4o/teen after", "after", 80),
        ],
        judging_planned=3,
        refreshed=True,
    )
    return MonitorSnapshot(**(base | overrides))  # type: ignore[arg-type]


def test_the_view_shows_each_row_and_names_literally() -> None:
    console = Console(record=True, width=160, color_system=None)
    console.print(render(_snapshot()))
    out = console.export_text()
    lines = out.splitlines()
    assert "sweep teen-study" in lines[0] and "turns stored 120" in lines[0]
    assert "13 done, 1 failed, 6 running of 80 conversations (18%)" in lines[0]
    assert "2.5 calls/s" in lines[0] and "45,000 tokens" in lines[0] and "$0.1234" in lines[0]
    assert "ETA 3m45s" in lines[0] and "elapsed 1m15s" in lines[0]
    row = next(ln for ln in lines if ln.startswith("litellm:openai/gpt-4o-mini"))
    assert row.split() == ["litellm:openai/gpt-4o-mini", "10/40", "4", "1", "25", "60", "30,000",
                           "$0.1000"]  # fmt: skip
    # rich markup in a name is shown as its characters, never interpreted
    marked = next(ln for ln in lines if ln.startswith("[red]x[/red]"))
    assert marked.split()[1:4] == ["3/40", "2", "0"] and marked.split()[-1] == "$0.0234"
    provider = next(ln for ln in lines if ln.startswith("litellm:openai "))
    assert provider.split() == ["litellm:openai", "7", "8", "10", "3", "2s"]
    assert "oldest running: 3f2a9c1d0b (42s)" in out
    assert (
        "judging: 1 of 3 passes done, 2 error verdict(s); now litellm:openai/gpt-4o/teen after"
        in out
    )
    assert "[bold]y" not in out  # a finished pass is counted, not listed

    styled = Console(record=True, width=160, force_terminal=True, color_system="truecolor")
    styled.print(render(_snapshot()))
    assert "[red]x[/red]" in styled.export_text(styles=False)


def test_plain_progress_lines_off_a_terminal(tmp_path: Path) -> None:
    line = plain_line(_snapshot())
    assert line == (
        "sweep teen-study: 13 done, 1 failed, 6 running of 80 conversations (18%); turns stored "
        "120; 2.5 calls/s, 45,000 tokens, $0.1234; 429s 3; elapsed 1m15s, ETA 3m45s"
    )

    class Fixed:
        def snapshot(self) -> MonitorSnapshot:
            return _snapshot(targets=[TargetFigures("a\x1b[2Jb", 1)])

    buffer = io.StringIO()
    console = Console(file=buffer, width=80)  # not a terminal: plain lines, no Live display
    with LiveView(Fixed(), console, plain_every_s=0.05):  # type: ignore[arg-type]
        import time

        time.sleep(0.3)
    printed = buffer.getvalue().splitlines()
    assert len(printed) >= 3 and all(
        p.startswith("sweep teen-study: 0 done, 0 failed, 0 running of 1 ") for p in printed
    )
    assert "\x1b" not in buffer.getvalue()


def test_the_monitor_keeps_judging_passes_in_order() -> None:
    monitor = SweepMonitor(None, "s", {"t": ["a", "b"]}, judging_planned=2)  # type: ignore[arg-type]
    monitor.judge_started("heuristic/teen live on t", "live", 2)
    snap = monitor.snapshot()
    assert [(j.label, j.state) for j in snap.judging] == [("heuristic/teen live on t", "running")]
    monitor.judge_finished("heuristic/teen live on t", rows=40, errors=1)
    monitor.judge_started("judge/teen after", "after", 2)
    snap = monitor.snapshot()
    assert [(j.state, j.rows, j.errors) for j in snap.judging] == [
        ("done", 40, 1),
        ("running", 0, 0),
    ]
    assert snap.targets == [TargetFigures("t", 2)] and not snap.refreshed


def test_on_a_terminal_the_view_is_a_live_display_of_the_snapshot() -> None:
    class Fixed:
        def snapshot(self) -> MonitorSnapshot:
            return _snapshot()

    buffer = io.StringIO()
    console = Console(file=buffer, width=160, force_terminal=True, color_system=None)
    with LiveView(Fixed(), console):  # type: ignore[arg-type]
        pass
    out = buffer.getvalue()
    assert "litellm:openai/gpt-4o-mini" in out and "[red]x[/red]" in out
    assert "oldest running: 3f2a9c1d0b (42s)" in out
    assert "sweep teen-study: 13 done" not in out  # the plain line is for logs only
