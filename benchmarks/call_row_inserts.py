"""Model-call rows into a growing store: random ids against the time-ordered ones the gateway makes.

    python benchmarks/call_row_inserts.py [--rows 600000] [--step 200000]

Writes ``model_calls`` rows through the store's writer thread (the engine's write path: the
gateway's insert statement, groups committed by ``BatchWriter``) into a fresh SQLite store, once
with ids of 32 random hex digits (what the gateway made before) and once with
``branchpoint.gateway.call_ids.new_call_id``. Prints CPU and wall microseconds per row over each
``--step`` rows: a random primary key inserts at a random place of an index that outgrows
SQLite's page cache as the table grows (a teen-study run is about 650,000 calls).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from branchpoint.core.records import utcnow  # noqa: E402
from branchpoint.core.store import open_store  # noqa: E402
from branchpoint.gateway.call_ids import new_call_id  # noqa: E402
from branchpoint.gateway.gateway import _INSERT_MODEL_CALL  # noqa: E402
from branchpoint.gateway.write_behind import RANK_MODEL_CALL, Write, shared_writer  # noqa: E402


def measure(make_id: Callable[[], str], rows: int, step: int) -> list[tuple[int, float, float]]:
    store = open_store(Path(tempfile.mkdtemp()) / "calls.db")
    writer = shared_writer(store)
    conversations = [os.urandom(16).hex() for _ in range(32_000)]
    figures = []
    try:
        for start in range(0, rows, step):
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(start, min(start + step, rows)):
                values = dict(
                    id=make_id(),
                    run_id="run-bench",
                    conversation_id=conversations[(i // 19) % len(conversations)],
                    purpose="target",
                    model="oai:bench",
                    params={"seed": i},
                    request_hash=os.urandom(32).hex(),
                    messages=[],
                    prompt=[{"turns": [i - 2, i - 1]}],
                    text="a reply of a few sentences " * 10,
                    reasoning=None,
                    tokens_in=400,
                    tokens_out=60,
                    cost=None,
                    latency_s=0.1,
                    finish_reason="stop",
                    provider_request_id=None,
                    cached=False,
                    attempts=1,
                    error=None,
                    created_at=utcnow(),
                )
                writer.submit(Write([(RANK_MODEL_CALL, _INSERT_MODEL_CALL, [values])]))
            writer.wait_idle()
            n = min(start + step, rows) - start
            figures.append(
                (
                    start + n,
                    (time.process_time() - cpu) * 1e6 / n,
                    (time.perf_counter() - wall) * 1e6 / n,
                )
            )
    finally:
        store.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--step", type=int, default=200_000)
    args = parser.parse_args()
    for name, make_id in (
        ("random ids", lambda: os.urandom(16).hex()),
        ("time-ordered ids", new_call_id),
    ):
        for upto, cpu_us, wall_us in measure(make_id, args.rows, args.step):
            print(
                f"{name:>16}: rows up to {upto:>7,}: {cpu_us:5.1f} us CPU, {wall_us:5.1f} us wall a row"
            )


if __name__ == "__main__":
    main()
