"""Turns: a table with their text for analysis, the transcripts of conversations as records."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import func, select

from branchpoint.core.read.schema import CONVERSATIONS, TURNS
from branchpoint.core.read.source import StoreRef, read_frame
from branchpoint.core.records import Turn
from branchpoint.core.store import Store

if TYPE_CHECKING:
    import pandas as pd

# Conversations per IN list: well under every database's limit on bound parameters.
ID_CHUNK = 500


def turn_rows(
    ref: StoreRef,
    runs: Sequence[str] | None = None,
    *,
    role: str | None = "assistant",
    with_reasoning: bool = False,
) -> pd.DataFrame:
    """turn_id, conversation_id, turn_index, exchange, role, content, reasoning and the
    conversation's target, condition and scenario_id; ``with_reasoning`` keeps only turns that
    have reasoning text."""
    t, c = TURNS.c, CONVERSATIONS.c
    q = select(
        t.id.label("turn_id"),
        t.conversation_id,
        t.index.label("turn_index"),
        t.exchange,
        t.role,
        t.content,
        t.reasoning,
        c.target,
        c.condition,
        c.scenario_id,
    ).join_from(TURNS, CONVERSATIONS, c.id == t.conversation_id)
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    if role is not None:
        q = q.where(t.role == role)
    if with_reasoning:
        q = q.where(t.reasoning.is_not(None), t.reasoning != "")
    return read_frame(q, ref)


def conversation_turns(store: Store, conversation_id: str) -> list[Turn]:
    """One conversation's transcript in order."""
    t = TURNS.c
    q = select(Turn).where(t.conversation_id == conversation_id).order_by(t.index)
    with store.session() as s:
        return list(s.scalars(q).all())


def turns_by_conversation(store: Store, conversation_ids: Sequence[str]) -> dict[str, list[Turn]]:
    """The transcripts of many conversations, each in order (one query per 500 conversations);
    a conversation without turns maps to an empty list."""
    t = TURNS.c
    out: dict[str, list[Turn]] = {cid: [] for cid in conversation_ids}
    ids = list(out)
    with store.session() as s:
        for i in range(0, len(ids), ID_CHUNK):
            q = (
                select(Turn)
                .where(t.conversation_id.in_(ids[i : i + ID_CHUNK]))
                .order_by(t.conversation_id, t.index)
            )
            for turn in s.scalars(q):
                out[turn.conversation_id].append(turn)
    return out


def turn_roles(store: Store, conversation_ids: Iterable[str]) -> dict[tuple[str, int], str]:
    """(conversation id, turn index) -> the turn's role, for every turn of ``conversation_ids``:
    what an import of labels checks its turn indexes against, without reading any text."""
    t = TURNS.c
    wanted = sorted(set(conversation_ids))
    out: dict[tuple[str, int], str] = {}
    with store.engine.connect() as conn:
        for i in range(0, len(wanted), ID_CHUNK):
            q = select(t.conversation_id, t.index, t.role).where(
                t.conversation_id.in_(wanted[i : i + ID_CHUNK])
            )
            out.update(((str(cid), int(idx)), str(role)) for cid, idx, role in conn.execute(q))
    return out


def original_replies(store: Store, conversation_ids: Sequence[str]) -> list[tuple[str, str, int]]:
    """(conversation, turn, exchange) of every chatbot turn of these conversations that is not
    a copy of a sibling arm's (what a judge is asked about; a copy gets the original's
    verdicts): keys only, one query per 500 conversations."""
    t = TURNS.c
    out: list[tuple[str, str, int]] = []
    ids = list(conversation_ids)
    with store.engine.connect() as conn:
        for i in range(0, len(ids), ID_CHUNK):
            q = select(t.conversation_id, t.id, t.exchange).where(
                t.conversation_id.in_(ids[i : i + ID_CHUNK]),
                t.role == "assistant",
                t.origin_turn_id.is_(None),
            )
            out += [(c, turn, int(exchange or 0)) for c, turn, exchange in conn.execute(q)]
    return out


def stored_turn_count(store: Store, run_id: str) -> int:
    """How many turns the conversations of a run have stored (what a resume need not redo)."""
    t, c = TURNS.c, CONVERSATIONS.c
    q = (
        select(func.count())
        .select_from(TURNS)
        .join(CONVERSATIONS, c.id == t.conversation_id)
        .where(c.run_id == run_id)
    )
    with store.engine.connect() as conn:
        return int(conn.execute(q).scalar_one())
