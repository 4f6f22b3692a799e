"""What runs cost: the recorded cost of their model calls, and what their unsettled reservations
hold (calls in flight, or sent by a process that died before their answer was stored)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, and_, case, func, select, true

from branchpoint.core.read.schema import MODEL_CALLS, SPEND_RESERVATIONS
from branchpoint.core.read.source import StoreRef, read_frame
from branchpoint.core.store import Store

if TYPE_CHECKING:
    import pandas as pd


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


def cache_token_sums() -> tuple[ColumnElement[int], ColumnElement[int]]:
    """(input tokens a provider's prompt cache served, input tokens of the calls that say) over
    the calls sent to a provider (not answered from branchpoint's own cache) whose row reports
    cached tokens (schema 10 on): their ratio is the share of input a cache served."""
    m = MODEL_CALLS.c
    reported = and_(m.cached.is_(False), m.tokens_cached.is_not(None))
    served = func.coalesce(func.sum(case((reported, m.tokens_cached), else_=0)), 0)
    of = func.coalesce(func.sum(case((reported, m.tokens_in), else_=0)), 0)
    return served, of


def cache_share(served: int | None, of: int | None) -> float | None:
    """The share of input tokens a cache served; None where no call reports any input."""
    return None if not of else (served or 0) / of


def share_text(share: float | None) -> str:
    """A cache share as every surface shows it (runs, the live view, the report): a percentage,
    or "-" where no call reports its cached tokens (unknown, not 0%)."""
    return "-" if share is None else f"{share:.0%}"


def run_cache_shares(store: Store) -> dict[str, float | None]:
    """Run id -> the share of its calls' input tokens a provider's prompt cache served (None:
    no call of it reports cached tokens: recorded before they were, or no input)."""
    m = MODEL_CALLS.c
    served, of = cache_token_sums()
    q = select(m.run_id, served, of).where(m.run_id.is_not(None)).group_by(m.run_id)
    with store.engine.connect() as conn:
        return {row[0]: cache_share(row[1], row[2]) for row in conn.execute(q)}


def call_spend(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """Per role (``purpose``) and model of the runs' calls: calls, input tokens, the tokens a
    provider's prompt cache served and of how many reported (``cache_token_sums``), USD
    recorded and the answered calls with no price (``unpriced``)."""
    m = MODEL_CALLS.c
    served, of = cache_token_sums()
    answered_unpriced = and_(m.cost.is_(None), m.error.is_(None), m.cached.is_(False))
    q = select(
        m.purpose.label("role"),
        m.model.label("model"),
        func.count().label("calls"),
        func.coalesce(func.sum(m.tokens_in), 0).label("input_tokens"),
        served.label("cached_tokens"),
        of.label("reported_input"),
        func.coalesce(func.sum(m.cost), 0.0).label("usd"),
        func.coalesce(func.sum(case((answered_unpriced, 1), else_=0)), 0).label("unpriced"),
    ).group_by(m.purpose, m.model)
    if runs is not None:
        q = q.where(m.run_id.in_(list(runs)))
    return read_frame(q.order_by(m.purpose, m.model), ref)
