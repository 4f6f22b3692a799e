"""What LangGraph costs a conversation group, apart from the group's own work.

Each conversation group is one invocation of the compiled graph (``branchpoint.simulator.graph.run_group``):
its exchanges run inside one super-step, so LangGraph's cost is per group, not per exchange. This
times invocations whose group stops at once (a conversation already at its last exchange: the
route says ``max_turns``, no model is called), against the same ``exchanges`` step called
without the graph, one at a time and 256 at once, on uvloop as a sweep runs.

    python benchmarks/graph_overhead.py [--groups 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from branchpoint.gateway import event_loop
from branchpoint.simulator.graph import ConvState, exchanges, initial_state, run_group

MAX_TURNS = 10


def finished_state() -> ConvState:
    return ConvState(**{**initial_state(), "exchange": MAX_TURNS})


async def timed(one: Any, groups: int, concurrency: int) -> float:
    """Best of 3: seconds per group."""
    best = float("inf")
    for _ in range(3):
        gate = asyncio.Semaphore(concurrency)

        async def gated(gate: asyncio.Semaphore = gate) -> None:
            async with gate:
                await one()

        started = time.perf_counter()
        await asyncio.gather(*(gated() for _ in range(groups)))
        best = min(best, time.perf_counter() - started)
    return best / groups


async def main(groups: int) -> None:
    ctx = SimpleNamespace(max_turns=MAX_TURNS)  # all that a stopping route reads
    config: Any = {"configurable": {"ctx": ctx}}

    async def graph() -> None:
        final = await run_group(finished_state(), ctx)  # type: ignore[arg-type]
        assert final["stop_reason"] == "max_turns"

    async def direct() -> None:
        final = await exchanges(finished_state(), config)
        assert final["stop_reason"] == "max_turns"

    await timed(graph, 50, 1)  # compile the graph, warm the caches
    for concurrency in (1, 256):
        through = await timed(graph, groups, concurrency)
        alone = await timed(direct, groups, concurrency)
        print(
            f"{concurrency:>3} at once: {through * 1e6:7.0f} us a group through LangGraph, "
            f"{alone * 1e6:5.0f} us without it: LangGraph adds {(through - alone) * 1e6:.0f} us"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2000)
    event_loop.run(main(parser.parse_args().groups))
