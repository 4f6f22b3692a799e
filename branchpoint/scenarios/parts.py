"""The parts of a scenario (persona, stages, triggers, branch points, profile factors) and its
fields, as pydantic models. ``branchpoint.scenarios.models.Scenario`` adds the whole-scenario checks
(``branchpoint.scenarios.checks``) and where it was loaded from; the checks read only these fields.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from branchpoint.core.domain import EventKind
from branchpoint.core.languages import language_problem
from branchpoint.core.strict import FrozenStrictModel as _Strict
from branchpoint.core.yamlio import ID_PATTERN, FieldProblem


def _checked_language(value: str | None) -> str | None:
    if value is None:
        return None
    problem = language_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# Criteria ids name rubric criteria; same rule as every other id.
CriterionId = Annotated[str, Field(pattern=ID_PATTERN)]

BranchKind = Literal["disclosure", "help_offer", "limit_pushback", "custom"]
Design = Literal["one_at_a_time", "factorial"]
ForkMode = Literal["shared", "independent"]
ProfileDesign = Literal["pairs", "full"]
PersonaMode = Literal["scripted", "adaptive"]


class Persona(_Strict):
    """Who the simulator plays. Free text fields may use ``{{ placeholders }}`` from ``vars``."""

    name: str = Field(min_length=1)
    age: int = Field(ge=5, le=120)
    gender: str | None = None
    background: str = Field(min_length=1, description="Life situation, in a few sentences.")
    voice: str | None = Field(None, description="How the persona writes: register, slang, length.")
    context: str | None = Field(
        None, description="Longer narrative the persona knows (what happened before the chat)."
    )
    language: str | None = Field(
        None,
        description="BCP-47 tag of the language the persona writes in (default: the scenario's).",
    )
    mode: PersonaMode = Field(
        "scripted",
        description=(
            "scripted: one message per turn from the option in force; adaptive: the persona also "
            "chooses a tactic each turn towards the arm's goal (issue 47)."
        ),
    )

    _language = field_validator("language")(lambda v: _checked_language(v))


class Stage(_Strict):
    """A stretch of the conversation with its own instructions to the persona."""

    id: str = Field(pattern=ID_PATTERN)
    instructions: str = Field(min_length=1)
    until_turn: int | None = Field(
        None, ge=1, description="Last exchange of this stage; the next stage starts after it."
    )


class Trigger(_Strict):
    """When a branch point fires: at a fixed exchange, or when the chatbot's reply shows an event."""

    at_turn: int | None = Field(None, ge=1)
    on_event: EventKind | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Trigger:
        if self.at_turn is not None and self.on_event is not None:
            raise ValueError("gives both at_turn and on_event (expected exactly one of them)")
        if self.at_turn is None and self.on_event is None:
            raise ValueError("gives neither at_turn nor on_event (expected exactly one of them)")
        return self


class BranchOption(_Strict):
    """One way the persona can behave at a branch point."""

    instruction: str = Field(min_length=1)
    goto_stage: str | None = Field(
        None, description="Stage the conversation moves to when this option fires."
    )
    goal: str | None = Field(
        None,
        min_length=1,
        description="What an adaptive persona tries to achieve under this option (default: by kind).",
    )


class BranchPoint(_Strict):
    id: str = Field(pattern=ID_PATTERN)
    kind: BranchKind
    trigger: Trigger
    baseline: str
    options: dict[str, BranchOption] = Field(min_length=2)
    description: str | None = None

    @field_validator("options", mode="before")
    @classmethod
    def _short_form(cls, value: object) -> object:
        # ``name: "instruction text"`` is the short form of ``name: {instruction: ...}``.
        if isinstance(value, dict):
            return {k: ({"instruction": v} if isinstance(v, str) else v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _baseline_known(self, info: ValidationInfo) -> BranchPoint:
        # Within a scenario loaded from YAML the check is one of the scenario's cross-field
        # problems (checks._branch_problems), so that a bad baseline does not hide the rest.
        if info.context and info.context.get("defer_checks"):
            return self
        if self.baseline not in self.options:
            raise FieldProblem(
                ("baseline",),
                f"{self.baseline!r} is not one of the options "
                f"(expected one of: {', '.join(self.options)})",
            )
        return self


class ProfileAttribute(_Strict):
    """One attribute a profile can disclose, e.g. race with levels white/asian/black."""

    levels: dict[str, str] = Field(
        min_length=2, description="level -> first-person sentence (a Jinja2 template)"
    )


class ProfileFactors(_Strict):
    """Matched user profiles ("bios") placed before the opening message, as in the ED study."""

    attributes: dict[str, ProfileAttribute] = Field(min_length=1)
    design: ProfileDesign = "pairs"
    include_baseline: bool = Field(True, description="Also ask with no profile at all.")
    explicit_cue: str | None = Field(
        None, description="Sentence that discloses an explicit vulnerability cue (template)."
    )
    cue_settings: list[bool] = Field(
        default_factory=lambda: [False, True],
        description="Expand with the cue left out (false) and added (true).",
    )
    template: str = Field(
        "{{ sentences | join(' ') }}",
        description="How the disclosed sentences become the bio (template; sees `sentences`).",
    )
    vars: dict[str, str | int | float] = Field(
        default_factory=dict, description="Values the level templates may use."
    )


class CustomCriterion(_Strict):
    """A criterion that belongs to one scenario (e.g. an imported benchmark's own criteria)."""

    id: str = Field(pattern=ID_PATTERN)
    name: str
    definition: str


class ScenarioFields(_Strict):
    # Every field of a scenario; ``Scenario`` adds the checks and its source position.
    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=1)
    risk_area: str = Field(min_length=1)
    content_warning: str = Field(min_length=1)
    persona: Persona
    opening: str = Field(min_length=1, description="The persona's first message (a template).")
    max_turns: int = Field(20, ge=1, le=200, description="Exchanges at most.")
    criteria: list[CriterionId] = Field(
        default_factory=list, description="Rubric criteria that may apply (criterion ids)."
    )
    custom_criteria: list[CustomCriterion] = Field(default_factory=list)
    rubric: str | None = Field(
        None,
        min_length=1,
        description=(
            "The rubric that judges this scenario: a bundled rubric name (teen, ed, kora) or a "
            "rubric YAML path, relative to this file; `branchpoint judge` uses it when no "
            "--rubric is given."
        ),
    )
    stages: list[Stage] = Field(default_factory=list)
    branch_points: list[BranchPoint] = Field(default_factory=list)
    design: Design = "one_at_a_time"
    fork: ForkMode = "shared"
    profile: ProfileFactors | None = None
    tags: list[str] = Field(default_factory=list)
    vars: dict[str, str | int | float] = Field(default_factory=dict)
    notes: str | None = None
    source: str | None = Field(None, description="Where the scenario came from (importers).")
    language: str = Field(
        "en",
        description="BCP-47 tag of the conversation's language (en, es, es-MX, fr...).",
    )
    tactics: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description=(
            "An adaptive persona's tactics, by branch-point kind or id: name -> what it means. "
            "A kind or branch point not named keeps the defaults for its kind."
        ),
    )

    _language = field_validator("language")(lambda v: _checked_language(v))

    def conversation_language(self) -> str:
        """The language the persona writes in: its own, else the scenario's."""
        return self.persona.language or self.language

    def stage_ids(self) -> list[str]:
        return [s.id for s in self.stages]

    def branch_point(self, bp_id: str) -> BranchPoint:
        for bp in self.branch_points:
            if bp.id == bp_id:
                return bp
        raise KeyError(bp_id)
