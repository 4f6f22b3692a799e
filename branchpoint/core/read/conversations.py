"""Conversations: as a table for analysis, as records for the judges and ``branchpoint show``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import select

from branchpoint.core.errors import UserError
from branchpoint.core.read.schema import CONVERSATION_ATTEMPTS, CONVERSATIONS
from branchpoint.core.read.source import StoreRef, read_frame
from branchpoint.core.read.turns import ID_CHUNK
from branchpoint.core.records import Conversation, ConversationProvenance
from branchpoint.core.store import Store

if TYPE_CHECKING:
    import pandas as pd


def existing_conversations(store: Store, ids: Iterable[str]) -> set[str]:
    """Those of ``ids`` that have a conversation row."""
    c = CONVERSATIONS.c
    wanted = sorted(set(ids))
    found: set[str] = set()
    with store.engine.connect() as conn:
        for i in range(0, len(wanted), ID_CHUNK):
            chunk = wanted[i : i + ID_CHUNK]
            found.update(v for (v,) in conn.execute(select(c.id).where(c.id.in_(chunk))))
    return found


def conversation_rows(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per conversation: conversation_id, run_id, scenario_id, scenario_path, variant_id,
    target, condition, simulator, replicate, conversation_status, n_turns and the stored
    ``choices`` (JSON text on SQLite, parsed on other databases)."""
    c = CONVERSATIONS.c
    q = select(
        c.id.label("conversation_id"),
        c.run_id,
        c.scenario_id,
        c.scenario_path,
        c.variant_id,
        c.target,
        c.condition,
        c.simulator,
        c.replicate,
        c.status.label("conversation_status"),
        c.n_turns,
        c.choices,
    )
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    return read_frame(q, ref)


def select_conversations(
    store: Store, run_id: str | None = None, ids: Sequence[str] | None = None
) -> list[Conversation]:
    """Conversations of a run (or of every run), optionally only ``ids``, oldest first."""
    c = CONVERSATIONS.c
    q = select(Conversation)
    if run_id is not None:
        q = q.where(c.run_id == run_id)
    if ids:
        q = q.where(c.id.in_(list(ids)))
    with store.session() as s:
        return list(s.scalars(q.order_by(c.created_at, c.id)).all())


def find_conversation(store: Store, id_or_prefix: str) -> Conversation:
    """The conversation with this id, or the only one whose id starts with it."""
    with store.session() as s:
        conv = s.get(Conversation, id_or_prefix)
        if conv is not None:
            return conv
        q = select(Conversation).where(CONVERSATIONS.c.id.startswith(id_or_prefix)).limit(3)
        matches = list(s.scalars(q).all())
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UserError(
            f"conversation {id_or_prefix!r} is ambiguous: {', '.join(m.id for m in matches)} ..."
        )
    raise UserError(f"no conversation {id_or_prefix!r} in {store!r}")


def conversation_provenance(store: Store, conversation_id: str) -> ConversationProvenance | None:
    """What produced a conversation besides its scenario and models (texts by hash, the run's
    config hash, the detector); None for a conversation stored before provenance was kept."""
    with store.session() as s:
        return s.get(ConversationProvenance, conversation_id)


def conversation_tree(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """The fork tree: conversation_id, parent_id (the arm whose prefix it copies) and fork_turn
    (its first own turn; None: not diverged from its parent). Analysis cuts shared prefixes."""
    c = CONVERSATIONS.c
    q = select(c.id.label("conversation_id"), c.parent_id, c.fork_turn)
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    return read_frame(q, ref)


def conversation_endings(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """How each conversation ended: conversation_id, status and stop_reason (max_turns,
    persona_ended, target_error, simulator_error, stopped_by_budget; None while running).
    Time-to-failure analysis censors a conversation at its end for this reason."""
    c = CONVERSATIONS.c
    q = select(c.id.label("conversation_id"), c.status, c.stop_reason)
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    return read_frame(q, ref)


def retried_conversations(ref: StoreRef, runs: str | Sequence[str] | None = None) -> set[str]:
    """Ids of the conversations (of ``runs``, or of every run) that ``--retry-failed`` ran again:
    those with a ``conversation_attempts`` row. Analysis can leave them out."""
    a = CONVERSATION_ATTEMPTS.c
    q = select(a.conversation_id).distinct()
    if runs is not None:
        q = q.where(a.run_id.in_([runs] if isinstance(runs, str) else list(runs)))
    return {str(i) for i in read_frame(q, ref)["conversation_id"]}
