"""How branchpoint runs a sweep's event loop: uvloop where it is installed, and a tuned collector.

At hundreds of calls in flight the engine is bound by its own CPU on one core (see
``benchmarks/throughput.py``): uvloop's event loop costs less a callback than asyncio's, and the
cyclic garbage collector, left at its defaults, rescans the long-lived heap (imports, scenarios,
conversation histories) every few hundred allocations. ``BRANCHPOINT_EVENT_LOOP=asyncio`` runs
the standard loop instead (for debugging, or to compare).
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# gen0 collects after this many net allocations instead of 700: a sweep allocates a few small
# objects per message, nearly all freed by reference counting, so a young collection rarely finds
# cycles to free (measured: 10-15% less CPU a model call, peak RSS unchanged)
GC_THRESHOLDS = (200_000, 50, 1000)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None (asyncio's default) where uvloop is absent or declined."""
    if os.environ.get("BRANCHPOINT_EVENT_LOOP", "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # not installed (Windows has none): the standard loop does the same work
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop ``loop_factory`` gives, with the collector tuned while it
    runs: what is alive at the start (modules, loaded scenarios) is frozen out of the collector's
    sight, and young collections are rarer. Both are undone at the end, so that a process that
    runs many sweeps (a notebook, a test suite) can still collect what each one left."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return runner.run(main)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
