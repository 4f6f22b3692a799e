"""What runs cost: the recorded cost of their model calls, and what their unsettled reservations
hold (calls in flight, or sent by a process that died before their answer was stored)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, case, func, select, true

from branchpoint.core.read.schema import MODEL_CALLS, SPEND_RESERVATIONS
from branchpoint.core.store import Store


def answered_unpriced() -> ColumnElement[bool]:
    """A call row sent (not cached), answered (no error) and with no cost: no price known, so
    the dollars of any group holding one are unknown ("unpriced"), never a made-up $0."""
    m = MODEL_CALLS.c
    return and_(m.cost.is_(None), m.error.is_(None), m.cached.is_(False))


def run_costs(store: Store) -> dict[str, tuple[int, float | None]]:
    """Run id -> (model calls, USD) over the calls recorded for it (cached ones cost nothing
    again: the gateway records their cost as 0 or None); USD is None where a call of the run has
    no price known (``answered_unpriced``)."""
    m = MODEL_CALLS.c
    unpriced = func.coalesce(func.sum(case((answered_unpriced(), 1), else_=0)), 0)
    q = (
        select(m.run_id, func.count(), func.coalesce(func.sum(m.cost), 0.0), unpriced)
        .where(m.run_id.is_not(None))
        .group_by(m.run_id)
    )
    with store.engine.connect() as conn:
        return {
            row[0]: (int(row[1]), None if int(row[3] or 0) else float(row[2]))
            for row in conn.execute(q)
        }


def unsettled() -> ColumnElement[bool]:
    """A reservation not settled: every row still stored. The gateway deletes a successful
    attempt's row in its call row's transaction and an error answer's row at once; what is left
    is an attempt in flight, or one that may have been billed without an answer stored (a
    timeout, a cut connection, a killed process), which counts at its bound for good even when
    a later attempt of the same call stored a row (``docs/operations/ledger-and-store.md``)."""
    return true()


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
