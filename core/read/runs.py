"""Runs, and the conversations of one run in the order its summary lists them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from core.read.schema import CONVERSATIONS, RUNS
from core.read.source import StoreRef, read_frame
from core.records import Conversation, Run
from core.store import Store

if TYPE_CHECKING:
    import pandas as pd


def run_table(ref: StoreRef) -> pd.DataFrame:
    """One row per run (id, kind, name, status, created_at), oldest first."""
    r = RUNS.c
    return read_frame(
        select(r.id, r.kind, r.name, r.status, r.created_at).order_by(r.created_at), ref
    )


def find_run(store: Store, run_id: str) -> Run | None:
    with store.session() as s:
        return s.get(Run, run_id)


def run_conversations(store: Store, run_id: str) -> list[Conversation]:
    """The conversations of a run by scenario, target, condition and replicate, then creation."""
    c = CONVERSATIONS.c
    q = (
        select(Conversation)
        .where(c.run_id == run_id)
        .order_by(c.scenario_id, c.target, c.condition, c.replicate, c.created_at)
    )
    with store.session() as s:
        return list(s.scalars(q).all())
