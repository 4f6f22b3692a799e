"""The sweep manifest: one YAML file naming everything a study runs.

Read with :func:`load_manifest`, which goes through ``branchpoint.core.yamlio.validate_data`` so that every
problem is one positioned line (``file:LINE:COL: field: problem (expected ...)``) and the
hostile-YAML limits apply. Scenario paths and globs are relative to the manifest's folder, so a
manifest means the same thing whatever directory it is run from.

Every model role (targets, simulators, the detector, judges) takes one entry form
(``ModelEntry``: spec, params, key_env, limits, price), or a bare spec string for short. Keys never
appear in a manifest: an entry names the environment variable that holds its key (``key_env``),
and the sweep reads it at run time (``read_keys``; ``role_key_envs`` lists them all).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from branchpoint.core.analysis_plan import AnalysisPlan
from branchpoint.core.errors import UserError
from branchpoint.core.strict import StrictModel as _Strict
from branchpoint.core.yamlio import (
    ID_PATTERN,
    FieldProblem,
    LoadError,
    Loc,
    PosMap,
    error_at,
    format_loc,
    read_yaml,
    validate_data,
)
from branchpoint.gateway.limits import DEFAULT_TIMEOUT_S

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# Params that would carry a secret into the manifest (and from there into the store).
SECRET_PARAMS = ("api_key", "key", "token", "authorization", "password")


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
    cached_input_per_mtok: float | None = Field(
        None,
        ge=0,
        description="What an input token a provider's prompt cache served costs (OpenAI: half "
        "the input price or less; Anthropic's cache reads: a tenth). Default: the input price.",
    )
    cache_write_per_mtok: float | None = Field(
        None,
        ge=0,
        description="What an input token written to the prompt cache costs where that is billed "
        "apart (Anthropic: 1.25 times the input price). Default: the input price.",
    )
    batch_factor: float | None = Field(
        None,
        gt=0,
        le=1,
        description="The share of this price that the provider's batch API bills (a judge with "
        "batch: true). Default: litellm's batch price for the model where it has one, else 0.5.",
    )

    def per_mtok(self) -> tuple[float, float, float | None, float | None]:
        """(input, output, cached input, cache write) USD per million tokens: the ``override``
        that ``branchpoint.gateway.pricing``'s ``price_of`` and ``batch_price_of`` take (they make
        the gateway's per-token ``Price``)."""
        return (
            self.input_per_mtok,
            self.output_per_mtok,
            self.cached_input_per_mtok,
            self.cache_write_per_mtok,
        )


class RoleLimits(_Strict):
    """How hard this model's provider may be driven (None: no cap)."""

    in_flight: int | None = Field(None, ge=1, description="Calls in flight at most.")
    rpm: float | None = Field(None, gt=0, description="Requests per minute at most.")
    tpm: float | None = Field(None, gt=0, description="Tokens per minute at most.")


TargetLimits = RoleLimits  # the name it had when only targets had limits


class ModelEntry(_Strict):
    """A model in one of the manifest's roles (a target, a simulator, the detector, a judge):
    its spec and params, where its key is read from, how hard it may be driven, its price. Every
    role takes this form; a bare spec string is short for ``{spec: SPEC}``."""

    spec: str = Field(min_length=1, description="Model spec, e.g. litellm:openai/gpt-4o-mini.")
    params: dict[str, Any] = Field(default_factory=dict, description="Generation params.")
    key_env: str | None = Field(
        None,
        description="NAME of the environment variable that holds the API key (never the key).",
        json_schema_extra={"pattern": ENV_NAME_PATTERN},
    )
    limits: RoleLimits = Field(default_factory=RoleLimits)
    price: Price | None = None  # counts toward the plan's dollars and the budget, and is recorded

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

    @property
    def limited(self) -> bool:
        """Whether the manifest caps this model's calls (else the provider's defaults hold)."""
        return bool(self.limits.in_flight or self.limits.rpm or self.limits.tpm)


class TargetEntry(ModelEntry):
    """One chatbot under test."""


