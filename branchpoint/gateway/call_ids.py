"""Model-call ids: 32 hex digits, a millisecond clock and then 80 random bits.

A random primary key puts each insert at a random place of the table's key index, and a sweep
inserts a call row for every model call; ids that grow with time append at the index's right
edge. ``benchmarks/call_row_inserts.py`` (the writer thread, SQLite, rows 400,000 to 600,000):
131 us of CPU and 219 us of wall a row with random ids, 100 and 146 with these.

The random bits come from a generator seeded by the OS once per process (and again in a forked
child, which would otherwise repeat its parent's ids), not from ``os.urandom`` per call: that is
a system call that lets go of the GIL, on the event loop.
"""

from __future__ import annotations

import os
import random
import time

_RANDOM = random.Random()  # seeded from os.urandom, as seed() with no argument is
os.register_at_fork(after_in_child=_RANDOM.seed)


def new_call_id() -> str:
    """A fresh id, unique like a uuid4's hex (80 random bits within each millisecond)."""
    return f"{time.time_ns() // 1_000_000:012x}{_RANDOM.getrandbits(80):020x}"
