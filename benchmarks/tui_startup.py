"""Startup benchmark of ``branchpoint tui``: the first screen on a store of 35,000 conversations.

    .venv/bin/python benchmarks/tui_startup.py [--db /tmp/branchpoint-bench/tui_startup.db]
        [--rebuild] [--repeat 3]

Builds (once, cached under /tmp) a synthetic teen store with ``branchpoint.analysis.testing.synthetic``:
438 scenarios x 4 arms x 10 targets x 2 conditions = 35,040 conversations, 8 exchanges each
(560,640 turns, 1.68 million judgments). Then, in a fresh Python process each time (so imports
count), times from process start to the first page of conversations on screen (headless, 80x24),
and prints which heavy packages that process had imported (none should be). It also times the
work behind a few keys on that store: the next page, sort by failures, a filter on a failing
criterion, opening a transcript, stepping one turn, and jumping to the next failure.
Target: the first screen in under 1.5 s, every key under 1 s (issue 37).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_DB = Path("/tmp/branchpoint-bench/tui_startup.db")
N_SCENARIOS = 438
HEAVY = ("pandas", "numpy", "torch", "transformers", "litellm", "matplotlib", "scipy")


def build(path: Path) -> None:
    from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store

    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    write_teen_store(path, TeenDesign(n_scenarios=N_SCENARIOS), seed=0)
    print(f"built {path} in {time.perf_counter() - t0:.1f} s")


def child(db: str, started: float) -> None:
    """Runs in the fresh process: open the app and wait for its first page."""
    import asyncio

    async def main() -> dict[str, object]:
        from branchpoint.core.store import open_store
        from branchpoint.tui.app.app import BranchpointApp

        store = open_store(db, create=False)
        app = BranchpointApp(store)
        async with app.run_test(size=(80, 24)) as pilot:
            while getattr(app.screen, "page", None) is None:
                await pilot.pause(0.005)
            await pilot.pause()
            first = time.time() - started
            heavy = sorted(m for m in HEAVY if m in sys.modules)
            total = app.screen.page.total  # type: ignore[attr-defined]
        store.close()
        return {"first_screen_s": first, "heavy_imports": heavy, "conversations": total}

    print(json.dumps(asyncio.run(main())))


def drop_page_cache() -> bool:
    """Empty the OS page cache (Linux, as root), so that a query reads the store from disk as a
    first look at a big store does; False where that is not allowed."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return False
    return True


def key_timings(db: Path, cold: bool = False) -> dict[str, float]:
    """Wall time of the queries behind the keys, on the same store (in this process); ``cold``:
    each with the page cache emptied first."""
    from branchpoint.core.read.browse import (
        ConversationFilter,
        conversations_page,
        find_failure,
        get_transcript,
    )
    from branchpoint.core.store import open_store

    store = open_store(db, create=False)
    out: dict[str, float] = {}

    def timed(name: str, fn):  # type: ignore[no-untyped-def]
        if cold:
            drop_page_cache()
        t0 = time.perf_counter()
        value = fn()
        out[name] = time.perf_counter() - t0
        return value

    timed("page 2 (]) s", lambda: conversations_page(store, ConversationFilter(), 50, 50))
    timed(
        "sort by failures (s) s",
        lambda: conversations_page(store, ConversationFilter(sort="failures"), 0, 50),
    )
    page = timed(
        "filter fails:no_diagnosis s",
        lambda: conversations_page(store, ConversationFilter(failing="no_diagnosis"), 0, 50),
    )
    cid = page.rows[0].id
    timed("open a transcript s", lambda: get_transcript(store, cid))
    timed("next failure (n) s", lambda: find_failure(store, cid, -1))
    store.close()
    return out


async def _step_time(db: Path) -> tuple[float, float]:
    """Seconds per ``j`` through the pilot, and per key that nothing is bound to (the pilot's own
    round trip, to subtract)."""
    from branchpoint.core.store import open_store
    from branchpoint.tui.app.app import BranchpointApp

    store = open_store(db, create=False)
    cid = store.engine.connect().exec_driver_sql("SELECT id FROM conversations LIMIT 1").scalar()
    app = BranchpointApp(store, conversation=cid)
    async with app.run_test(size=(80, 24)) as pilot:
        while not getattr(app.screen, "views", None):
            await pilot.pause(0.01)
        await pilot.pause(0.5)
        t0 = time.perf_counter()
        for _ in range(10):
            await pilot.press("j")
        step = (time.perf_counter() - t0) / 10
        t0 = time.perf_counter()
        for _ in range(10):
            await pilot.press("x")
        idle = (time.perf_counter() - t0) / 10
    store.close()
    return step, idle