class JudgeEntry(ModelEntry):
    """A judge and the rubrics it scores; ``live`` judges each target's conversations as soon
    as they are done, ``after`` in one pass once the whole sweep is done. Its ``price`` counts
    as a target's: a budget counts judging too."""

    spec: str = Field(min_length=1, description="heuristic, or a model spec.")
    rubrics: list[str] = Field(min_length=1, description="Rubric names or files.")
    when: Literal["live", "after"] = "after"
    batch: bool = Field(
        False,
        description="Send this judge's calls through the provider's batch API (oai: and "
        "litellm:openai/ judges): answered within 24 h at the batch price (half, at OpenAI).",
    )

    @field_validator("spec")
    @classmethod
    def _known_spec(cls, value: str) -> str:  # overrides ModelEntry's: heuristic is no model
        return value if value == "heuristic" else _check_spec(value)

    @model_validator(mode="after")
    def _batch_served(self) -> JudgeEntry:
        if not self.batch:
            return self
        from branchpoint.gateway.batch import batch_target
        from branchpoint.gateway.specs import params_from

        if self.spec == "heuristic":
            return self  # _heuristic_calls_nothing says so
        try:
            batch_target(self.spec, params_from(self.params), where="batch: true")
        except UserError as exc:
            raise FieldProblem(["batch"], str(exc).removeprefix("batch: true: ")) from None
        return self

    @model_validator(mode="after")
    def _heuristic_calls_nothing(self) -> JudgeEntry:
        if self.spec != "heuristic":
            return self
        given = {
            "batch": self.batch,
            "price": self.price is not None,
            "key_env": self.key_env is not None,
            "limits": self.limited,
        }
        for name, set_ in given.items():
            if set_:
                raise FieldProblem(
                    [name], f"the heuristic judge calls no model: it has no {name} (expected none)"
                )
        return self


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
        DEFAULT_TIMEOUT_S,
        gt=0,
        description="Seconds one attempt of a model call may take before it is retried.",
    )
    # mode: ray (branchpoint/study/ray_exec.py)
    workers: int = Field(2, ge=1, le=4096, description="Ray worker actors.")
    address: str | None = Field(
        None, description="An existing Ray cluster (ray://HOST:10001, auto); none: a local one."
    )
    lease_s: float = Field(
        60.0, gt=0, description="A tree whose worker has not heartbeaten this long is taken over."
    )
    heartbeat_s: float = Field(10.0, gt=0, description="How often a worker refreshes its leases.")
    secrets_file: str | None = Field(
        None,
        description="A NAME=value file on each worker node where a worker reads an API key its "
        "own environment lacks (branchpoint/study/worker_keys.py); open to its owner only (chmod 600).",
    )

    @field_validator("heartbeat_s")
    @classmethod
    def _beats_within_lease(cls, value: float, info: ValidationInfo) -> float:
        lease_s = info.data.get("lease_s")  # absent when lease_s itself is invalid
        if lease_s is not None and value * 2 >= lease_s:
            raise ValueError(
                f"{value:g}s is not under half of lease_s {lease_s:g}s (expected a worker to "
                "beat several times before its lease can be taken over)"
            )
        return value

    @field_validator("secrets_file")
    @classmethod
    def _path_on_the_node(cls, value: str | None) -> str | None:
        # read on each worker's node, from wherever Ray started it: relative has no meaning there
        if value is not None and not value.startswith(("/", "~")):
            raise ValueError(
                f"{value[:80]!r} is not an absolute path (expected the file's path on every "
                "worker node, e.g. /etc/branchpoint/keys.env or ~/.config/branchpoint/keys.env)"
            )
        return value

    @model_validator(mode="after")
    def _secrets_for_workers(self) -> Execution:
        if self.secrets_file is not None and self.mode != "ray":
            raise FieldProblem(
                ["secrets_file"],
                "only Ray workers read a secrets file (expected mode: ray, or no secrets_file: "
                "a local sweep reads keys from its own environment)",
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


class PersonaSettings(_Strict):
    """How the sweep's persona plays (issue 47)."""

    mode: Literal["scripted", "adaptive"] = "scripted"


class Manifest(_Strict):
    """A sweep: scenarios x targets x conditions x simulators x replicates, judged."""

    # Where each value was written (set by load_manifest): a problem found later, at plan time,
    # is still one positioned line (``located``).
    _source: tuple[str, PosMap] | None = PrivateAttr(None)

    def located(self, loc: Loc, message: str) -> str:
        """``FILE:LINE:COL: field: message`` for the value at ``loc`` (without a file: its field)."""
        if self._source is None:
            return f"{format_loc(loc)}: {message}"
        path, pos = self._source
        return str(error_at(pos, loc, path, message, at_key=False))

    name: str | None = Field(
        None, pattern=ID_PATTERN, description="The sweep's id in the store (default: file name)."
    )
    scenarios: ScenarioSelection
    targets: list[TargetEntry] = Field(min_length=1)
    conditions: list[str] = Field(default_factory=lambda: ["none"], min_length=1)
    simulators: list[ModelEntry] = Field(
        default_factory=lambda: [ModelEntry(spec="embedded")], min_length=1
    )
    # every simulator's params, under each one's own ``params``
    simulator_params: dict[str, Any] = Field(default_factory=dict)
    detector: ModelEntry | None = None
    judges: list[JudgeEntry] = Field(default_factory=list)
    replicates: int = Field(1, ge=1, le=1000)
    seed: int = 0
    max_exchanges: int | None = Field(None, ge=1, le=200)
    fork: Literal["shared", "independent"] | None = None
    # Issue 36: the persona realism gate (``branchpoint run --realism-min``); None: off.
    realism_min: Literal["very", "mostly", "mixed", "not"] | None = None
    # Issue 47: ``persona: {mode: adaptive}`` plays every simulator adaptively (None: as each
    # scenario's ``persona.mode`` says).
    persona: PersonaSettings | None = None
    budget: Budget | None = None
    execution: Execution = Field(default_factory=Execution)
    store: str | None = Field(None, description="SQLite path or database URL.")
    plan: PlanSettings = Field(default_factory=PlanSettings)
    # Issue 46: the pre-registered analysis (branchpoint/core/analysis_plan.py). Decides nothing
    # about a cell; stored with the sweep when its first cell runs, changed only with --amend.
    analysis: AnalysisPlan | None = Field(
        None,
        description="The pre-registered analysis: primary contrasts, outcome, scope, alpha, "
        "test, decision rule, smallest effect of interest.",
    )
    # Decides nothing about a cell (not in identity.CELL_FIELDS): only whether `sweep` asks.
    confirm_above_usd: float = Field(
        1.0,
        ge=0,
        description="`sweep` asks before running (without a terminal: needs --yes) when the "
        "plan's high USD for the cells to do (expected if larger; the budget if lower) is above "
        "this; an unpriced model always asks.",
    )

    @field_validator("targets", "simulators", "detector", mode="before")
    @classmethod
    def _short_specs(cls, value: object) -> object:
        # ``- litellm:openai/gpt-4o-mini`` is short for ``- spec: litellm:openai/gpt-4o-mini``.
        if isinstance(value, list):
            return [{"spec": v} if isinstance(v, str) else v for v in value]
        return {"spec": value} if isinstance(value, str) else value

    @field_validator("conditions")
    @classmethod
    def _known_conditions(cls, value: list[str]) -> list[str]:
        from branchpoint.scenarios.conditions import load_conditions

        known = load_conditions()
        for i, name in enumerate(value):
            if name not in known:
                raise FieldProblem(
                    [i], f"unknown condition {name!r} (expected one of: {', '.join(sorted(known))})"
                )
        return value

    @model_validator(mode="after")
    def _batch_unbudgeted(self) -> Manifest:
        # A budget books each call before it is sent; a batch is billed as a whole, later.
        if self.budget is not None:
            for i, judge in enumerate(self.judges):
                if judge.batch:
                    raise FieldProblem(
                        ["judges", i, "batch"],
                        "batch judging cannot be bounded by a budget yet (expected batch: false, "
                        "or no budget)",
                    )
        return self

    # Field validators, not one model validator: pydantic runs a model validator only when every
    # field is valid, and a duplicate must be reported with the file's other problems.
    @field_validator("targets", "simulators")
    @classmethod
    def _distinct_specs(cls, value: list[ModelEntry], info: ValidationInfo) -> list[ModelEntry]:
        role = {"targets": "target", "simulators": "simulator"}[str(info.field_name)]
        seen: dict[str, int] = {}
        for i, entry in enumerate(value):
            if entry.spec in seen:
                raise FieldProblem(
                    [i, "spec"],
                    f"{role} {entry.spec!r} is listed twice (expected each once; first is "
                    f"{info.field_name}[{seen[entry.spec]}])",
                )
            seen[entry.spec] = i
        return value

    def roles(self) -> list[tuple[Loc, ModelEntry]]:
        """Every model the manifest calls, with where it is written (``targets``, 0), in the
        order its facts (price, limits, key) are looked up: targets, simulators, the detector,
        the judges (the heuristic judge calls none)."""
        return [
            *((("targets", i), e) for i, e in enumerate(self.targets)),
            *((("simulators", i), e) for i, e in enumerate(self.simulators)),
            *([(("detector",), self.detector)] if self.detector is not None else []),
            *((("judges", i), j) for i, j in enumerate(self.judges) if j.spec != "heuristic"),
        ]

    def simulator_params_of(self, entry: ModelEntry) -> dict[str, Any]:
        """A simulator's params: the manifest's ``simulator_params`` under its own."""
        return {**self.simulator_params, **entry.params}

    @field_validator("conditions")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:  # conditions
        for i, v in enumerate(value):
            if value.index(v) != i:
                raise FieldProblem([i], f"{v!r} is listed twice (expected each once)")
        return value


class RoleKey(NamedTuple):
    """An environment variable a model's key is read from, and the role that names it."""

    role: str  # where the manifest names it: targets[0], simulators[1], detector, judges[0]
    env: str  # the variable's NAME (its value is read at run time, never stored)


def role_key_envs(manifest: Manifest) -> list[RoleKey]:
    """Every ``key_env`` the manifest's roles name, with the role (for an error's line), in
    ``Manifest.roles`` order; a variable two roles share is listed for each."""
    return [
        RoleKey(format_loc(loc), entry.key_env)
        for loc, entry in manifest.roles()
        if entry.key_env is not None
    ]


def read_keys(manifest: Manifest, only: str | None = None) -> dict[str, str]:
    """Each ``key_env`` variable's value, by its name, read from this process's environment
    (``only``: of this role's entries, e.g. ``judges``). Raises UserError with one positioned
    line for each role whose variable is not set."""
    import os

    keys: dict[str, str] = {}
    missing: list[str] = []
    for loc, entry in manifest.roles():
        if entry.key_env is None or only not in (None, loc[0]):
            continue
        value = os.environ.get(entry.key_env)
        if value:
            keys[entry.key_env] = value
        else:
            role = _ROLE_NAMES[str(loc[0])]
            missing.append(
                manifest.located(
                    (*loc, "key_env"),
                    f"${entry.key_env} is not set (expected the {role}'s API key in it)",
                )
            )
    if missing:
        raise UserError("\n".join(missing))
    return keys


_ROLE_NAMES = {"targets": "target", "simulators": "simulator", "detector": "detector",
               "judges": "judge"}  # fmt: skip


def _check_spec(value: str) -> str:
    from branchpoint.gateway.specs import parse_spec

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
    """The manifest at ``path``, or ManifestError with every problem found: its schema's, and
    those of every file, glob, rubric and variant it names (``branchpoint.study.manifest_checks``)."""
    from branchpoint.study.manifest_checks import manifest_problems, rubric_reference

    data, pos, errors = read_yaml(path)
    manifest = None
    if data is not None:
        manifest, more = validate_data(data, pos, Manifest, path)
        errors = sorted(
            set(errors + more + manifest_problems(data, pos, path)),
            key=lambda e: (e.path != str(path), e.path, e.line, e.col, e.field, e.message),
        )  # the manifest's lines first, then those of the files it names
    if errors or manifest is None:
        raise ManifestError(errors)
    manifest._source = (str(path), pos)
    base = Path(path).resolve().parent
    for judge in manifest.judges:  # a rubric path is read from the manifest's folder
        judge.rubrics = [rubric_reference(name, base) for name in judge.rubrics]
    return manifest


def scenario_paths(manifest: Manifest, base: Path) -> list[str]:
    """The scenario files and folders the manifest names, resolved against ``base``, in order.

    A glob that matches nothing is an error: a typo would otherwise silently shrink the study
    (``load_manifest`` says so first, with the line; this is for files gone since)."""
    from branchpoint.study.manifest_checks import glob_matches

    out: list[str] = []
    for p in manifest.scenarios.paths:
        path = Path(p) if Path(p).is_absolute() else base / p
        out.append(str(path))
    for pattern in manifest.scenarios.globs:
        matches = glob_matches(pattern, base)
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
