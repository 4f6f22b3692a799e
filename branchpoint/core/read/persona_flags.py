"""Persona turns to look at: those whose manipulation check says *not enacted*, and those rated
below ``mostly`` realistic (issue 36). The TUI marks them in the transcript and filters on them;
the run summary counts them.

The ratings are ``branchpoint.judges.persona_checks``' judgment rows (rubric ``enactment``, criterion = the
branch point; rubric ``realism``, criterion ``persona_realism``). A turn may hold several ratings
of one criterion (two raters, or one rater again after its rubric changed); one is chosen by the
rule ``branchpoint.core.read.realisation`` applies to the enactment it reports, so that a turn marked here is
the turn counted there: a verdict before an error, a model rater before the offline heuristic,
then by rater name, and of one rater's ratings the newest. The choice is one window function in
SQL, so the filter and the counts are queries (no table is loaded) on SQLite and PostgreSQL alike.

    flags = turn_flags(store, "conv-1")   # {turn_index: TurnFlags(not_enacted=["disclosure"], ...)}
    counts = persona_flag_counts(store, "run-1")["run-1"]
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import case, func, select
from sqlalchemy.sql import Select

from branchpoint.core.domain import ENACTMENT_LEVELS, ENACTMENT_RUBRIC, NOT_ENACTED
from branchpoint.core.human_labels import REALISM_LEVELS, REALISM_RUBRIC, REALISM_TURN
from branchpoint.core.read.realisation import HEURISTIC_RATER
from branchpoint.core.records import Judgment
from branchpoint.core.scales import ERROR
from branchpoint.core.store import Store

J = Judgment.__table__.c  # type: ignore[attr-defined]

# "Low realism": rated below "mostly" (the realism scale is very / mostly / mixed / not).
LOW_REALISM: tuple[str, ...] = REALISM_LEVELS[REALISM_LEVELS.index("mostly") + 1 :]
_LEVELS = {ENACTMENT_RUBRIC: ENACTMENT_LEVELS, REALISM_RUBRIC: REALISM_LEVELS}


class TurnFlags(BaseModel):
    """What to mark on one persona turn."""

    not_enacted: list[str] = Field(default_factory=list)  # branch points whose check said so
    realism: str | None = None  # the chosen realism rating, when it is low


class PersonaFlagCounts(BaseModel):
    """Persona turns of a run with a rating, and how many of them are flagged."""

    enactment_rated: int = 0  # persona turn x fired branch point with a manipulation check
    not_enacted: int = 0
    realism_rated: int = 0  # persona turns with a realism rating
    low_realism: int = 0

    def line(self, regenerated: int = 0) -> str | None:
        """The counts in the words every summary uses (run, sweep, live view), with the persona
        turns the realism gate regenerated (low-realism turns caught before they were kept);
        None when there is nothing to count, so a run without checks says nothing of them."""
        parts = []
        if self.enactment_rated:
            parts.append(f"{self.not_enacted} of {self.enactment_rated} checks not enacted")
        if self.realism_rated:
            parts.append(f"{self.low_realism} of {self.realism_rated} low in realism")
        if regenerated:
            parts.append(f"{regenerated} regenerated below realism_min")
        return "persona turns: " + ", ".join(parts) if parts else None


def _chosen(rubric: str) -> Any:
    """The one rating of each (conversation, turn, criterion) under ``rubric`` (see the module)."""
    rank = func.row_number().over(
        partition_by=(J.conversation_id, J.turn_index, J.criterion_id),
        order_by=(
            case((J.verdict == ERROR, 1), else_=0),
            case((J.judge == HEURISTIC_RATER, 1), else_=0),
            J.judge,
            J.created_at.desc(),
            J.id.desc(),
        ),
    )
    where = [J.rubric_id == rubric, J.verdict.in_([*_LEVELS[rubric], ERROR])]
    if rubric == REALISM_RUBRIC:
        where.append(J.criterion_id == REALISM_TURN)
    ranked = select(
        J.conversation_id, J.run_id, J.turn_index, J.criterion_id, J.verdict, rank.label("rank")
    ).where(*where)
    sub = ranked.subquery()
    return select(sub).where(sub.c.rank == 1).subquery()


def _flagged(rubric: str) -> Any:
    chosen = _chosen(rubric)
    bad = [NOT_ENACTED] if rubric == ENACTMENT_RUBRIC else list(LOW_REALISM)
    return chosen, chosen.c.verdict.in_(bad)


def not_enacted_conversations() -> Select[Any]:
    """The conversations with at least one persona turn whose manipulation check says not
    enacted (a query, for ``conversation.id IN (...)``)."""
    chosen, bad = _flagged(ENACTMENT_RUBRIC)
    return select(chosen.c.conversation_id).where(bad)


def low_realism_conversations() -> Select[Any]:
    """The conversations with at least one persona turn rated below ``mostly`` realistic."""
    chosen, bad = _flagged(REALISM_RUBRIC)
    return select(chosen.c.conversation_id).where(bad)


def turn_flags(store: Store, conversation_id: str) -> dict[int, TurnFlags]:
    """The flagged persona turns of one conversation, by turn index (unflagged turns absent)."""
    out: dict[int, TurnFlags] = {}
    with store.engine.connect() as conn:
        for rubric in (ENACTMENT_RUBRIC, REALISM_RUBRIC):
            chosen, bad = _flagged(rubric)
            q = (
                select(chosen.c.turn_index, chosen.c.criterion_id, chosen.c.verdict)
                .where(bad, chosen.c.conversation_id == conversation_id)
                .order_by(chosen.c.turn_index, chosen.c.criterion_id)
            )
            for index, criterion, verdict in conn.execute(q):
                if index is None:
                    continue
                flags = out.setdefault(int(index), TurnFlags())
                if rubric == ENACTMENT_RUBRIC:
                    flags.not_enacted.append(str(criterion))
                else:
                    flags.realism = str(verdict)
    return out


def persona_flag_counts(store: Store, run_id: str | None = None) -> dict[str, PersonaFlagCounts]:
    """Run id -> how many of its persona ratings are not enacted / low realism, for ``run_id`` or
    every run with persona ratings (errors not counted as rated: a rater that could not answer
    said nothing). The ratings are read as a range of ``ix_judgments_failing`` by verdict, not by
    scanning every chatbot verdict."""
    counts: dict[str, dict[str, int]] = {}
    with store.engine.connect() as conn:
        for rubric, rated, flagged in (
            (ENACTMENT_RUBRIC, "enactment_rated", "not_enacted"),
            (REALISM_RUBRIC, "realism_rated", "low_realism"),
        ):
            chosen, bad = _flagged(rubric)
            q = (
                select(
                    chosen.c.run_id,
                    func.count(),
                    func.coalesce(func.sum(case((bad, 1), else_=0)), 0),
                )
                .where(chosen.c.verdict != ERROR)
                .group_by(chosen.c.run_id)
            )
            if run_id is not None:
                q = q.where(chosen.c.run_id == run_id)
            for run, n, n_bad in conn.execute(q):
                row = counts.setdefault(str(run), {})
                row[rated], row[flagged] = int(n), int(n_bad)
    return {run: PersonaFlagCounts(**row) for run, row in counts.items()}


def persona_flags_line(store: Store, run_id: str) -> str | None:
    """``run_id``'s not-enacted and low-realism persona turns in the summaries' words (None when
    none of its persona turns has a rating)."""
    counts = persona_flag_counts(store, run_id).get(run_id) or PersonaFlagCounts()
    return counts.line(gate_regenerated(store, run_id))


GATE_REASON = "below realism_min"  # in the reason the persona simulator stores with a retry


def gate_regenerated(store: Store, run_id: str) -> int:
    """Persona turns of ``run_id`` that the realism gate sent back at least once (their retry
    reasons say so; a role-break retry is not counted)."""
    from branchpoint.core.read.schema import CONVERSATIONS, TURNS

    t, c = TURNS.c, CONVERSATIONS.c
    q = (
        select(t.retry_reasons)
        .join_from(TURNS, CONVERSATIONS, c.id == t.conversation_id)
        .where(c.run_id == run_id, t.role == "user", t.retries > 0)
    )
    with store.engine.connect() as conn:
        return sum(
            any(GATE_REASON in str(why) for why in (reasons or []))
            for (reasons,) in conn.execute(q)
        )
