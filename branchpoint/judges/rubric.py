"""The rubric format: criteria, a rating scale, a scope and a score rule, as pydantic models.

A rubric is data a clinician can review. Unknown keys are rejected (``extra="forbid"``), every level
of the scale must have an anchor text in every criterion, and heuristic patterns must compile, so a
typo is an error with a file, line and field, never a silently ignored rule.

The scales themselves (levels, scores, refusal) are defined in :mod:`branchpoint.core.scales`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from branchpoint.core.scales import (
    ALL_LEVELS,
    ERROR,
    REFUSAL,
    SCALES,
    RefusalPolicy,
    ScaleDef,
    ScaleName,
)
from branchpoint.core.strict import FrozenStrictModel as _Strict

# FieldProblem points an error raised by a validator at one field, so that it gets that field's line.
from branchpoint.core.yamlio import ID_PATTERN, FieldProblem, compiling_regexes

Scope = Literal["per_turn", "conversation"]
ScoreRule = Literal["failure_rate", "safety_score"]

_RULE_OF_SCALE: dict[str, ScoreRule] = {
    "pass_partial_fail": "failure_rate",
    "risk_levels": "safety_score",
}

# Which scale a criterion is being validated against: set by Rubric while it validates its
# criteria, so that anchor and pattern errors point at the criterion's own line in the file.
_SCALE_IN_FORCE: ContextVar[ScaleDef | None] = ContextVar("_SCALE_IN_FORCE", default=None)


class Patterns(_Strict):
    """Heuristic rules for the offline judge. Regexes, matched case-insensitively.

    ``applies_if_any`` is matched against what the persona has said up to and including the judged
    exchange; the ``<level>_if_any`` lists against the judged chatbot reply. ``otherwise`` is the
    verdict when the criterion applies and no level pattern matched; it may not be the best level
    (a heuristic never passes a reply for lack of evidence).
    """

    applies_if_any: list[str] = Field(default_factory=list)
    fail_if_any: list[str] = Field(default_factory=list)
    partial_if_any: list[str] = Field(default_factory=list)
    pass_if_any: list[str] = Field(default_factory=list)
    high_if_any: list[str] = Field(default_factory=list)
    medium_if_any: list[str] = Field(default_factory=list)
    low_if_any: list[str] = Field(default_factory=list)
    refusal_if_any: list[str] = Field(default_factory=list)
    otherwise: str | None = None

    _check = field_validator(
        "applies_if_any", "fail_if_any", "partial_if_any", "pass_if_any",
        "high_if_any", "medium_if_any", "low_if_any", "refusal_if_any",
    )(compiling_regexes)  # fmt: skip

    @model_validator(mode="after")
    def _levels_on_scale(self) -> Patterns:
        scale = _SCALE_IN_FORCE.get()
        if scale is None:
            return self
        for level in ALL_LEVELS:
            if getattr(self, f"{level}_if_any") and level not in scale.all_levels:
                expected = ", ".join(f"{lv}_if_any" for lv in scale.all_levels)
                raise FieldProblem(
                    (f"{level}_if_any",),
                    f"level {level!r} is not on the {scale.name} scale (expected one of: {expected}, applies_if_any)",
                )
        if self.otherwise is not None:
            if self.otherwise not in scale.all_levels:
                raise FieldProblem(
                    ("otherwise",),
                    f"unknown level {self.otherwise!r} (expected one of: {', '.join(scale.all_levels)})",
                )
            if self.otherwise == scale.best:
                raise FieldProblem(
                    ("otherwise",),
                    f"may not be the best level {scale.best!r}: a heuristic never passes a reply for lack "
                    f"of evidence (expected a worse level, or {scale.best}_if_any patterns)",
                )
        return self

    def level_patterns(self, level: str) -> list[str]:
        return list(getattr(self, f"{level}_if_any", []) or [])

    def usable(self, scale: ScaleDef) -> bool:
        """True when these patterns can yield a verdict on ``scale``."""
        return self.otherwise is not None or any(self.level_patterns(lv) for lv in scale.all_levels)


class Example(_Strict):
    """A worked example for reviewers and for the judge prompt (written by the project)."""

    reply: str = Field(min_length=1)
    verdict: str
    why: str | None = None
    user: str | None = None


class Criterion(_Strict):
    id: str = Field(pattern=ID_PATTERN)
    risk_area: str = Field(pattern=ID_PATTERN)
    name: str = Field(min_length=1)
    definition: str = Field(min_length=1)
    applies_when: str = Field(min_length=1)
    anchors: dict[str, str] = Field(description="One text per level of the rubric's scale.")
    patterns: Patterns | None = None
    examples: list[Example] = Field(default_factory=list)

    @field_validator("anchors")
    @classmethod
    def _anchor_per_level(cls, anchors: dict[str, str]) -> dict[str, str]:
        scale = _SCALE_IN_FORCE.get()
        if scale is None:
            return anchors
        expected = ", ".join(scale.all_levels)
        for level in anchors:
            if level not in scale.all_levels:
                raise ValueError(f"unknown level {level!r} (expected one of: {expected})")
        for level in scale.all_levels:
            if not (anchors.get(level) or "").strip():
                raise ValueError(
                    f"missing anchor for level {level!r} (expected one text for each of: {expected})"
                )
        return anchors

    @field_validator("examples")
    @classmethod
    def _example_levels(cls, examples: list[Example]) -> list[Example]:
        scale = _SCALE_IN_FORCE.get()
        if scale is None:
            return examples
        for i, ex in enumerate(examples):
            if ex.verdict not in scale.all_levels:
                raise FieldProblem(
                    (i, "verdict"),
                    f"{ex.verdict!r} is not a level (expected one of: {', '.join(scale.all_levels)})",
                )
        return examples


class Rubric(_Strict):
    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=1)
    version: str = Field(min_length=1)
    content_warning: str = Field(min_length=1)
    notes: str | None = None
    scale: ScaleName
    scope: Scope = "per_turn"
    score_rule: ScoreRule | None = Field(
        None,
        description="failure_rate (pass_partial_fail) or safety_score (risk_levels); from the scale when omitted.",
    )
    refusal_policy: RefusalPolicy = "exclude"
    criteria: list[Criterion] = Field(min_length=1)

    _hash: str | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _validate_under_scale(cls, data: Any, handler: Any) -> Rubric:
        name = data.get("scale") if isinstance(data, dict) else None
        scale = SCALES.get(name) if isinstance(name, str) else None
        token = _SCALE_IN_FORCE.set(scale)
        try:
            return handler(data)
        finally:
            _SCALE_IN_FORCE.reset(token)

    @field_validator("criteria")
    @classmethod
    def _unique_ids(cls, criteria: list[Criterion]) -> list[Criterion]:
        seen: dict[str, int] = {}
        for i, c in enumerate(criteria):
            if c.id in seen:
                raise FieldProblem(
                    (i, "id"),
                    f"criterion id {c.id!r} appears twice (expected unique ids; first is criteria[{seen[c.id]}])",
                )
            seen[c.id] = i
        return criteria

    @model_validator(mode="after")
    def _rules_fit_scale(self) -> Rubric:
        if self.score_rule is not None and self.score_rule != _RULE_OF_SCALE[self.scale]:
            raise FieldProblem(
                ("score_rule",),
                f"{self.score_rule} does not fit the {self.scale} scale (expected {_RULE_OF_SCALE[self.scale]})",
            )
        if self.refusal_policy != "exclude" and self.scale != "risk_levels":
            raise FieldProblem(
                ("refusal_policy",),
                f"{self.refusal_policy} applies only to the risk_levels scale (expected exclude, or no refusal_policy)",
            )
        return self

    # -- use ---------------------------------------------------------------------------------

    @property
    def scale_def(self) -> ScaleDef:
        return SCALES[self.scale]

    @property
    def rule(self) -> ScoreRule:
        return self.score_rule or _RULE_OF_SCALE[self.scale]

    @property
    def levels(self) -> tuple[str, ...]:
        return self.scale_def.all_levels

    def criterion(self, criterion_id: str) -> Criterion:
        for c in self.criteria:
            if c.id == criterion_id:
                return c
        raise KeyError(criterion_id)

    def criterion_ids(self) -> list[str]:
        return [c.id for c in self.criteria]

    def select(self, ids: list[str] | None) -> list[Criterion]:
        """The criteria named in ``ids`` that this rubric has (in rubric order); all when none match.

        A scenario lists the criteria that may apply; a scenario written for another rubric names
        none of ours, and then every criterion of this rubric is judged.
        """
        wanted = set(ids or [])
        chosen = [c for c in self.criteria if c.id in wanted]
        return chosen or list(self.criteria)

    def score(self, verdict: str | None) -> float | None:
        """The numeric score of a verdict under this rubric (refusals per ``refusal_policy``)."""
        if verdict is None or verdict == ERROR:
            return None
        scale = self.scale_def
        if verdict in scale.scores:
            return scale.scores[verdict]
        if verdict == REFUSAL:
            if self.refusal_policy == "count_as_low":
                return scale.scores[scale.best]
            if self.refusal_policy == "count_as_high":
                return scale.scores[scale.worst]
        return None

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Rubric:
        copy = super().model_copy(update=update, deep=deep)
        copy._hash = None  # an updated copy has other content
        return copy

    def rubric_hash(self) -> str:
        """sha256 (16 hex) of the canonical content: same rubric, same hash, whatever the YAML layout."""
        if self._hash is None:  # frozen model: the content cannot change after validation
            blob = json.dumps(
                self.model_dump(mode="json"),
                sort_keys=True,
                separators=(",", ":"),
                ensure_ascii=False,
            )
            self._hash = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
        return self._hash


def rubric_json_schema() -> dict[str, Any]:
    """The rubric format's JSON Schema, for editors (``branchpoint schema rubric``)."""
    schema = Rubric.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "branchpoint rubric",
        **{k: v for k, v in schema.items() if k != "title"},
    }
