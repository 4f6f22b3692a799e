"""Which process is running a run: a lease on the ``runs`` row, so that two never run it at once.

Two processes resuming the same run would both generate its missing turns. The process that runs a
run writes its owner tag (``host:pid:token``) and refreshes a heartbeat every ``HEARTBEAT_S``.
Another process may take the run over only when the lease is free, when its heartbeat is older than
``STALE_S``, or when its owner ran on this host and that process no longer exists (a ``kill -9``
can then be resumed at once). Taking over is a compare-and-swap on the owner column, so two
processes that race for a free run cannot both win; a new run's row is written with its owner in
one statement that does nothing where the row exists (``create_or_claim``), so two processes
that start the same new run at once cannot both own it either.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import update
from sqlmodel import col

from branchpoint.core.errors import UserError
from branchpoint.core.records import Run, utcnow
from branchpoint.core.store import Store, redact_url

HEARTBEAT_S = 10.0
STALE_S = 60.0
# tests only: seconds to wait after the lease is taken, before the run's bookkeeping starts (the
# window two processes starting the same run at once would race in)
CLAIM_DELAY_ENV = "BRANCHPOINT_TEST_CLAIM_DELAY_S"


_HELD: set[str] = set()  # leases held by this process right now


def owner_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _gone(owner: str) -> bool:
    """True when ``owner`` ran on this host and its process has ended."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return owner not in _HELD  # an earlier call in this process that did not let go
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


def _age_s(heartbeat: datetime | None) -> float:
    if heartbeat is None:
        return float("inf")
    if heartbeat.tzinfo is None:  # SQLite returns naive datetimes (stored as UTC)
        heartbeat = heartbeat.replace(tzinfo=UTC)
    return (utcnow() - heartbeat).total_seconds()


class RunLease:
    """The lease of one run, held from ``claim`` to ``release``; ``keep_alive`` refreshes it."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id, self.owner = store, run_id, owner_tag()

    def claim(self) -> bool:
        """Take the run, or raise UserError naming who holds it; False when there is no such run yet.

        A new run's row is written with ``owner=lease.owner`` and then ``held()`` is called.
        """
        with self.store.session() as s:
            row = s.get(Run, self.run_id)
            if row is None:
                return False
            current, age = row.owner, _age_s(row.heartbeat_at)
        if current is not None and age < STALE_S and not _gone(current):
            host, pid = current.split(":")[:2]
            raise UserError(
                f"run {self.run_id} is being run by process {pid} on {host} (heartbeat {age:.0f}s ago) in "
                f"{redact_url(self.store.url)}; wait for it to finish, or stop it and resume "
                f"(a lease is free {STALE_S:.0f}s after its process stops)"
            )
        owner_is = col(Run.owner).is_(None) if current is None else col(Run.owner) == current
        with self.store.session() as s:
            taken = s.exec(
                update(Run)
                .where(col(Run.id) == self.run_id, owner_is)
                .values(owner=self.owner, heartbeat_at=utcnow())
            ).rowcount
            s.commit()
        if taken != 1:
            raise UserError(
                f"run {self.run_id}: another process took it over just now; try again later"
            )
        self.held()
        return True

    def create_or_claim(self, row: Mapping[str, Any]) -> bool:
        """Take the run: write its row (``row``: the Run's columns) owned by this process where
        there is none, else ``claim`` it (UserError when another live process holds it).
        Returns True when this process created the row.

        The insert does nothing where the row exists (ON CONFLICT DO NOTHING), so of two
        processes that start the same new run at once one creates it and the other finds it
        owned and is refused: there is no moment when the run exists without its owner."""
        if _insert_if_absent(self.store, {**row, "owner": self.owner, "heartbeat_at": utcnow()}):
            self.held()
            created = True
        elif self.claim():
            created = False
        else:  # removed between the insert and the claim
            raise UserError(f"run {self.run_id}: removed by another process just now; try again")
        _test_delay()
        return created

    def held(self) -> None:
        _HELD.add(self.owner)

    def beat(self) -> bool:
        """Refresh the heartbeat; False when the lease was taken over meanwhile."""
        with self.store.session() as s:
            n = s.exec(
                update(Run)
                .where(col(Run.id) == self.run_id, col(Run.owner) == self.owner)
                .values(heartbeat_at=utcnow())
            ).rowcount
            s.commit()
        return n == 1

    async def keep_alive(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            with contextlib.suppress(Exception):  # a missed beat is not fatal; a stale lease is
                await asyncio.to_thread(self.beat)

    def release(self) -> None:
        _HELD.discard(self.owner)
        with contextlib.suppress(Exception), self.store.session() as s:
            s.exec(
                update(Run)
                .where(col(Run.id) == self.run_id, col(Run.owner) == self.owner)
                .values(owner=None, heartbeat_at=None)
            )
            s.commit()


def _insert_if_absent(store: Store, values: Mapping[str, Any]) -> bool:
    """Insert a Run row unless one with its id exists; whether this statement inserted it."""
    table = Run.__table__  # type: ignore[attr-defined]
    if store.engine.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    row = Run(**values)  # the model's defaults (created_at, ...) filled in
    columns = {c.name: getattr(row, c.name) for c in table.columns}
    statement = dialect_insert(table).values(columns).on_conflict_do_nothing(index_elements=["id"])
    with store.engine.begin() as conn:
        return bool(conn.execute(statement).rowcount == 1)


def _test_delay() -> None:
    """Tests only: hold the lease a while before the run's bookkeeping (``CLAIM_DELAY_ENV``)."""
    delay = os.environ.get(CLAIM_DELAY_ENV)
    if delay:
        time.sleep(float(delay))
