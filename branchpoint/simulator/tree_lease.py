"""Which worker grows which conversation tree of a distributed sweep: a row lease per tree.

The driver writes one ``tree_leases`` row per tree not finished (``enqueue``). A worker claims
one with ``SELECT ... FOR UPDATE SKIP LOCKED`` (workers racing for rows never wait on each other
and never get the same row), sets itself as owner, status ``running`` and a heartbeat, and
refreshes the heartbeat while it grows the tree (``beat``). A lease whose heartbeat is older than
``stale_s`` is claimable again: its worker died, and the tree is resumed from its stored turns by
whoever takes it. ``beat`` and ``finish`` only touch a lease the caller still owns, so a worker
that lost its lease learns it (``beat`` returns False) and stops writing that tree.

Times are the workers' clocks (UTC); keep ``stale_s`` well above any clock skew in the cluster.
On SQLite ``FOR UPDATE`` is ignored; the compare-and-swap on (status, owner) still keeps two
claims of one row apart, but a sweep on Ray needs PostgreSQL anyway (one file, many machines).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlmodel import col

from branchpoint.core.records import Conversation, TreeLease, utcnow

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.simulator.plan import TreeSpec

_LEASE = TreeLease.__table__  # type: ignore[attr-defined]


def tree_id(spec: TreeSpec) -> str:
    """A tree's stable id: its arms' conversation ids are deterministic, and so is this."""
    key = "\x1f".join(sorted(a.conversation_id for a in spec.arms))
    return "t" + hashlib.sha256(key.encode()).hexdigest()[:15]


@dataclass(frozen=True)
class Claim:
    tree_id: str
    attempts: int
    previous_owner: str | None  # set when the tree was taken over from a silent worker


class TreeLeases:
    """The leases of one run's trees, in ``store``."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id

    def enqueue(self, tree_ids: Iterable[str]) -> int:
        """Make these trees claimable: new rows, or rows of an earlier invocation reset to
        pending (rows of trees not named, finished ones, are kept as they are)."""
        ids = list(dict.fromkeys(tree_ids))
        now = utcnow()
        with self.store.engine.begin() as conn:
            known = {
                r[0]
                for r in conn.execute(
                    select(_LEASE.c.tree_id).where(
                        _LEASE.c.run_id == self.run_id, _LEASE.c.tree_id.in_(ids)
                    )
                )
            }
            fresh = [i for i in ids if i not in known]
            if fresh:
                conn.execute(
                    _LEASE.insert(),
                    [
                        {
                            "run_id": self.run_id,
                            "tree_id": i,
                            "status": "pending",
                            "attempts": 0,
                            "updated_at": now,
                        }
                        for i in fresh
                    ],
                )
            conn.execute(
                update(_LEASE)
                .where(_LEASE.c.run_id == self.run_id, _LEASE.c.tree_id.in_(list(known)))
                .values(status="pending", owner=None, heartbeat_at=None, updated_at=now)
            )
        return len(ids)

    def claim(self, owner: str, stale_s: float) -> Claim | None:
        """Take one pending tree, or one whose holder has not beaten for ``stale_s``; None when
        there is none free right now (others may still be running)."""
        for _ in range(8):  # a lost compare-and-swap (SQLite only) tries the next row
            now = utcnow()
            stale = now - timedelta(seconds=stale_s)
            with self.store.engine.begin() as conn:
                row = conn.execute(
                    select(_LEASE.c.tree_id, _LEASE.c.owner, _LEASE.c.status, _LEASE.c.attempts)
                    .where(
                        _LEASE.c.run_id == self.run_id,
                        or_(
                            _LEASE.c.status == "pending",
                            and_(
                                _LEASE.c.status == "running",
                                or_(
                                    _LEASE.c.heartbeat_at.is_(None),
                                    _LEASE.c.heartbeat_at < stale,
                                ),
                            ),
                        ),
                    )
                    # pending trees first: a tree taken over waits its stale time only once
                    .order_by(_LEASE.c.status, _LEASE.c.tree_id)
                    .limit(1)
                    .with_for_update(skip_locked=True)
                ).first()
                if row is None:
                    return None
                tid, previous, status, attempts = row
                same_owner = (
                    _LEASE.c.owner.is_(None) if previous is None else _LEASE.c.owner == previous
                )
                taken = conn.execute(
                    update(_LEASE)
                    .where(
                        _LEASE.c.run_id == self.run_id,
                        _LEASE.c.tree_id == tid,
                        _LEASE.c.status == status,
                        same_owner,
                    )
                    .values(
                        owner=owner,
                        heartbeat_at=now,
                        status="running",
                        attempts=attempts + 1,
                        updated_at=now,
                    )
                ).rowcount
            if taken == 1:
                return Claim(tid, attempts + 1, previous if status == "running" else None)
        return None

    def beat(self, owner: str, tree: str) -> bool:
        """Refresh the heartbeat; False when the lease is no longer ``owner``'s."""
        with self.store.engine.begin() as conn:
            n = conn.execute(
                update(_LEASE)
                .where(*self._owned(owner, tree), _LEASE.c.status == "running")
                .values(heartbeat_at=utcnow())
            ).rowcount
        return n == 1

    def finish(self, owner: str, tree: str, status: str, error: str | None = None) -> bool:
        """``done``, ``failed`` (with why), or ``pending`` to hand the tree back."""
        values: dict[str, object] = {"status": status, "error": error, "updated_at": utcnow()}
        if status == "pending":
            values |= {"owner": None, "heartbeat_at": None}
        with self.store.engine.begin() as conn:
            n = conn.execute(update(_LEASE).where(*self._owned(owner, tree)).values(values))
        return n.rowcount == 1

    def release_owner(self, owner: str) -> int:
        """Make every running tree of ``owner`` (a worker known dead) claimable at once, without
        waiting for its heartbeat to go stale; the owner stays, so the claim is a takeover."""
        with self.store.engine.begin() as conn:
            return conn.execute(
                update(_LEASE)
                .where(
                    _LEASE.c.run_id == self.run_id,
                    _LEASE.c.owner == owner,
                    _LEASE.c.status == "running",
                )
                .values(heartbeat_at=None, updated_at=utcnow())
            ).rowcount

    def interrupt_arms(self, conversation_ids: list[str], previous_owner: str) -> int:
        """Record on a taken-over tree's running arms that their worker stopped (the engine
        then resumes them from their last stored turn)."""
        with self.store.session() as s:
            n = s.exec(
                update(Conversation)
                .where(
                    col(Conversation.id).in_(conversation_ids),
                    col(Conversation.status) == "running",
                )
                .values(
                    status="interrupted",
                    error=f"interrupted: worker {previous_owner} stopped heartbeating",
                    updated_at=utcnow(),
                )
            ).rowcount
            s.commit()
        return int(n)

    def finished(self) -> set[str]:
        """The trees done or failed for good."""
        with self.store.engine.connect() as conn:
            rows = conn.execute(
                select(_LEASE.c.tree_id).where(
                    _LEASE.c.run_id == self.run_id, _LEASE.c.status.in_(("done", "failed"))
                )
            ).all()
        return {str(tree) for (tree,) in rows}

    def counts(self) -> dict[str, int]:
        """Status -> trees."""
        with self.store.engine.connect() as conn:
            rows = conn.execute(
                select(_LEASE.c.status, func.count())
                .where(_LEASE.c.run_id == self.run_id)
                .group_by(_LEASE.c.status)
            ).all()
        return {str(status): int(n) for status, n in rows}

    def _owned(self, owner: str, tree: str) -> tuple[ColumnElement[bool], ...]:
        return (
            _LEASE.c.run_id == self.run_id,
            _LEASE.c.tree_id == tree,
            _LEASE.c.owner == owner,
        )
