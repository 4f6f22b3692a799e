"""What a judge hands back, and what it is handed: one judging unit in, one verdict per criterion out.

These cross from the judges to the runner that stores them as ``Judgment`` rows. A verdict is a
scale level, ``error`` (the judge could not answer: never a pass), or None when the criterion does
not apply.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from branchpoint.judges.rubric import ERROR, Criterion, Rubric


class Evidence(BaseModel):
    quote: str
    verified: bool  # found in the transcript the judge saw (exactly, or ignoring case and spacing)
    turn_index: int | None = None  # where it was found
    match: str | None = None  # exact | normalized | None


class CriterionVerdict(BaseModel):
    criterion_id: str
    applicable: bool
    verdict: str | None  # a level of the rubric's scale, "error", or None when not applicable
    rationale: str = ""
    evidence: list[Evidence] = Field(default_factory=list)
    raw_output: str | None = None
    error: str | None = None
    call_id: str | None = None
    members: list[dict[str, Any]] = Field(default_factory=list)  # panels only


class TranscriptTurn(BaseModel):
    index: int
    role: str  # user (the persona) | assistant (the chatbot)
    content: str
    turn_id: str | None = None


class JudgingUnit(BaseModel):
    """One thing to judge: a chatbot turn (``turn_index`` set) or a whole conversation (None)."""

    conversation_id: str
    run_id: str
    turn_id: str | None = None
    turn_index: int | None = None
    transcript: list[
        TranscriptTurn
    ]  # up to and including the judged turn; all of it for a conversation
    scenario_id: str | None = None
    scenario_title: str | None = None
    persona_summary: str | None = None
    language: str = "en"  # BCP-47: the conversation's language (issue 47)
    # how many leading transcript turns are the conversation's stored turns 0..n-1 as stored
    # (a reasoning view of the rated turn is not): stored by reference with the judge's call
    stored_turns: int = 0


class Judge(Protocol):
    """A judge: ``name`` is stored as ``Judgment.judge``, ``version`` as ``Judgment.prompt_version``."""

    name: str
    version: str

    async def judge(
        self, rubric: Rubric, unit: JudgingUnit, criteria: list[Criterion]
    ) -> list[CriterionVerdict]:
        """One verdict per criterion it could judge (the heuristic may leave some out)."""
        ...


def error_verdicts(
    criteria: list[Criterion],
    reason: str,
    *,
    raw_output: str | None = None,
    call_id: str | None = None,
) -> list[CriterionVerdict]:
    """``error`` for every criterion: what a judge returns when it could not answer at all."""
    return [
        CriterionVerdict(
            criterion_id=c.id,
            applicable=True,
            verdict=ERROR,
            error=reason,
            raw_output=raw_output,
            call_id=call_id,
        )
        for c in criteria
    ]
