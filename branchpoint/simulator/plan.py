"""The plan of a run as plain, picklable data: which conversation trees to grow, and how.

``plan_run(config)`` expands scenarios x targets x conditions x replicates into ``TreeSpec``s
(one per scenario x target x condition x replicate, its arms the scenario's variants), with each
condition's system prompt resolved to its text. Nothing in a plan holds a connection, a model or
a lock, so a plan (or some of its trees) can be shipped to another process and executed there
(``branchpoint.simulator.execute.execute``). Planning touches no store: a bad scenario, spec, condition or
variant fails here, before anything is written.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import product
from typing import TYPE_CHECKING, Any

from branchpoint.core.errors import UserError

if TYPE_CHECKING:
    from branchpoint.gateway.completion import GenParams
    from branchpoint.scenarios.models import Scenario
    from branchpoint.simulator.run_config import RunConfig

# The persona's defaults: varied but not wild; short messages, as people type in a chat.
PERSONA_DEFAULTS: dict[str, Any] = {"temperature": 0.8, "max_tokens": 96}


def conversation_id(
    run_id: str, variant_id: str, target: str, condition: str, replicate: int, simulator: str = ""
) -> str:
    """Deterministic, so that a re-run of the same run finds its conversations.

    The simulator is part of the identity: the same cell played by another simulator is another
    conversation (a run with two ``--simulator`` gets both; a re-run with a new one makes new ones).
    """
    parts = [run_id, variant_id, target, condition, str(replicate)]
    key = "\x1f".join([*parts, simulator] if simulator else parts)
    return "c" + hashlib.sha256(key.encode()).hexdigest()[:15]


@dataclass
class Arm:
    """One variant's conversation in a tree."""

    variant: Any  # branchpoint.scenarios.variants.Variant
    variant_id: str
    choices: dict[str, Any]  # branch point -> option
    conversation_id: str
    order: int  # position in the scenario's variant list; the lowest leads a group

    def __repr__(self) -> str:
        return f"Arm({self.variant_id}, {self.conversation_id})"


@dataclass
class TreeSpec:
    """One scenario x target x condition x replicate."""

    scenario: Scenario
    scenario_hash: str
    scenario_path: str | None
    arms: list[Arm]
    target: str
    target_params: GenParams
    condition: str
    system_prompt: str | None
    replicate: int
    seed: int
    fork: str  # shared | independent
    max_turns: int
    simulator: str = ""  # the persona's model spec ("" in plans made before there were several)

    @property
    def turn_budget(self) -> int:
        """The most turns this tree can write: every arm runs to max_turns exchanges of two."""
        return len(self.arms) * self.max_turns * 2


@dataclass
class RunPlan:
    """Everything a process needs to grow a run's trees, besides a store and a gateway."""

    run_id: str
    trees: list[TreeSpec]
    simulator: str
    persona_params: GenParams
    persona_retries: int
    detector: str | None
    detector_params: GenParams
    event_patterns: dict[str, list[str]] | None
    concurrency: int  # trees' groups in flight at once, per executing process
    # The target params as every conversation row records them (secrets redacted).
    target_params_record: dict[str, Any] = field(default_factory=dict)
    simulators: list[str] = field(default_factory=list)  # every tree's; ``simulator`` is the first
    realism_min: str | None = None  # the realism gate's level (issue 36); None: off

    @property
    def turn_budget(self) -> int:
        return sum(t.turn_budget for t in self.trees)


