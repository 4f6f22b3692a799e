"""The sweep manifest: one YAML file naming everything a study runs.

Read with :func:`load_manifest`, which goes through ``core.yamlio.load_model`` so that every
problem is one positioned line (``file:LINE:COL: field: problem (expected ...)``) and the
hostile-YAML limits apply. Scenario paths and globs are relative to the manifest's folder, so a
manifest means the same thing whatever directory it is run from.

Keys never appear in a manifest: a target names the environment variable that holds its key
(``key_env``), and the sweep reads it at run time.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.errors import UserError
from core.yamlio import ID_PATTERN, FieldProblem, LoadError, load_model

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# Params that would carry a secret into the manifest (and from there into the store).
SECRET_PARAMS = ("api_key", "key", "token", "authorization", "password")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScenarioSelection(_Strict):
    """Which scenarios and variants: files or folders, globs, and variant filters."""

    paths: list[str] = Field(default_factory=list, description="Scenario files or folders.")
    globs: list[str] = Field(
        default_factory=list, description="Glob patterns (relative to the manifest's folder)."
    )
    variants: list[str] = Field(default_factory=list, description="Only these variant ids.")
    exclude_variants: list[str] = Field(
        default_factory=list, description="Leave these variant ids out."
    )

    @model_validator(mode="after")
    def _some_source(self) -> ScenarioSelection:
        if not self.paths and not self.globs:
            raise FieldProblem(["paths"], "no scenarios named (expected paths or globs)")
        return self


class Price(_Strict):
    """USD per million tokens, for a model litellm's price map does not know (or prices wrong)."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class TargetLimits(_Strict):
    """How hard this target's provider may be driven (None: no cap)."""

    in_flight: int | None = Field(None, ge=1, description="Calls in flight at most.")
    rpm: float | None = Field(None, gt=0, description="Requests per minute at most.")
    tpm: float | None = Field(None, gt=0, description="Tokens per minute at most.")


class TargetEntry(_Strict):
    """One chatbot under test."""

    spec: str = Field(min_length=1, description="Model spec, e.g. litellm:openai/gpt-4o-mini.")
    params: dict[str, Any] = Field(default_factory=dict, description="Generation params.")
    key_env: str | None = Field(
        None,
        description="NAME of the environment variable that holds the API key (never the key).",
        json_schema_extra={"pattern": ENV_NAME_PATTERN},
    )
    limits: TargetLimits = Field(default_factory=TargetLimits)
    price: Price | None = None

    @field_validator("spec")
    @classmethod
    def _known_spec(cls, value: str) -> str:
        return _check_spec(value)

    @field_validator("key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not re.match(ENV_NAME_PATTERN, value):
            raise ValueError(
                f"{value[:12]!r} is not an environment variable name (expected the NAME of the "
                "variable holding the key, e.g. OPENAI_API_KEY)"
            )
        return value

    @field_validator("params")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if str(name).lower() in SECRET_PARAMS:
                raise FieldProblem(
                    [name],
                    "a key does not belong in the manifest (expected key_env: the NAME of "
                    "the environment variable holding it)",
                )
        return value


class ModelEntry(_Strict):
    """A model with its params (the detector)."""

    spec: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("spec")
    @classmethod
    def _known_spec(cls, value: str) -> str:
        return _check_spec(value)


class JudgeEntry(_Strict):
    """A judge and the rubrics it scores; ``live`` judges each target's conversations as soon
    as they are done, ``after`` in one pass once the whole sweep is done."""

    spec: str = Field(min_length=1, description="heuristic, or a model spec.")
    rubrics: list[str] = Field(min_length=1, description="Rubric names or files.")
    params: dict[str, Any] = Field(default_factory=dict)
    when: Literal["live", "after"] = "after"
    price: Price | None = None  # as a target's: a budget counts judging too

    @field_validator("spec")
    @classmethod
    def _known_judge(cls, value: str) -> str:
        return value if value == "heuristic" else _check_spec(value)


class Budget(_Strict):
    """Most to spend, in USD."""

    usd_total: float | None = Field(None, gt=0)
    usd_per_target: float | None = Field(None, gt=0)
    on_reached: Literal["stop", "skip_target"] = "stop"


class Execution(_Strict):
    mode: Literal["local", "ray"] = "local"
    retries: int = Field(3, ge=0, le=20, description="Retries of a failed model call.")
    concurrency: int = Field(
        16, ge=1, description="Conversation groups in flight at once (with ray: per worker)."
    )
    timeout_s: float = Field(
        600.0,
        gt=0,
        description="Seconds one attempt of a model call may take before it is retried.",
    )
    # mode: ray (study/ray_exec.py)
    workers: int = Field(2, ge=1, le=4096, description="Ray worker actors.")
    address: str | None = Field(
        None, description="An existing Ray cluster (ray://HOST:10001, auto); none: a local one."
    )
    lease_s: float = Field(
        60.0, gt=0, description="A tree whose worker has not heartbeaten this long is taken over."
    )
    heartbeat_s: float = Field(10.0, gt=0, description="How often a worker refreshes its leases.")

    @model_validator(mode="after")
    def _beats_within_lease(self) -> Execution:
        if self.heartbeat_s * 2 >= self.lease_s:
            raise FieldProblem(
                ["heartbeat_s"],
                f"{self.heartbeat_s:g}s is not under half of lease_s {self.lease_s:g}s (expected "
                "a worker to beat several times before its lease can be taken over)",
            )
        return self


class PlanSettings(_Strict):
    """Assumptions the plan states with its estimates; they decide nothing about a cell."""

    base_rate: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="Failure rate assumed in the baseline arms, for the detectable differences.",
    )


