"""What runs cost: the recorded cost of their model calls, and what their unsettled reservations
hold (calls in flight, or sent by a process that died before their answer was stored)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, exists, func, select

from branchpoint.core.read.schema import MODEL_CALLS, SPEND_RESERVATIONS
from branchpoint.core.store import Store


def run_costs(store: Store) -> dict[str, tuple[int, float]]:
    """Run id -> (model calls, USD) over the calls recorded for it (cached ones cost nothing
    again: the gateway records their cost as 0 or None)."""
    m = MODEL_CALLS.c
    q = (
        select(m.run_id, func.count(), func.coalesce(func.sum(m.cost), 0.0))
        .where(m.run_id.is_not(None))
        .group_by(m.run_id)
    )
    with store.engine.connect() as conn:
        return {row[0]: (int(row[1]), float(row[2])) for row in conn.execute(q)}


def unsettled() -> ColumnElement[bool]:
    """A reservation not settled: no row of its call is stored. Settling deletes it in the call
    row's transaction; one whose call row is there anyway (made by other means) counts no more."""
    r = SPEND_RESERVATIONS.c
    return ~exists().where(MODEL_CALLS.c.id == r.call_id)


def run_reserved(store: Store) -> dict[str, float]:
    """Run id -> USD its unsettled reservations hold, at their bound (runs with none left out)."""
    r = SPEND_RESERVATIONS.c
    q = select(r.run_id, func.sum(r.upper_usd)).where(unsettled()).group_by(r.run_id)
    with store.engine.connect() as conn:
        return {row[0]: float(row[1] or 0.0) for row in conn.execute(q)}


def reserved_by_target(store: Store, run_id: str) -> dict[str, float]:
    """USD held by ``run_id``'s unsettled reservations, by the target each counts against."""
    r = SPEND_RESERVATIONS.c
    q = (
        select(r.target, func.sum(r.upper_usd))
        .where(r.run_id == run_id, unsettled())
        .group_by(r.target)
    )
    with store.engine.connect() as conn:
        return {str(row[0]): float(row[1] or 0.0) for row in conn.execute(q)}
