"""Queries behind the terminal UI: runs, paged and filtered conversations, one transcript with its
verdicts, failure navigation, the arms of one tree, and a run's live progress.

Everything is a SQLAlchemy ``select()`` over ``branchpoint.core.records``, so it runs the same on SQLite and
PostgreSQL. Lists come a page at a time (``LIMIT``/``OFFSET``) and counts come from ``GROUP BY``:
no function here loads a whole table, so the first screen stays fast on a store of tens of
thousands of conversations.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import and_, case, exists, func, literal, select
from sqlalchemy.sql import ColumnElement, Select
from sqlmodel import select as orm_select

from branchpoint.core.human_labels import REALISM_RUBRIC, LabelItem, label_id
from branchpoint.core.read.persona_flags import low_realism_conversations, not_enacted_conversations
from branchpoint.core.records import Conversation, HumanLabel, Judgment, Run, Turn
from branchpoint.core.scales import WORST_LEVELS
from branchpoint.core.store import Store

# The worst level of each scale: a "failure" to count, sort by and jump to.
FAILING: tuple[str, ...] = WORST_LEVELS

C = Conversation.__table__.c  # type: ignore[attr-defined]
T = Turn.__table__.c  # type: ignore[attr-defined]
J = Judgment.__table__.c  # type: ignore[attr-defined]
R = Run.__table__.c  # type: ignore[attr-defined]
H = HumanLabel.__table__.c  # type: ignore[attr-defined]


class RunSummary(BaseModel):
    id: str
    kind: str
    name: str | None
    status: str
    created_at: datetime | None
    heartbeat_at: datetime | None
    n_conversations: int = 0
    n_completed: int = 0
    n_failed: int = 0
    n_running: int = 0


class ConversationFilter(BaseModel):
    """What the conversations list shows; every field narrows it, None means any."""

    model_config = ConfigDict(frozen=True)

    run_id: str | None = None
    scenario: str | None = None
    choices: dict[str, str] = Field(default_factory=dict)  # branch point -> option
    target: str | None = None
    condition: str | None = None
    simulator: str | None = None
    status: str | None = None
    stop_reason: str | None = None
    failing: str | None = None  # a criterion id that failed somewhere in the conversation
    judge: str | None = None  # judged by this judge (and failures counted by it)
    text: str | None = None  # occurs in some message, case-insensitively
    not_enacted: bool = False  # a persona turn whose manipulation check says not enacted
    low_realism: bool = False  # a persona turn rated below "mostly" realistic
    sort: Literal["id", "failures"] = "id"


class ConversationRow(BaseModel):
    id: str
    run_id: str
    scenario_id: str
    variant_id: str
    choices: dict[str, Any]
    target: str
    condition: str
    simulator: str
    replicate: int
    status: str
    stop_reason: str | None
    n_turns: int
    n_fail: int = 0


class Page(BaseModel):
    rows: list[ConversationRow]
    total: int
    offset: int
    limit: int


class TargetProgress(BaseModel):
    """One target of a run, for the live view."""

    target: str
    done: int = 0
    running: int = 0
    failed: int = 0
    pending: int = 0
    cost: float = 0.0
    done_last_minute: int = 0


class Transcript(BaseModel):
    conversation: Conversation
    turns: list[Turn]
    judges: list[str]  # every judge that rated this conversation, in name order
    judgments: list[Judgment]


# --------------------------------------------------------------------------- runs


def list_runs(store: Store) -> list[RunSummary]:
    """Every run, newest first, with its conversations counted by status (one grouped query)."""
    counts = (
        select(
            C.run_id,
            func.count().label("n"),
            func.sum(case((C.status == "completed", 1), else_=0)).label("done"),
            func.sum(case((C.status == "failed", 1), else_=0)).label("failed"),
            func.sum(case((C.status == "running", 1), else_=0)).label("running"),
        )
        .group_by(C.run_id)
        .subquery()
    )
    q = (
        select(R.id, R.kind, R.name, R.status, R.created_at, R.heartbeat_at, counts)
        .outerjoin(counts, counts.c.run_id == R.id)
        .order_by(R.created_at.desc(), R.id)
    )
    with store.engine.connect() as conn:
        return [
            RunSummary(
                id=r.id,
                kind=r.kind,
                name=r.name,
                status=r.status,
                created_at=r.created_at,
                heartbeat_at=r.heartbeat_at,
                n_conversations=r.n or 0,
                n_completed=r.done or 0,
                n_failed=r.failed or 0,
                n_running=r.running or 0,
            )
            for r in conn.execute(q)
        ]


def runs_marker(store: Store) -> tuple[Any, ...]:
    """What changes when a run starts, beats or ends: the count of runs and their latest update
    and heartbeat, in one row of the small runs table (the TUI polls it to know when to reload)."""
    q = select(
        func.count(),
        func.max(R.updated_at),
        func.max(R.heartbeat_at),
        func.sum(case((R.status == "running", 1), else_=0)),
    )
    with store.engine.connect() as conn:
        return tuple(conn.execute(q).one())


# --------------------------------------------------------------------------- conversations


def _failure_counts(judge: str | None) -> Any:
    """Failing verdicts by conversation, counted in one pass over the failing verdicts (a range
    of ``ix_judgments_failing``), not once per conversation."""
    where = [J.verdict.in_(FAILING)]
    if judge is not None:
        where.append(J.judge == judge)
    return (
        select(J.conversation_id, func.count().label("n"))
        .where(*where)
        .group_by(J.conversation_id)
        .subquery()
    )


def _where(f: ConversationFilter) -> list[ColumnElement[bool]]:
    out: list[ColumnElement[bool]] = []
    equal = {
        "run_id": C.run_id,
        "scenario": C.scenario_id,
        "target": C.target,
        "condition": C.condition,
        "simulator": C.simulator,
        "status": C.status,
        "stop_reason": C.stop_reason,
    }
    for field, column in equal.items():
        value = getattr(f, field)
        if value is not None:
            out.append(column == value)
    for key, option in f.choices.items():
        out.append(C.choices[key].as_string() == option)
    if f.failing is not None:
        # IN, not a correlated EXISTS: the failing verdicts of one criterion are one range of
        # ix_judgments_failing, read once, instead of every judgment row of every conversation
        j = [J.verdict.in_(FAILING), J.criterion_id == f.failing]
        if f.judge is not None:
            j.append(J.judge == f.judge)
        out.append(C.id.in_(select(J.conversation_id).where(*j)))
    elif f.judge is not None:
        out.append(exists().where(J.conversation_id == C.id, J.judge == f.judge))
    if f.not_enacted:
        out.append(C.id.in_(not_enacted_conversations()))
    if f.low_realism:
        out.append(C.id.in_(low_realism_conversations()))
    if f.text:
        out.append(
            exists().where(T.conversation_id == C.id, T.content.icontains(f.text, autoescape=True))
        )
    return out


def conversations_page(
    store: Store, f: ConversationFilter, offset: int = 0, limit: int = 50
) -> Page:
    """One page of the conversations that ``f`` selects, with the total for the pager."""
    where = _where(f)
    count_q = select(func.count()).select_from(Conversation.__table__).where(*where)  # type: ignore[attr-defined]
    q: Select[Any] = select(Conversation.__table__).where(*where)  # type: ignore[attr-defined]
    if f.sort == "failures":
        counts = _failure_counts(f.judge)
        q = q.outerjoin(counts, counts.c.conversation_id == C.id).order_by(
            func.coalesce(counts.c.n, 0).desc(), C.id
        )
    else:
        q = q.order_by(C.scenario_id, C.variant_id, C.target, C.condition, C.replicate, C.id)
    q = q.offset(offset).limit(limit)
    with store.engine.connect() as conn:
        total = conn.execute(count_q).scalar_one()
        rows = [dict(r._mapping) for r in conn.execute(q)]
        fails = _failures_by_conversation(conn, [r["id"] for r in rows], f.judge)
    return Page(
        rows=[ConversationRow(**r, n_fail=fails.get(r["id"], 0)) for r in rows],
        total=total,
        offset=offset,
        limit=limit,
    )


def _failures_by_conversation(conn: Any, ids: list[str], judge: str | None) -> dict[str, int]:
    if not ids:
        return {}
    q = (
        select(J.conversation_id, func.count())
        .where(J.conversation_id.in_(ids), J.verdict.in_(FAILING))
        .group_by(J.conversation_id)
    )
    if judge is not None:
        q = q.where(J.judge == judge)
    return {cid: n for cid, n in conn.execute(q)}


def facets(store: Store, run_id: str | None = None, limit: int = 200) -> dict[str, list[str]]:
    """The values each filter can take (from conversations only: cheap on a large store)."""
    out: dict[str, list[str]] = {}
    columns = {
        "scenario": C.scenario_id,
        "target": C.target,
        "condition": C.condition,
        "simulator": C.simulator,
        "status": C.status,
        "stop_reason": C.stop_reason,
    }
    with store.engine.connect() as conn:
        for name, column in columns.items():
            q = select(column).distinct().where(column.is_not(None)).order_by(column).limit(limit)
            if run_id is not None:
                q = q.where(C.run_id == run_id)
            out[name] = [v for (v,) in conn.execute(q)]
    return out


# --------------------------------------------------------------------------- one transcript


def get_transcript(store: Store, conversation_id: str) -> Transcript | None:
    """A conversation, its turns in order and every judgment on it (all judges)."""
    with store.session() as s:
        conv = s.get(Conversation, conversation_id)
        if conv is None:
            return None
        turns = list(
            s.exec(
                orm_select(Turn).where(T.conversation_id == conversation_id).order_by(T["index"])
            )
        )
        judgments = list(
            s.exec(
                orm_select(Judgment)
                .where(J.conversation_id == conversation_id)
                .order_by(J.judge, J.turn_index, J.criterion_id)
            )
        )
    judges = sorted({j.judge for j in judgments})
    return Transcript(conversation=conv, turns=turns, judges=judges, judgments=judgments)


def find_failure(
    store: Store,
    conversation_id: str,
    turn_index: int,
    *,
    direction: Literal["next", "previous"] = "next",
    judge: str | None = None,
) -> int | None:
    """The index of the nearest turn after (or before) ``turn_index`` with a failing verdict."""
    where = [
        J.conversation_id == conversation_id,
        J.verdict.in_(FAILING),
        J.turn_index.is_not(None),
    ]
    if judge is not None:
        where.append(J.judge == judge)
    if direction == "next":
        q = select(func.min(J.turn_index)).where(*where, J.turn_index > turn_index)
    else:
        q = select(func.max(J.turn_index)).where(*where, J.turn_index < turn_index)
    with store.engine.connect() as conn:
        return conn.execute(q).scalar_one_or_none()


# --------------------------------------------------------------------------- trees and arms


def tree_arms(store: Store, conversation_id: str) -> list[Conversation]:
    """The arms of the tree ``conversation_id`` belongs to: the same run, scenario, target,
    condition, simulator and replicate, one per variant; then the replays made of them
    (``branchpoint replay``: the run's replay run, same cell), after the designed arms."""
    from branchpoint.core.domain import designed_run_id, replay_run_id

    with store.session() as s:
        conv = s.get(Conversation, conversation_id)
        if conv is None:
            return []
        designed = designed_run_id(conv.run_id)
        q = (
            orm_select(Conversation)
            .where(
                C.run_id.in_([designed, replay_run_id(designed)]),
                C.scenario_id == conv.scenario_id,
                C.target == conv.target,
                C.condition == conv.condition,
                C.simulator == conv.simulator,
                C.replicate == conv.replicate,
            )
            .order_by(C.origin.is_not(None), C.parent_id.is_not(None), C.variant_id, C.created_at)
        )
        return list(s.exec(q))


def cell_twins(store: Store, conversation_id: str) -> list[Conversation]:
    """The conversations of every target on the cell of ``conversation_id``: the same run,
    scenario, variant, condition, simulator and replicate (the cell a chatbot comparison pairs),
    ordered by target."""
    with store.session() as s:
        conv = s.get(Conversation, conversation_id)
        if conv is None:
            return []
        q = (
            orm_select(Conversation)
            .where(
                C.run_id == conv.run_id,
                C.scenario_id == conv.scenario_id,
                C.variant_id == conv.variant_id,
                C.condition == conv.condition,
                C.simulator == conv.simulator,
                C.replicate == conv.replicate,
            )
            .order_by(C.target, C.id)
        )
        found = list(s.exec(q))
    # the same choices too: an arm whose branch point never fired keeps its parent's variant
    return [c for c in found if c.choices == conv.choices]


def shared_prefix(turns_by_arm: list[list[Turn]]) -> int:
    """How many leading turns every arm shares: the same stored turn (``origin_turn_id`` names the
    turn a fork copied), not merely the same text, so the fork is where the engine forked."""
    if not turns_by_arm:
        return 0
    n = min(len(t) for t in turns_by_arm)
    for i in range(n):
        roots = {arm[i].origin_turn_id or arm[i].id for arm in turns_by_arm}
        if len(roots) > 1:
            return i
    return n


# --------------------------------------------------------------------------- live progress


def run_progress(store: Store, run_id: str, now: datetime) -> list[TargetProgress]:
    """Per target of ``run_id``: conversations by status, the cost so far, and how many finished in
    the minute before ``now`` (the rate)."""
    from datetime import timedelta

    minute_ago = now - timedelta(minutes=1)
    status_q = (
        select(
            C.target,
            func.sum(case((C.status == "completed", 1), else_=0)),
            func.sum(case((C.status == "running", 1), else_=0)),
            func.sum(case((C.status.in_(("failed", "interrupted")), 1), else_=0)),
            func.sum(case((C.status == "pending", 1), else_=0)),
            func.sum(case((and_(C.status == "completed", C.updated_at >= minute_ago), 1), else_=0)),
        )
        .where(C.run_id == run_id)
        .group_by(C.target)
        .order_by(C.target)
    )
    cost_q = (
        select(C.target, func.coalesce(func.sum(T.cost), literal(0.0)))
        .join(Turn.__table__, T.conversation_id == C.id)  # type: ignore[attr-defined]
        .where(C.run_id == run_id, T.role == "assistant")
        .group_by(C.target)
    )
    with store.engine.connect() as conn:
        costs = {t: float(c or 0.0) for t, c in conn.execute(cost_q)}
        return [
            TargetProgress(
                target=t,
                done=done or 0,
                running=running or 0,
                failed=failed or 0,
                pending=pending or 0,
                done_last_minute=recent or 0,
                cost=costs.get(t, 0.0),
            )
            for t, done, running, failed, pending, recent in conn.execute(status_q)
        ]


def run_ids(store: Store) -> list[str]:
    """Every run's id, newest first (the live view's choice of run)."""
    with store.engine.connect() as conn:
        return list(conn.execute(select(R.id).order_by(R.created_at.desc(), R.id)).scalars())


def latest_running_run(store: Store) -> str | None:
    """The most recently updated run still marked running, else the most recent run."""
    q = select(R.id).order_by(R.status != "running", R.updated_at.desc())
    with store.engine.connect() as conn:
        return conn.execute(q.limit(1)).scalar_one_or_none()


# --------------------------------------------------------------------------- earlier labels


class EarlierLabel(BaseModel):
    """What an annotator gave an item before (shown when the item comes round again)."""

    verdict: str | None  # None: not applicable
    blind: bool | None


def earlier_labels(
    store: Store, annotator: str, items: list[LabelItem]
) -> dict[LabelItem, EarlierLabel]:
    """This annotator's labels on ``items``, by item: a primary-key lookup per 500 items."""
    ids = {label_id(annotator, it): it for it in items}
    keys = list(ids)
    out: dict[LabelItem, EarlierLabel] = {}
    with store.engine.connect() as conn:
        for i in range(0, len(keys), 500):
            q = select(H.id, H.verdict, H.blind).where(H.id.in_(keys[i : i + 500]))
            for key, verdict, blind in conn.execute(q):
                out[ids[key]] = EarlierLabel(verdict=verdict, blind=blind)
    return out


# --------------------------------------------------------------------------- agreement inputs


def labelled_judgments(store: Store, run_id: str | None = None) -> list[dict[str, Any]]:
    """The judgments of conversations that people labelled (not realism ratings): what the TUI's
    agreement view needs, without reading the judgments of unlabelled conversations."""
    h = H
    labelled = select(h.conversation_id).where(h.rubric_id != REALISM_RUBRIC).distinct()
    q = select(
        J.conversation_id,
        J.turn_index,
        J.rubric_id,
        J.criterion_id,
        J.judge,
        J.applicable,
        J.verdict,
    ).where(J.conversation_id.in_(labelled))
    if run_id is not None:
        q = q.where(J.run_id == run_id)
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def criterion_labels(store: Store, run_id: str | None = None) -> list[dict[str, Any]]:
    """Human labels on rubric criteria (realism ratings left out), on the judgments' key."""
    h = H
    q = select(
        h.conversation_id, h.turn_index, h.rubric_id, h.criterion_id, h.annotator, h.verdict
    ).where(h.rubric_id != REALISM_RUBRIC)
    if run_id is not None:
        q = q.where(h.conversation_id.in_(select(C.id).where(C.run_id == run_id)))
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]
