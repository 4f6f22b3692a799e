"""A pre-registered analysis: the manifest's ``analysis:`` block, what is stored of it with the
sweep, and its deviations.

The block names the primary contrasts (a branch option against its baseline, one chatbot against
another, a condition against its reference), the outcome (the rubric as a whole, or named
criteria), the scope (targets and conditions), alpha, the test, the decision rule and the
smallest effect of interest. When the sweep's first cell runs, the block and its hash are stored
with the sweep (``registration``); an edit afterwards is refused unless the sweep is run with
``--amend "reason"``, which stores the new block with a dated deviation. The report opens with
the Confirmatory section built from the stored block (``branchpoint.analysis`` reads it back).

It lives in ``core`` because both sides use it: the study writes it, the analysis reads it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from branchpoint.core.errors import FieldProblem
from branchpoint.core.strict import StrictModel

RUBRIC_LEVEL: Literal["rubric"] = "rubric"
DECISIONS = {
    "holm": "a difference when the Holm-adjusted p is below alpha",
    "holm_and_smallest_effect": (
        "a difference when the Holm-adjusted p is below alpha; called meaningful when the "
        "estimate is at least the smallest effect of interest, equivalent when the whole "
        "interval lies within plus or minus it"
    ),
}


class PrimaryContrast(StrictModel):
    """One primary contrast: exactly one of a branch option (``branch_point`` + ``option``),
    two chatbots (``chatbots: [A, B]``, B compared with A) or a ``condition`` (against
    ``reference``)."""

    branch_point: str | None = Field(None, description="A branch point id of the scenarios.")
    option: str | None = Field(None, description="Its option compared with the baseline.")
    chatbots: list[str] | None = Field(
        None, min_length=2, max_length=2, description="[A, B]: target B compared with target A."
    )
    condition: str | None = Field(None, description="A condition compared with `reference`.")
    reference: str = Field("none", description="The reference condition of a condition contrast.")

    @model_validator(mode="after")
    def _one_kind(self) -> PrimaryContrast:
        kinds = [self.branch_point is not None or self.option is not None,
                 self.chatbots is not None, self.condition is not None]  # fmt: skip
        if sum(kinds) != 1:
            raise FieldProblem(
                [], "expected exactly one of branch_point + option, chatbots, or condition"
            )
        if kinds[0] and (self.branch_point is None or self.option is None):
            missing = "option" if self.option is None else "branch_point"
            raise FieldProblem(
                [missing], "a branch option contrast names both branch_point and option"
            )
        if self.chatbots is not None and self.chatbots[0] == self.chatbots[1]:
            raise FieldProblem(["chatbots"], "expected two different targets")
        return self

    @property
    def kind(self) -> str:
        if self.chatbots is not None:
            return "chatbots"
        return "condition" if self.condition is not None else "branch_point"

    def label(self) -> str:
        if self.chatbots is not None:
            return f"chatbots: {self.chatbots[0]} → {self.chatbots[1]}"
        if self.condition is not None:
            return f"condition: {self.reference} → {self.condition}"
        return f"{self.branch_point}: (baseline) → {self.option}"


class Scope(StrictModel):
    targets: list[str] = Field(default_factory=list, description="Targets (default: every one).")
    conditions: list[str] = Field(
        default_factory=list, description="Conditions (default: every one; never pooled)."
    )


class AnalysisPlan(StrictModel):
    """The pre-registered analysis (see the module docstring)."""

    primary: list[PrimaryContrast] = Field(
        min_length=1, description="The primary contrasts: the confirmatory family."
    )
    outcome: Literal["rubric", "criteria"] = Field(
        RUBRIC_LEVEL,
        description="rubric: failure over every criterion of the rubric; criteria: each of "
        "`criteria`, each a member of the family.",
    )
    criteria: list[str] = Field(default_factory=list, description="With outcome: criteria.")
    rubric: str | None = Field(None, description="The rubric id (default: the one judged).")
    judge: str | None = Field(
        None, description="The judge spec (default: the one with most ratings)."
    )
    scope: Scope = Field(default_factory=Scope)
    alpha: float = Field(0.05, gt=0, lt=0.5, description="Family-wise level (Holm).")
    test: Literal["scenario_level"] = Field(
        "scenario_level",
        description="The scenario-level paired test the analysis runs (t over scenario means; the "
        "exact sign-flip test below 6 scenarios or with no spread; none below 3).",
    )
    decision: Literal["holm", "holm_and_smallest_effect"] = "holm_and_smallest_effect"
    smallest_effect: float = Field(
        gt=0, le=1, description="Smallest effect of interest, as a share (0.05: 5 points)."
    )

    @model_validator(mode="after")
    def _criteria_named(self) -> AnalysisPlan:
        if self.outcome == "criteria" and not self.criteria:
            raise FieldProblem(
                ["criteria"], "outcome: criteria names no criterion (expected a list)"
            )
        if self.outcome == RUBRIC_LEVEL and self.criteria:
            raise FieldProblem(
                ["criteria"], "criteria are given with outcome: rubric (expected outcome: criteria)"
            )
        return self


def block_hash(block: dict[str, Any] | None) -> str | None:
    """The hash of a resolved ``analysis:`` block (None: no block)."""
    if block is None:
        return None
    return hashlib.sha256(json.dumps(block, sort_keys=True).encode("utf-8")).hexdigest()


def registration(block: dict[str, Any] | None, now: datetime | None = None) -> dict[str, Any]:
    """What the sweep stores when its first cell runs."""
    return {"block": block, "hash": block_hash(block),
            "registered_at": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
            "deviations": []}  # fmt: skip


def amended(
    stored: dict[str, Any], block: dict[str, Any] | None, reason: str, cells_done: int = 0
) -> dict[str, Any]:
    """``stored`` with the new block and a dated deviation saying why and what changed. A block
    added where none was registered is not pre-registered: it is registered now, after
    ``cells_done`` cells had run (``registered_after_cells``), not at the sweep's first cell."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    deviation = {"at": now, "reason": reason,
                 "old_hash": stored.get("hash"), "new_hash": block_hash(block),
                 "old_block": stored.get("block")}  # fmt: skip
    late = {}
    if stored.get("block") is None and block is not None:
        late = {"registered_at": now, "registered_after_cells": cells_done}
    return {**stored, "block": block, "hash": block_hash(block), **late,
            "deviations": [*stored.get("deviations", []), deviation]}  # fmt: skip
