"""Deleting a run or a sweep from the store, with everything recorded under it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, Table, delete, func, select

from branchpoint.core.read.schema import (
    CONVERSATION_ATTEMPTS,
    CONVERSATIONS,
    HUMAN_LABELS,
    JUDGMENTS,
    MODEL_CALLS,
    RUNS,
    SPEND_RESERVATIONS,
    TURNS,
    table_of,
)
from branchpoint.core.records import ConversationProvenance, TreeLease

if TYPE_CHECKING:
    from branchpoint.core.store import Store

PROVENANCE = table_of(ConversationProvenance)
TREE_LEASES = table_of(TreeLease)  # a sweep run on Ray (branchpoint/simulator/tree_lease.py)


@dataclass
class RunContents:
    """What deleting a run takes with it (shown before asking)."""

    conversations: int
    turns: int
    judgments: int
    human_labels: int
    model_calls: int


def _children(run_id: str) -> list[tuple[Table, ColumnElement[bool]]]:
    """Every row recorded under the run, children before parents (the foreign keys point at
    conversations and runs)."""
    convs = select(CONVERSATIONS.c.id).where(CONVERSATIONS.c.run_id == run_id)
    return [
        (JUDGMENTS, JUDGMENTS.c.conversation_id.in_(convs)),
        (HUMAN_LABELS, HUMAN_LABELS.c.conversation_id.in_(convs)),
        (TURNS, TURNS.c.conversation_id.in_(convs)),
        (PROVENANCE, PROVENANCE.c.run_id == run_id),
        (MODEL_CALLS, MODEL_CALLS.c.run_id == run_id),
        (SPEND_RESERVATIONS, SPEND_RESERVATIONS.c.run_id == run_id),
        (CONVERSATION_ATTEMPTS, CONVERSATION_ATTEMPTS.c.run_id == run_id),
        (TREE_LEASES, TREE_LEASES.c.run_id == run_id),
        (CONVERSATIONS, CONVERSATIONS.c.run_id == run_id),
        (RUNS, RUNS.c.id == run_id),
    ]


def run_contents(store: Store, run_id: str) -> RunContents:
    with store.engine.connect() as conn:
        n = {
            table.name: int(
                conn.execute(select(func.count()).select_from(table).where(w)).scalar_one()
            )
            for table, w in _children(run_id)
        }
    return RunContents(
        conversations=n[CONVERSATIONS.name],
        turns=n[TURNS.name],
        judgments=n[JUDGMENTS.name],
        human_labels=n[HUMAN_LABELS.name],
        model_calls=n[MODEL_CALLS.name],
    )


def delete_run(store: Store, run_id: str) -> None:
    """Delete the run and its conversations, turns, verdicts, labels, provenance and calls, in
    one transaction."""
    with store.engine.begin() as conn:
        for table, where in _children(run_id):
            conn.execute(delete(table).where(where))
