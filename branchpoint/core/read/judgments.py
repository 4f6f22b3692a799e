"""Judgments: rows joined with their turn, counts per conversation x criterion, and the keys and
verdicts the judging runner needs to skip or copy what is already judged.

A rating counts (``rated``) when the criterion applied and the verdict is a scale level: a
not-applicable row and an ``error`` verdict are not ratings; errors are counted separately.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import and_, case, func, select
from sqlalchemy.sql import ColumnElement

from branchpoint.core.domain import ENACTMENT_RUBRIC
from branchpoint.core.human_labels import REALISM_RUBRIC
from branchpoint.core.read.schema import CONVERSATIONS, JUDGMENT_ROWID, JUDGMENTS, TURNS
from branchpoint.core.read.source import StoreRef, iter_sqlite_frames, read_frame, sqlite_path
from branchpoint.core.read.sqlite_file import Query
from branchpoint.core.read.turns import ID_CHUNK
from branchpoint.core.records import Judgment
from branchpoint.core.scales import ERROR, PASS_PARTIAL_FAIL
from branchpoint.core.store import Store

if TYPE_CHECKING:
    import pandas as pd

J, C, T = JUDGMENTS.c, CONVERSATIONS.c, TURNS.c
FAIL, PARTIAL, PASS = PASS_PARTIAL_FAIL.levels
# The rubric ids under which the persona's turns are rated (``branchpoint.judges.persona_checks``).
PERSONA_RUBRICS: tuple[str, ...] = (ENACTMENT_RUBRIC, REALISM_RUBRIC)
COUNT_COLUMNS = ("n_rated", "n_fail", "n_partial", "n_error", "n_other", "n_scored")


def _filtered(q: Query, runs: Sequence[str] | None, rubric: str | None, judge: str | None) -> Query:
    if runs is not None:
        q = q.where(C.run_id.in_(list(runs)))
    if rubric is not None:
        q = q.where(J.rubric_id == rubric)
    else:
        # Ratings of the persona (manipulation checks, realism) share the table but are not
        # verdicts on the chatbot: no chatbot rate, contrast or version check may count them.
        q = q.where(J.rubric_id.not_in(PERSONA_RUBRICS))
    if judge is not None:
        q = q.where(J.judge == judge)
    return q


def _judgment_select(
    runs: Sequence[str] | None, rubric: str | None, judge: str | None, include_text: bool
) -> Query:
    columns: list[Any] = [
        J.id.label("judgment_id"),
        J.conversation_id,
        J.turn_id,
        J.turn_index,
        T.exchange,
        T.role.label("turn_role"),
        J.rubric_id,
        J.rubric_hash,
        J.criterion_id,
        J.risk_area,
        J.judge,
        J.prompt_version,
        J.applicable,
        J.verdict,
        J.score,
    ]
    if include_text:
        columns += [T.content.label("turn_content"), T.reasoning.label("turn_reasoning")]
    q = (
        select(*columns)
        .join_from(JUDGMENTS, CONVERSATIONS, C.id == J.conversation_id)
        .outerjoin(TURNS, T.id == J.turn_id)
    )
    return _filtered(q, runs, rubric, judge)


def judgment_rows(
    ref: StoreRef,
    runs: Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
    include_text: bool = False,
) -> pd.DataFrame:
    """One row per judgment with its turn's exchange and role (``include_text``: the turn's
    content and reasoning too): judgment_id, conversation_id, turn_id, turn_index, exchange,
    turn_role, rubric_id, rubric_hash, criterion_id, risk_area, judge, prompt_version, applicable,
    verdict, score."""
    return read_frame(_judgment_select(runs, rubric, judge, include_text), ref)


def iter_judgment_rows(
    ref: StoreRef,
    runs: Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
    chunksize: int = 250_000,
) -> Generator[pd.DataFrame]:
    """``judgment_rows`` a chunk at a time. A SQLite store yields them in the order they were
    written, ``chunksize`` rows at a time; other databases in one frame."""
    q = _judgment_select(runs, rubric, judge, include_text=False)
    path = sqlite_path(ref)
    if path is not None:
        yield from iter_sqlite_frames(q.order_by(JUDGMENT_ROWID), path, chunksize)
    else:
        yield read_frame(q, ref)


def _count_if(condition: ColumnElement[bool]) -> ColumnElement[Any]:
    # A CASE rather than SUM(boolean): PostgreSQL cannot sum booleans.
    return func.sum(case((condition, 1), else_=0))


def criterion_counts(
    ref: StoreRef,
    runs: Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
    scores: Mapping[str, float] = PASS_PARTIAL_FAIL.scores,
) -> pd.DataFrame:
    """Conversation x rubric x criterion x judge counts, aggregated by the database (``GROUP BY``):
    conversation_id, rubric_id, criterion_id, risk_area, judge, n_rated, n_fail, n_partial,
    n_error, n_other, n_scored, score_sum. ``scores`` maps the levels that have a score (the
    pass/partial/fail scale by default) to it; n_scored and score_sum count those."""
    rated = and_(J.applicable, J.verdict.is_not(None), J.verdict != ERROR)
    score = case({level: value for level, value in scores.items()}, value=J.verdict)
    counts = {
        "n_rated": rated,
        "n_fail": and_(rated, J.verdict == FAIL),
        "n_partial": and_(rated, J.verdict == PARTIAL),
        "n_error": J.verdict == ERROR,
        "n_other": and_(rated, J.verdict.not_in(list(scores))),
        "n_scored": and_(rated, score.is_not(None)),
    }
    q = select(
        J.conversation_id,
        J.rubric_id,
        J.criterion_id,
        # risk_area follows from the criterion; MAX() only satisfies databases that check grouping.
        func.max(J.risk_area).label("risk_area"),
        J.judge,
        *(_count_if(condition).label(name) for name, condition in counts.items()),
        func.coalesce(func.sum(case((rated, score))), 0.0).label("score_sum"),
    ).join_from(JUDGMENTS, CONVERSATIONS, C.id == J.conversation_id)
    q = _filtered(q, runs, rubric, judge).group_by(
        J.conversation_id, J.rubric_id, J.criterion_id, J.judge
    )
    return read_frame(q, ref)


def turn_failures(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """conversation_id, turn_index and any_fail (1 when some criterion failed on that turn, 0 when
    none did, empty when no verdict was given) for the conversations that store reasoning text."""
    with_reasoning = select(T.conversation_id).where(T.reasoning.is_not(None), T.reasoning != "")
    q = (
        select(
            J.conversation_id,
            J.turn_index,
            func.max(case((J.verdict == FAIL, 1), (J.verdict.is_not(None), 0))).label("any_fail"),
        )
        .join_from(JUDGMENTS, CONVERSATIONS, C.id == J.conversation_id)
        .where(J.conversation_id.in_(with_reasoning), J.rubric_id.not_in(PERSONA_RUBRICS))
        .group_by(J.conversation_id, J.turn_index)
    )
    if runs is not None:
        q = q.where(C.run_id.in_(list(runs)))
    return read_frame(q, ref)


def failing_examples(
    ref: StoreRef,
    runs: Sequence[str] | None,
    *,
    rubric: str,
    criterion: str,
    limit: int,
) -> pd.DataFrame:
    """Up to ``limit`` failing verdicts on one criterion, by judgment id: target, condition,
    scenario_id, criterion_id, turn_index, the turn's content, the judge's rationale and the
    conversation_id (the report links each to a page of its transcript)."""
    q = (
        select(
            C.target,
            C.condition,
            C.scenario_id,
            J.criterion_id,
            J.turn_index,
            T.content,
            J.rationale,
            J.conversation_id,
        )
        .join_from(JUDGMENTS, CONVERSATIONS, C.id == J.conversation_id)
        .join(TURNS, T.id == J.turn_id)
        .where(
            J.verdict == FAIL,
            J.criterion_id == criterion,
            J.rubric_id == rubric,
        )
    )
    if runs is not None:
        q = q.where(C.run_id.in_(list(runs)))
    return read_frame(q.order_by(J.id).limit(limit), ref)


# --------------------------------------------------------------------------- the judging runner


class JudgedUnit(NamedTuple):
    """A unit (a turn, or a whole conversation when turn_id is None) that a judge has verdicts
    for under one rubric hash."""

    conversation_id: str
    turn_id: str | None
    judge: str
    prompt_version: str
    has_error: bool  # some verdict of it is ``error``


def judged_units(
    store: Store, conversation_ids: Sequence[str], rubric_hash: str, judges: Sequence[str]
) -> list[JudgedUnit]:
    """Which units of these conversations each judge has rated: keys only (a big store has
    millions of rows), one query per 500 conversations."""
    has_error = func.max(case((J.verdict == ERROR, 1), else_=0))
    out: list[JudgedUnit] = []
    with store.engine.connect() as conn:
        for i in range(0, len(conversation_ids), ID_CHUNK):
            q = (
                select(J.conversation_id, J.turn_id, J.judge, J.prompt_version, has_error)
                .where(
                    J.conversation_id.in_(list(conversation_ids[i : i + ID_CHUNK])),
                    J.rubric_hash == rubric_hash,
                    J.judge.in_(list(judges)),
                )
                .group_by(J.conversation_id, J.turn_id, J.judge, J.prompt_version)
            )
            out += [JudgedUnit(c, t, j, v, bool(e)) for c, t, j, v, e in conn.execute(q)]
    return out


def unit_judgments(
    store: Store,
    conversation_id: str,
    turn_id: str | None,
    *,
    judge: str,
    prompt_version: str,
    rubric_hash: str,
) -> list[Judgment]:
    """The stored verdicts of one judged unit, by criterion id."""
    q = (
        select(Judgment)
        .where(
            J.conversation_id == conversation_id,
            J.turn_id == turn_id if turn_id is not None else J.turn_id.is_(None),
            J.judge == judge,
            J.prompt_version == prompt_version,
            J.rubric_hash == rubric_hash,
        )
        .order_by(J.criterion_id)
    )
    with store.session() as s:
        return list(s.scalars(q).all())


def judgment_versions(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per rubric_id x rubric_hash x judge x prompt_version with its number of judgments
    (``n``) and when the last was written (``last``): analysis never pools two versions."""
    q = (
        select(
            J.rubric_id,
            J.rubric_hash,
            J.judge,
            J.prompt_version,
            func.count().label("n"),
            func.max(J.created_at).label("last"),
        )
        .join_from(JUDGMENTS, CONVERSATIONS, C.id == J.conversation_id)
        .group_by(J.rubric_id, J.rubric_hash, J.judge, J.prompt_version)
    )
    return read_frame(_filtered(q, runs, None, None), ref)
