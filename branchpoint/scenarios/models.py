"""The scenario authoring format: what a clinician writes, as pydantic models.

These models are the contract between the YAML files in ``branchpoint/scenarios/library`` (and the ones users
write), the variant expansion, and the engine. Unknown keys are rejected (``extra="forbid"``) so
that a typo is an error, never a silently ignored field.
"""

from __future__ import annotations

from pydantic import PrivateAttr, ValidationInfo, model_validator

from branchpoint.core.yamlio import ID_PATTERN, FieldProblem, Loc
from branchpoint.scenarios.checks import scenario_problems
from branchpoint.scenarios.parts import (
    BranchKind,
    BranchOption,
    BranchPoint,
    CriterionId,
    CustomCriterion,
    Design,
    EventKind,
    ForkMode,
    Persona,
    ProfileAttribute,
    ProfileDesign,
    ProfileFactors,
    ScenarioFields,
    Stage,
    Trigger,
)

__all__ = [
    "ID_PATTERN",
    "Scenario",
    "CriterionId",
    "BranchKind",
    "EventKind",
    "Design",
    "ForkMode",
    "ProfileDesign",
    "Persona",
    "Stage",
    "Trigger",
    "BranchOption",
    "BranchPoint",
    "ProfileAttribute",
    "ProfileFactors",
    "CustomCriterion",
    "ScenarioFields",
]


class Scenario(ScenarioFields):
    # Where the scenario was loaded from (not content: never part of the hash or the schema).
    _source_path: str | None = PrivateAttr(None)
    _source_pos: tuple[int, int] | None = PrivateAttr(None)  # line, col of its id
    _positions: dict[Loc, tuple[int, int]] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Scenario:
        # The YAML loader runs these checks itself to point at the exact line of each problem;
        # code that builds a Scenario directly gets the first problem as a validation error.
        if info.context and info.context.get("defer_checks"):
            return self
        problems = scenario_problems(self)
        if problems:
            loc, message = problems[0]
            raise FieldProblem(loc, message)
        return self

    @property
    def source_path(self) -> str | None:
        """The file this scenario was loaded from, if any."""
        return self._source_path

    @property
    def source_pos(self) -> tuple[int, int] | None:
        """Line and column (1-based) of the scenario's id in its file."""
        return self._source_pos

    def with_source(
        self,
        path: str | None,
        pos: tuple[int, int] | None = None,
        positions: dict[Loc, tuple[int, int]] | None = None,
    ) -> Scenario:
        self._source_path = path
        self._source_pos = pos
        self._positions = positions
        return self

    def position_of(self, loc: tuple[str | int, ...]) -> tuple[int, int]:
        """Line and column (1-based) of a value in the source file, or of its nearest parent."""
        positions = self._positions or {}
        for end in range(len(loc), -1, -1):
            if loc[:end] in positions:
                return positions[loc[:end]]
        return self._source_pos or (1, 1)
