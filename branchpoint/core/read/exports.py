"""Reads for exports: every column an outside analyst needs, a batch of conversations at a time.

The analysis reads (``judgment_rows``, ``turn_rows``) select what the analysis uses; an export
must also carry what it does not: the transcript's text and flags (stage, fired branch points,
events, the turn a copy was taken from), the judge's rationale, evidence, error and raw output, the
fork tree and the system prompt. Each function reads the conversations it is given (batched under
every database's limit on bound parameters), so an export of any size runs in bounded memory.
JSON columns come back as stored: text from a SQLite file, parsed values from other databases.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from branchpoint.core.read.schema import CONVERSATIONS, JUDGMENTS, TURNS, table_of
from branchpoint.core.read.source import StoreRef, read_frame
from branchpoint.core.read.sqlite_file import Query
from branchpoint.core.read.turns import ID_CHUNK
from branchpoint.core.records import ConversationProvenance, PromptText

if TYPE_CHECKING:
    import pandas as pd

C, T, J = CONVERSATIONS.c, TURNS.c, JUDGMENTS.c
PROVENANCE = table_of(ConversationProvenance)
PROMPT_TEXTS = table_of(PromptText)


def _batched(
    make: Callable[[list[str]], Query], ids: Sequence[str], ref: StoreRef, order: Sequence[Any]
) -> pd.DataFrame:
    """``make(ids)`` run once per ``ID_CHUNK`` ids, the frames in order."""
    import pandas as pd

    frames = []
    for i in range(0, len(ids), ID_CHUNK):
        frames.append(read_frame(make(list(ids[i : i + ID_CHUNK])).order_by(*order), ref))
    if not frames:  # the columns, no rows
        return read_frame(make([]).order_by(*order), ref)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def conversation_export_rows(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per conversation, ordered by id: conversation_id, run_id, scenario_id,
    scenario_path, scenario_hash, variant_id, choices, target, condition, simulator, replicate,
    seed, conversation_status, stop_reason, n_turns, parent_id, fork_turn."""
    q = select(
        C.id.label("conversation_id"),
        C.run_id,
        C.scenario_id,
        C.scenario_path,
        C.scenario_hash,
        C.variant_id,
        C.choices,
        C.target,
        C.condition,
        C.simulator,
        C.replicate,
        C.seed,
        C.status.label("conversation_status"),
        C.stop_reason,
        C.n_turns,
        C.parent_id,
        C.fork_turn,
    )
    if runs is not None:
        q = q.where(C.run_id.in_(list(runs)))
    return read_frame(q.order_by(C.id), ref)


def turn_export_rows(ref: StoreRef, conversation_ids: Sequence[str]) -> pd.DataFrame:
    """Every turn of these conversations, in order: turn_id, conversation_id, turn_index,
    exchange, role, content, reasoning, stage, branch_state, fired, events, event_source, model,
    tokens_in, tokens_out, cost, latency_s, finish_reason, retries, origin_turn_id (the turn a
    copy was taken from; empty for a turn of its own)."""

    def make(ids: list[str]) -> Query:
        return select(
            T.id.label("turn_id"),
            T.conversation_id,
            T.index.label("turn_index"),
            T.exchange,
            T.role,
            T.content,
            T.reasoning,
            T.stage,
            T.branch_state,
            T.fired,
            T.events,
            T.event_source,
            T.model,
            T.tokens_in,
            T.tokens_out,
            T.cost,
            T.latency_s,
            T.finish_reason,
            T.retries,
            T.origin_turn_id,
        ).where(T.conversation_id.in_(ids))

    return _batched(make, conversation_ids, ref, [T.conversation_id, T.index])


def judgment_export_rows(
    ref: StoreRef,
    conversation_ids: Sequence[str],
    *,
    rubric: str | None = None,
    judge: str | None = None,
    words: bool = True,
) -> pd.DataFrame:
    """Every judgment of these conversations with the judge's own words: judgment_id,
    conversation_id, turn_id, turn_index, exchange, turn_role, origin_turn_id, rubric_id,
    rubric_hash, criterion_id, risk_area, judge, prompt_version, applicable, verdict, score,
    rationale, evidence, members, error, raw_output, call_id (``words=False``: the columns up to
    score, for the unit export, which leaves the judge's words to the judgment export)."""
    words_columns = [J.rationale, J.evidence, J.members, J.error, J.raw_output, J.call_id]

    def make(ids: list[str]) -> Query:
        q = (
            select(
                J.id.label("judgment_id"),
                J.conversation_id,
                J.turn_id,
                J.turn_index,
                T.exchange,
                T.role.label("turn_role"),
                T.origin_turn_id,
                J.rubric_id,
                J.rubric_hash,
                J.criterion_id,
                J.risk_area,
                J.judge,
                J.prompt_version,
                J.applicable,
                J.verdict,
                J.score,
                *(words_columns if words else []),
            )
            .outerjoin(TURNS, T.id == J.turn_id)
            .where(J.conversation_id.in_(ids))
        )
        if rubric is not None:
            q = q.where(J.rubric_id == rubric)
        if judge is not None:
            q = q.where(J.judge == judge)
        return q

    return _batched(make, conversation_ids, ref, [J.conversation_id, J.turn_index, J.id])


def system_prompts(ref: StoreRef, conversation_ids: Sequence[str]) -> dict[str, str | None]:
    """conversation id -> the system prompt its target saw (None: the condition adds none, or the
    conversation predates provenance)."""
    p, x = PROVENANCE.c, PROMPT_TEXTS.c

    def make(ids: list[str]) -> Query:
        return (
            select(p.conversation_id, x.text)
            .outerjoin(PROMPT_TEXTS, x.hash == p.system_prompt_hash)
            .where(p.conversation_id.in_(ids))
        )

    frame = _batched(make, conversation_ids, ref, [p.conversation_id])
    out: dict[str, str | None] = dict.fromkeys(conversation_ids)
    for cid, text in frame.itertuples(index=False, name=None):
        out[str(cid)] = None if text is None or text != text else str(text)
    return out
