"""Which process is running a run: a lease on the ``runs`` row, so that two never run it at once.

Two processes resuming the same run would both generate its missing turns. The process that runs a
run writes its owner tag (``host:pid:token``) and refreshes a heartbeat every ``HEARTBEAT_S``.
Another process may take the run over only when the lease is free, when its heartbeat is older than
``STALE_S``, or when its owner ran on this host and that process no longer exists (a ``kill -9``
can then be resumed at once). Taking over is a compare-and-swap on the owner column, so two
processes that race for a free run cannot both win.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from datetime import UTC, datetime

from sqlalchemy import update
from sqlmodel import col

from branchpoint.core.errors import UserError
from branchpoint.core.records import Run, utcnow
from branchpoint.core.store import Store, redact_url

HEARTBEAT_S = 10.0
STALE_S = 60.0


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