def plan_run(
    config: RunConfig, *, scenarios: list[Scenario] | None = None, run_id: str | None = None
) -> RunPlan:
    """The trees ``config`` names, for run ``run_id`` (default: ``config.run_id`` or a new id).

    ``scenarios`` plans these Scenario objects instead of loading ``config.scenarios``. Raises
    UserError for a missing scenario, a bad model spec or param, an unknown condition or variant.
    """
    from branchpoint.core.redaction import redact
    from branchpoint.gateway.specs import params_from
    from branchpoint.scenarios import variants as variants_api

    if scenarios is None:
        if not config.scenarios:
            raise UserError("no scenarios given (name scenario files or folders)")
        scenarios = load(config.scenarios)
    check_specs(config)
    prompts = system_prompts(config.conditions)
    target_params = params_from(config.target_params, where="--target-param")
    persona_params = params_from(
        {**PERSONA_DEFAULTS, **config.simulator_params}, where="--simulator-param"
    )
    detector_params = params_from(config.detector_params, where="--detector-param")
    run_id = run_id or config.run_id or new_run_id()

    trees: list[TreeSpec] = []
    wanted = set(config.variants)
    seen_variants: set[str] = set()
    for scenario in scenarios:
        variants = variants_api.expand(scenario)
        seen_variants |= {v.id for v in variants}
        if wanted:
            variants = [v for v in variants if v.id in wanted]
        if not variants:
            continue
        shash = variants_api.scenario_hash(scenario)
        for target in config.targets:
            for condition in config.conditions:
                for simulator, replicate in product(
                    [_played(config, scenario, s) for s in config.simulators],
                    range(config.replicates),
                ):
                    arms = [
                        Arm(
                            variant=v,
                            variant_id=v.id,
                            choices=dict(v.choices),
                            conversation_id=conversation_id(
                                run_id, v.id, target, condition, replicate, simulator
                            ),
                            order=i,
                        )
                        for i, v in enumerate(variants)
                    ]
                    trees.append(
                        TreeSpec(
                            scenario=scenario,
                            scenario_hash=shash,
                            scenario_path=scenario.source_path,
                            arms=arms,
                            target=target,
                            target_params=target_params,
                            condition=condition,
                            system_prompt=prompts[condition],
                            replicate=replicate,
                            seed=config.seed + replicate,
                            fork=config.fork or scenario.fork,
                            max_turns=config.max_turns or scenario.max_turns,
                            simulator=simulator,
                        )
                    )
    missing = wanted - seen_variants
    if missing:
        raise UserError(
            f"--variant {sorted(missing)[0]!r}: no such variant (see `branchpoint variants`)"
        )
    return RunPlan(
        run_id=run_id,
        trees=trees,
        simulator=config.simulator,
        persona_params=persona_params,
        persona_retries=config.persona_retries,
        detector=config.detector,
        detector_params=detector_params,
        event_patterns=config.event_patterns,
        concurrency=config.concurrency,
        target_params_record=redact(config.target_params),
        simulators=list(config.simulators),
        realism_min=config.realism_min,
    )


# -- adapters to the scenarios package and the spec parser ---------------------------------------


def _played(config: RunConfig, scenario: Scenario, simulator: str) -> str:
    """The simulator as it plays ``scenario``: ``adaptive@SPEC`` when the run's ``persona_mode``
    (else the scenario's ``persona.mode``) is adaptive (issue 47)."""
    from branchpoint.simulator.adaptive import ADAPTIVE, adaptive_spec

    mode = config.persona_mode or scenario.persona.mode
    return adaptive_spec(simulator) if mode == ADAPTIVE else simulator


def load(paths: list[str]) -> list[Scenario]:
    from branchpoint.scenarios.loader import require_scenarios

    for p in paths:
        if not os.path.exists(p):
            raise UserError(f"{p}: no such scenario file or folder")
    return require_scenarios(paths)


def system_prompts(names: list[str]) -> dict[str, str | None]:
    """Condition name -> the target's system prompt (None: no system message)."""
    from branchpoint.scenarios.conditions import load_conditions

    conditions = load_conditions()  # always has "none"; prompts come rendered with crisis resources
    out: dict[str, str | None] = {}
    for name in names:
        cond = conditions.get(name)
        if cond is None:
            known = ", ".join(sorted(conditions))
            raise UserError(f"--condition {name!r}: unknown condition; known: {known}")
        out[name] = cond.system_prompt or None
    return out


def check_specs(config: RunConfig) -> None:
    """Every model spec the run names parses (UserError naming the bad one otherwise)."""
    from branchpoint.gateway.specs import parse_spec
    from branchpoint.simulator.adaptive import split_mode

    for spec in [
        *config.targets,
        *(split_mode(s)[1] for s in config.simulators),
        *([config.detector] if config.detector else []),
    ]:
        parse_spec(spec)


def new_run_id() -> str:
    return datetime.now(UTC).strftime("run-%Y%m%d-%H%M%S-") + secrets.token_hex(3)
