"""The loop runs and sweeps use: uvloop where installed (or the standard loop when asked), with
the collector tuned only while it runs, so that a process running many sweeps still collects."""

from __future__ import annotations

import asyncio
import gc

import pytest

from branchpoint.gateway import event_loop


async def _inside() -> tuple[tuple[int, int, int], bool, str]:
    loop = type(asyncio.get_running_loop())
    return gc.get_threshold(), gc.get_freeze_count() > 0, loop.__module__


def test_collector_is_tuned_while_it_runs_and_restored_after() -> None:
    before = gc.get_threshold()
    thresholds, frozen, loop_module = event_loop.run(_inside())
    assert thresholds == event_loop.GC_THRESHOLDS and frozen
    pytest.importorskip("uvloop")
    assert loop_module.startswith("uvloop")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_standard_loop_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRANCHPOINT_EVENT_LOOP", "asyncio")
    _, _, loop_module = event_loop.run(_inside())
    assert loop_module.startswith("asyncio")


def test_an_exception_restores_the_collector_too() -> None:
    before = gc.get_threshold()

    async def fails() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        event_loop.run(fails())
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
