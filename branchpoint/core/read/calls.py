"""Model calls recorded by the gateway."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import func, select

from branchpoint.core.read.schema import MODEL_CALLS
from branchpoint.core.store import Store


def model_call_count(store: Store, purpose: str | None = None) -> int:
    """How many calls are recorded (cached and failed ones included), optionally of one purpose
    (persona, target, detector, judge)."""
    q = select(func.count()).select_from(MODEL_CALLS)
    if purpose is not None:
        q = q.where(MODEL_CALLS.c.purpose == purpose)
    with store.engine.connect() as conn:
        return int(conn.execute(q).scalar_one())


def cached_call_counts(store: Store, run_id: str, since: datetime | None = None) -> dict[str, int]:
    """Calls of ``run_id`` answered from the cache, by purpose; with ``since``, only those made
    at or after it (one invocation of a run that was resumed)."""
    m = MODEL_CALLS.c
    q = select(m.purpose, func.count()).where(m.run_id == run_id, m.cached.is_(True))
    if since is not None:
        q = q.where(m.created_at >= since)
    with store.engine.connect() as conn:
        return {str(p): int(n) for p, n in conn.execute(q.group_by(m.purpose))}


def calls_text(counts: Mapping[str, int]) -> str:
    """``6 persona, 7 target``: calls by purpose as the summaries print them ("" for none)."""
    return ", ".join(f"{n} {purpose}" for purpose, n in sorted(counts.items()) if n)
