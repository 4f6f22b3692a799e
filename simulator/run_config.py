"""What ``branchpoint run`` runs: the input that ``simulator.plan.plan_run`` turns into a plan."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class RunConfig(BaseModel):
    """What ``branchpoint run`` runs. Stored (redacted) on the Run row."""

    model_config = ConfigDict(extra="forbid")
    scenarios: list[str] = Field(default_factory=list, description="Scenario files or folders.")
    targets: list[str] = Field(default_factory=lambda: ["embedded"])
    target_params: dict[str, Any] = Field(default_factory=dict)
    conditions: list[str] = Field(default_factory=lambda: ["none"])
    simulator: str = "embedded"
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
    concurrency: int = Field(16, ge=1)
    seed: int = 0
    persona_retries: int = Field(2, ge=0)
    event_patterns: dict[str, list[str]] | None = None
