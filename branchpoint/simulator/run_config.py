"""What ``branchpoint run`` runs: the input that ``branchpoint.simulator.plan.plan_run`` turns into a plan."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from branchpoint.gateway.limits import DEFAULT_TIMEOUT_S, ProviderLimits


class RunConfig(BaseModel):
    """What ``branchpoint run`` runs. Stored (redacted) on the Run row."""

    model_config = ConfigDict(extra="forbid")
    scenarios: list[str] = Field(default_factory=list, description="Scenario files or folders.")
    targets: list[str] = Field(default_factory=lambda: ["embedded"])
    target_params: dict[str, Any] = Field(default_factory=dict)
    conditions: list[str] = Field(default_factory=lambda: ["none"])
    # Each simulator plays every tree (simulator sensitivity); ``simulator=`` takes one spec.
    simulators: list[str] = Field(
        default_factory=lambda: ["embedded"],
        min_length=1,
        validation_alias=AliasChoices("simulators", "simulator"),
    )
    simulator_params: dict[str, Any] = Field(default_factory=dict)
    detector: str | None = None
    detector_params: dict[str, Any] = Field(default_factory=dict)
    replicates: int = Field(1, ge=1)
    max_turns: int | None = Field(None, ge=1, le=200)
    variants: list[str] = Field(default_factory=list, description="Only these variant ids.")
    fork: Literal["shared", "independent"] | None = None
    db: str | None = None
    run_id: str | None = None
    resume: bool = False
    concurrency: int = Field(
        16, ge=1, description="Conversations in flight; also API providers' calls in flight."
    )
    # Worker processes on this machine, each running a share of the trees with its share of
    # ``concurrency`` and of every limit ("auto": one per CPU; branchpoint/simulator/processes.py).
    processes: Annotated[int, Field(ge=1)] | Literal["auto"] = 1
    limits: dict[str, ProviderLimits] = Field(
        default_factory=dict,
        description="Per-provider limits by limit key (branchpoint.gateway.limits).",
    )
    # seconds one attempt of a model call may take (branchpoint.gateway.limits.DEFAULT_TIMEOUT_S)
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0)
    seed: int = 0
    persona_retries: int = Field(2, ge=0)
    # Issue 36: a persona turn the offline realism rater puts below this level is regenerated
    # (within persona_retries, every attempt stored as a model call); None: no gate (default).
    realism_min: Literal["very", "mostly", "mixed", "not"] | None = None
    # Issue 47: adaptive plays every simulator as ``adaptive@SPEC`` (scripted: as written; None:
    # each scenario's ``persona.mode``). A simulator written ``adaptive@SPEC`` is adaptive anyway,
    # so simulators ``[SPEC, adaptive@SPEC]`` make "adaptive vs scripted" a matched contrast.
    persona_mode: Literal["scripted", "adaptive"] | None = None
    event_patterns: dict[str, list[str]] | None = None

    @field_validator("simulators", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("simulators")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        # The same simulator twice would plan the same conversation ids twice.
        return list(dict.fromkeys(value))

    @property
    def simulator(self) -> str:
        """The first simulator (the reference of a sensitivity comparison)."""
        return self.simulators[0]