async def _screen_times(db: Path) -> dict[str, float]:
    """Seconds from each key to its screen drawn with its data, through the pilot at 80x24."""
    from branchpoint.core.store import open_store
    from branchpoint.tui.app.app import BranchpointApp

    store = open_store(db, create=False)
    app = BranchpointApp(store, annotator="tui-startup-benchmark", sample_size=30, seed=0)
    out: dict[str, float] = {}

    async def settled(pilot) -> None:  # type: ignore[no-untyped-def]
        for _ in range(3):
            await pilot.pause()
            await app.workers.wait_for_complete()
        await pilot.pause()

    async def timed(name: str, pilot, *keys: str) -> None:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        await pilot.press(*keys)
        await settled(pilot)
        out[name] = time.perf_counter() - t0

    t0 = time.perf_counter()
    async with app.run_test(size=(80, 24)) as pilot:
        while getattr(app.screen, "page", None) is None:
            await pilot.pause(0.005)
        await pilot.pause()
        out["first screen (app start to first page, in process)"] = time.perf_counter() - t0
        await timed("next page (])", pilot, "right_square_bracket")
        await timed("sort by failures (s)", pilot, "s")
        await pilot.press("slash")
        for ch in "fails:no_diagnosis":
            await pilot.press(ch)
        await timed("filter by failing criterion (fails:no_diagnosis)", pilot, "enter")
        await timed("open transcript (enter)", pilot, "enter")
        await pilot.press("escape")
        await settled(pilot)
        await timed("compare (c)", pilot, "c")
        await pilot.press("escape")
        await settled(pilot)
        # A labelling screen is ready when its first item is drawn (``_start``). The first draw
        # also writes the design to the store, which makes the browse list behind it refresh in
        # its own worker; "until idle" waits for that too.
        from branchpoint.tui.app.screens.label import LabelScreen

        started: list[float] = []
        start = LabelScreen._start

        def timed_start(screen: LabelScreen, *args: Any) -> None:
            start(screen, *args)
            started.append(time.perf_counter())

        LabelScreen._start = timed_start  # type: ignore[method-assign]
        for name, key in (
            ("L (blind labelling sample of 30)", "L"),
            ("R (realism sample of 30)", "R"),
        ):
            started.clear()
            t0 = time.perf_counter()
            await pilot.press(key)
            while not started:
                await pilot.pause(0.005)
            out[name] = started[0] - t0
            await settled(pilot)
            out[f"{key}, until the app is idle"] = time.perf_counter() - t0
            if key == "L":
                for label in "11111":  # five labels, for the agreement screen
                    await pilot.press(label)
                    await settled(pilot)
            await pilot.press("escape")
            await settled(pilot)
        LabelScreen._start = start  # type: ignore[method-assign]
        # The agreement screen draws its table as soon as it is computed; the judge-corrected
        # rates below it come from their own worker (a pass over every judged item), timed apart.
        # The pilot's press returns only once the app is idle, after that worker has started, so
        # the table's moment is taken where it is drawn.
        from branchpoint.tui.app.screens.agreement import AgreementScreen

        drawn: list[float] = []
        show = AgreementScreen._show

        def timed_show(screen: AgreementScreen, rows: Any, note: str) -> None:
            show(screen, rows, note)
            drawn.append(time.perf_counter())

        AgreementScreen._show = timed_show  # type: ignore[method-assign]
        t0 = time.perf_counter()
        await pilot.press("A")
        while not drawn:
            await pilot.pause(0.005)
        out["A (agreement table)"] = drawn[0] - t0
        await settled(pilot)
        out["A (judge-corrected rates below it, own worker)"] = time.perf_counter() - t0
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--screens-only", action="store_true", help="only the pilot timings of the screens"
    )
    parser.add_argument("--child", nargs=2, metavar=("DB", "STARTED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], float(args.child[1]))
        return
    if args.rebuild or not args.db.exists():
        args.db.unlink(missing_ok=True)
        build(args.db)
    if args.screens_only:
        import asyncio

        for name, seconds in asyncio.run(_screen_times(args.db)).items():
            print(f"{name}: {seconds:.3f} s")
        return
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1")
    figures = []
    for _ in range(args.repeat):
        started = time.time()
        result = subprocess.run(
            [sys.executable, __file__, "--child", str(args.db), repr(started)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        figures.append(json.loads(result.stdout.strip().splitlines()[-1]))
    times = sorted(float(f["first_screen_s"]) for f in figures)
    print(f"store: {args.db} ({figures[0]['conversations']} conversations)")
    print(
        f"first screen (process start to first page, headless 80x24): "
        f"median {times[len(times) // 2]:.2f} s, best {times[0]:.2f} s, worst {times[-1]:.2f} s "
        f"over {len(times)} runs (target < 1.5 s)"
    )
    print(f"heavy packages imported by then: {figures[0]['heavy_imports'] or 'none'}")
    for name, seconds in key_timings(args.db).items():
        print(f"{name}: {seconds:.3f}")
    if drop_page_cache():
        print("the same, each from a cold page cache (the store read from disk):")
        for name, seconds in key_timings(args.db, cold=True).items():
            print(f"  {name}: {seconds:.3f}")
    import asyncio

    print("through the pilot at 80x24, key to screen drawn with its data (target < 1 s each):")
    for name, seconds in asyncio.run(_screen_times(args.db)).items():
        print(f"  {name}: {seconds:.3f} s")
    step, idle = asyncio.run(_step_time(args.db))
    print(
        f"step one turn (j) through the pilot: {step * 1000:.0f} ms; an unbound key: "
        f"{idle * 1000:.0f} ms; the step itself: {(step - idle) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
