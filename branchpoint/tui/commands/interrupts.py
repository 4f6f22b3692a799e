"""Long commands stop cleanly on SIGINT and SIGTERM: the work is cancelled (the runner marks what
was running as interrupted), a line says how to continue, and the process exits 130."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until_signalled(
    work: Callable[[], Awaitable[T]], on_interrupt: Callable[[str], None]
) -> T:
    """``await work()``; a SIGINT or SIGTERM cancels it, calls ``on_interrupt(signal name)`` and
    exits 130 at once: a local model's generate thread cannot be interrupted and would hold the
    process for minutes."""
    loop = asyncio.get_running_loop()
    current = asyncio.current_task()
    assert current is not None
    received: list[str] = []

    def stop(name: str) -> None:
        received.append(name)
        current.cancel(msg=f"received {name}")

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop, sig.name)
        except (NotImplementedError, RuntimeError):  # not the main thread, or Windows
            pass
    try:
        return await work()
    except asyncio.CancelledError:
        if not received:
            raise
        on_interrupt(received[0])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