class Manifest(_Strict):
    """A sweep: scenarios x targets x conditions x simulators x replicates, judged."""

    name: str | None = Field(
        None, pattern=ID_PATTERN, description="The sweep's id in the store (default: file name)."
    )
    scenarios: ScenarioSelection
    targets: list[TargetEntry] = Field(min_length=1)
    conditions: list[str] = Field(default_factory=lambda: ["none"], min_length=1)
    simulators: list[str] = Field(default_factory=lambda: ["embedded"], min_length=1)
    simulator_params: dict[str, Any] = Field(default_factory=dict)
    detector: ModelEntry | None = None
    judges: list[JudgeEntry] = Field(default_factory=list)
    replicates: int = Field(1, ge=1, le=1000)
    seed: int = 0
    max_exchanges: int | None = Field(None, ge=1, le=200)
    fork: Literal["shared", "independent"] | None = None
    # Issue 36: the persona realism gate (``branchpoint run --realism-min``); None: off.
    realism_min: Literal["very", "mostly", "mixed", "not"] | None = None
    budget: Budget | None = None
    execution: Execution = Field(default_factory=Execution)
    store: str | None = Field(None, description="SQLite path or database URL.")
    plan: PlanSettings = Field(default_factory=PlanSettings)
    # Decides nothing about a cell (not in identity.CELL_FIELDS): only whether `sweep` asks.
    confirm_above_usd: float = Field(
        1.0,
        ge=0,
        description="`sweep` asks before running (without a terminal: needs --yes) when the "
        "plan's high USD for the cells to do (expected if larger; the budget if lower) is above "
        "this; an unpriced model always asks.",
    )

    @field_validator("targets", mode="before")
    @classmethod
    def _short_targets(cls, value: object) -> object:
        # ``- litellm:openai/gpt-4o-mini`` is short for ``- spec: litellm:openai/gpt-4o-mini``.
        if isinstance(value, list):
            return [{"spec": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("conditions")
    @classmethod
    def _known_conditions(cls, value: list[str]) -> list[str]:
        from scenarios.conditions import load_conditions

        known = load_conditions()
        for i, name in enumerate(value):
            if name not in known:
                raise FieldProblem(
                    [i], f"unknown condition {name!r} (expected one of: {', '.join(sorted(known))})"
                )
        return value

    @field_validator("simulators")
    @classmethod
    def _simulator_specs(cls, value: list[str]) -> list[str]:
        for i, spec in enumerate(value):
            try:
                _check_spec(spec)
            except ValueError as exc:
                raise FieldProblem([i], str(exc)) from None
        return value

    @model_validator(mode="after")
    def _distinct(self) -> Manifest:
        seen: dict[str, int] = {}
        for i, target in enumerate(self.targets):
            if target.spec in seen:
                raise FieldProblem(
                    ["targets", i, "spec"],
                    f"target {target.spec!r} is listed twice (expected each once; first is "
                    f"targets[{seen[target.spec]}])",
                )
            seen[target.spec] = i
        for field in ("conditions", "simulators"):
            values: list[str] = getattr(self, field)
            for i, v in enumerate(values):
                if values.index(v) != i:
                    raise FieldProblem([field, i], f"{v!r} is listed twice (expected each once)")
        return self


def _check_spec(value: str) -> str:
    from gateway.specs import parse_spec

    try:
        return parse_spec(value).raw
    except UserError as exc:
        raise ValueError(str(exc)) from None


class ManifestError(UserError):
    """A manifest that does not load: every problem, one line each."""

    def __init__(self, errors: list[LoadError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def load_manifest(path: str | Path) -> Manifest:
    """The manifest at ``path``, or ManifestError with every problem found."""
    manifest, errors = load_model(path, Manifest)
    if errors or manifest is None:
        raise ManifestError(errors)
    return manifest


def scenario_paths(manifest: Manifest, base: Path) -> list[str]:
    """The scenario files and folders the manifest names, resolved against ``base``, in order.

    A glob that matches nothing is an error: a typo would otherwise silently shrink the study."""
    out: list[str] = []
    for p in manifest.scenarios.paths:
        path = Path(p) if Path(p).is_absolute() else base / p
        out.append(str(path))
    for pattern in manifest.scenarios.globs:
        matches = sorted(str(m) for m in base.glob(pattern))
        if not matches:
            raise UserError(f"scenarios.globs: {pattern!r} matches no file under {base}")
        out.extend(matches)
    return list(dict.fromkeys(out))


def sweep_id_for(manifest: Manifest, path: str | Path) -> str:
    """The sweep's id: its ``name``, or the manifest's file name as an id."""
    if manifest.name:
        return manifest.name
    stem = re.sub(r"[^a-z0-9_\-]+", "-", Path(path).stem.lower()).strip("-") or "sweep"
    return f"sweep-{stem}"
