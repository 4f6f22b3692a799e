"""The run lease: one process at a time runs a run; a dead or silent owner's run can be taken over."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from sqlalchemy import text

from branchpoint.core.errors import UserError
from branchpoint.core.records import SCHEMA_VERSION, Run, utcnow
from branchpoint.core.store import open_store
from branchpoint.simulator.lease import STALE_S, RunLease


def _set_owner(store, owner, age_s: float = 0.0) -> None:  # type: ignore[no-untyped-def]
    with store.session() as s:
        row = s.get(Run, "r") or Run(id="r")
        row.owner, row.heartbeat_at = owner, utcnow() - timedelta(seconds=age_s)
        s.add(row)
        s.commit()


def _owner(store) -> str | None:  # type: ignore[no-untyped-def]
    with store.session() as s:
        return s.get(Run, "r").owner  # type: ignore[union-attr]


def test_claim_refuses_a_live_owner_and_takes_a_stale_or_dead_one(store) -> None:  # type: ignore[no-untyped-def]
    assert RunLease(store, "r").claim() is False  # no such run yet
    _set_owner(store, "elsewhere:4242:ab")
    with pytest.raises(UserError, match=r"being run by process 4242 on elsewhere"):
        RunLease(store, "r").claim()
    assert _owner(store) == "elsewhere:4242:ab"

    _set_owner(store, "elsewhere:4242:ab", age_s=STALE_S + 5)  # silent for too long
    lease = RunLease(store, "r")
    assert lease.claim() is True and _owner(store) == lease.owner

    # A process on this host that has ended: no need to wait for its heartbeat to go stale.
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _set_owner(store, f"{socket.gethostname()}:{dead.pid}:cd")
    lease = RunLease(store, "r")
    assert lease.claim() is True and _owner(store) == lease.owner

    # While that lease is held, a second claim in this very process is refused too ...
    with pytest.raises(UserError, match="being run by process"):
        RunLease(store, "r").claim()
    assert lease.beat() is True
    # ... and once it is released, the run is free.
    lease.release()
    assert _owner(store) is None
    other = RunLease(store, "r")
    assert other.claim() is True
    assert lease.beat() is False  # the old holder learns that it lost the lease


def test_a_store_of_schema_1_gains_the_lease_columns(store) -> None:  # type: ignore[no-untyped-def]
    url = store.url
    with store.session() as s:
        s.add(Run(id="old", status="completed"))
        for column in ("owner", "heartbeat_at"):
            s.execute(text(f"ALTER TABLE runs DROP COLUMN {column}"))  # type: ignore[call-overload]
        s.execute(text("UPDATE schema_info SET value = '1' WHERE key = 'schema_version'"))  # type: ignore[call-overload]
        s.commit()
    store.close()
    again = open_store(url)
    try:
        assert again.schema_version() == SCHEMA_VERSION
        lease = RunLease(again, "old")
        assert lease.claim() is True
        with again.session() as s:
            row = s.get(Run, "old")
            assert row is not None and row.status == "completed" and row.owner == lease.owner
    finally:
        again.close()
