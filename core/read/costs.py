"""What runs cost: the recorded cost of their model calls."""

from __future__ import annotations

from sqlalchemy import func, select

from core.read.schema import MODEL_CALLS
from core.store import Store


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
