"""Model calls recorded by the gateway."""

from __future__ import annotations

from sqlalchemy import func, select

from core.read.schema import MODEL_CALLS
from core.store import Store


def model_call_count(store: Store, purpose: str | None = None) -> int:
    """How many calls are recorded (cached and failed ones included), optionally of one purpose
    (persona, target, detector, judge)."""
    q = select(func.count()).select_from(MODEL_CALLS)
    if purpose is not None:
        q = q.where(MODEL_CALLS.c.purpose == purpose)
    with store.engine.connect() as conn:
        return int(conn.execute(q).scalar_one())
