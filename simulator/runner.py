"""Running scenarios: variants x targets x conditions x replicates, into the store, resumable.

    from simulator import RunConfig, run_scenarios
    result = run_scenarios(RunConfig(scenarios=["scenarios/library/teen"], targets=["embedded"],
                                     max_turns=6, db="results.db"))

Conversation trees run concurrently on one asyncio loop (``concurrency`` groups in flight), so a
local model's provider gets several requests at once to batch. A run is recorded as a ``Run`` row
(config redacted). Re-running with the same run id (``--resume RUN_ID`` or ``--run-id``) marks the
conversations a dead process left ``running`` as ``interrupted`` and continues them from their last
stored turn; finished conversations and finished turns are never redone. One process at a time
holds a run (``simulator/lease.py``): another that tries to run or resume it meanwhile is refused
with a one-line error, and a run whose process died can be resumed (at once on the same host).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import select

from core.errors import UserError
from simulator.graph import CallCounter

if TYPE_CHECKING:
    from core.store import Store
    from scenarios.models import Scenario
    from simulator.gateway import Gateway
    from simulator.tree import ArmResult

PLUGINS_ENV = "BRANCHPOINT_PLUGINS"
# The persona's defaults: varied but not wild; short messages, as people type in a chat.
PERSONA_DEFAULTS: dict[str, Any] = {"temperature": 0.8, "max_tokens": 96}


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


class ConversationSummary(BaseModel):
    id: str
    scenario_id: str
    variant_id: str
    target: str
    condition: str
    replicate: int
    status: str
    stop_reason: str | None
    n_turns: int
    error: str | None = None
    parent_id: str | None = None
    fork_turn: int | None = None


class RunResult(BaseModel):
    run_id: str
    db: str
    resumed: bool = False
    interrupted_before: int = (
        0  # unfinished conversations found at the start (a resume continues them)
    )
    conversations: list[ConversationSummary] = Field(default_factory=list)
    calls: dict[str, int] = Field(
        default_factory=dict
    )  # model calls this invocation made, by purpose

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


# -- adapters to the scenarios package -----------------------------------------------------------


def load(paths: list[str]) -> list[Scenario]:
    from scenarios.loader import require_scenarios

    for p in paths:
        if not os.path.exists(p):
            raise UserError(f"{p}: no such scenario file or folder")
    return require_scenarios(paths)


def system_prompts(names: list[str]) -> dict[str, str | None]:
    """Condition name -> the target's system prompt (None: no system message)."""
    from scenarios.conditions import load_conditions

    conditions = load_conditions()  # always has "none"; prompts come rendered with crisis resources
    out: dict[str, str | None] = {}
    for name in names:
        cond = conditions.get(name)
        if cond is None:
            known = ", ".join(sorted(conditions))
            raise UserError(f"--condition {name!r}: unknown condition; known: {known}")
        out[name] = cond.system_prompt or None
    return out


def load_plugins(gateway: Gateway) -> list[str]:
    """Modules named in $BRANCHPOINT_PLUGINS (comma-separated) register models on the gateway.

    Each module has ``register(gateway)``. This is how a subprocess run (tests, a lab's own
    in-house models) gets providers that are not built in.
    """
    names = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise UserError(f"${PLUGINS_ENV}: cannot import {name!r}: {exc}") from None
        register = getattr(module, "register", None)
        if not callable(register):
            raise UserError(f"${PLUGINS_ENV}: module {name!r} has no register(gateway) function")
        register(gateway)
    return names


def new_run_id() -> str:
    return datetime.now(UTC).strftime("run-%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def check_specs(config: RunConfig) -> None:
    """Every model spec the run names parses (UserError naming the bad one otherwise)."""
    from simulator.specs import parse_spec

    for spec in [
        *config.targets,
        config.simulator,
        *([config.detector] if config.detector else []),
    ]:
        parse_spec(spec)


def _redacted_config(config: RunConfig) -> dict[str, Any]:
    from core.redaction import redact

    data = config.model_dump()
    data.pop("resume", None)
    return redact(data)


# -- the run ---------------------------------------------------------------------------------------


class Progress:
    """Turns written out of the turns a run can write at most (arms x max_turns x 2)."""

    def __init__(self, callback: Callable[[int, int], None] | None = None) -> None:
        self.total = 0
        self.done = 0
        self.callback = callback or (lambda done, total: None)

    def add_total(self, n: int) -> None:
        self.total += n
        self.callback(self.done, self.total)

    def advance(self, n: int) -> None:
        self.done += n
        self.callback(self.done, self.total)


async def run(
    config: RunConfig,
    *,
    gateway: Gateway | None = None,
    store: Store | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    scenarios: list[Scenario] | None = None,
) -> RunResult:
    """Run (or resume) everything ``config`` names; see the module docstring.

    ``scenarios`` runs these Scenario objects instead of loading ``config.scenarios`` from files.
    """
    from core.records import Conversation, Run, utcnow
    from core.store import open_store, redact_url
    from simulator.lease import RunLease
    from simulator.specs import params_from

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

    own_store = store is None
    store = store or open_store(config.db)
    run_id = config.run_id or new_run_id()
    progress = Progress(on_progress)
    result = RunResult(run_id=run_id, db=redact_url(store.url))

    lease = RunLease(store, run_id)
    claimed = lease.claim()  # before anything is changed: another live process may be running it
    with store.session() as s:
        existing = s.get(Run, run_id)
        if existing is None and config.resume:
            raise UserError(f"--resume {run_id}: no such run in {redact_url(store.url)}")
        if existing is not None:
            result.resumed = True
            unfinished = s.exec(
                select(Conversation).where(
                    Conversation.run_id == run_id,
                    Conversation.status.in_(("running", "interrupted", "pending")),
                )
            ).all()  # type: ignore[attr-defined]
            stale = [c for c in unfinished if c.status == "running"]
            _interrupt(s, stale, "interrupted: the process ended before the conversation finished")
            result.interrupted_before = len(unfinished)
            cfg = dict(existing.config or {})
            cfg.setdefault("resumes", []).append(
                {"at": utcnow().isoformat(), "interrupted": len(stale)}
            )
            existing.config = cfg
            existing.status = "running"
            existing.updated_at = utcnow()
            s.add(existing)
        else:
            from importlib.metadata import PackageNotFoundError, version

            try:
                bp_version = version("branchpoint")
            except PackageNotFoundError:
                bp_version = ""
            s.add(
                Run(
                    id=run_id,
                    kind="run",
                    status="running",
                    config=_redacted_config(config),
                    branchpoint_version=bp_version,
                    owner=lease.owner,
                    heartbeat_at=utcnow(),
                )
            )
        s.commit()
    if not claimed:
        lease.held()
    heartbeat = asyncio.create_task(lease.keep_alive())
    try:
        return await _run_held(
            config,
            store,
            gateway,
            run_id,
            progress,
            result,
            scenarios,
            prompts,
            target_params,
            persona_params,
            detector_params,
        )
    finally:
        heartbeat.cancel()
        lease.release()
        if own_store:
            store.close()


async def _run_held(
    config: RunConfig,
    store: Store,
    gateway: Gateway | None,
    run_id: str,
    progress: Progress,
    result: RunResult,
    scenarios: list[Scenario],
    prompts: dict[str, str],
    target_params: Any,
    persona_params: Any,
    detector_params: Any,
) -> RunResult:
    """The rest of ``run``, while this process holds the run's lease."""
    from core.records import Conversation, Run, utcnow
    from core.redaction import redact
    from scenarios import variants as variants_api
    from simulator.events import LLMDetector, RuleDetector
    from simulator.gateway import Gateway, stored_params
    from simulator.persona import PersonaSimulator
    from simulator.plan import Arm, TreeSpec, conversation_id
    from simulator.tree import TreeEnv, run_tree
    from simulator.turn_writer import TurnWriter

    own_gateway = gateway is None
    gateway = gateway or Gateway(store=store)
    load_plugins(gateway)
    detector = (
        LLMDetector(
            gateway,
            config.detector,
            detector_params,
            fallback=RuleDetector(config.event_patterns),
            run_id=run_id,
        )
        if config.detector
        else RuleDetector(config.event_patterns)
    )
    writer = TurnWriter(store, on_turns=progress.advance)
    env = TreeEnv(
        gateway=gateway,
        writer=writer,
        detector=detector,
        run_id=run_id,
        persona_factory=lambda scenario: PersonaSimulator(
            gateway,
            scenario,
            config.simulator,
            persona_params,
            max_retries=config.persona_retries,
            run_id=run_id,
        ),
        simulator=config.simulator,
        simulator_params=stored_params(persona_params)
        | {"persona_retries": config.persona_retries},
        opening=variants_api.render_opening,
        semaphore=asyncio.Semaphore(config.concurrency),
        calls=CallCounter(),
        target_params_record=redact(config.target_params),
    )

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
        max_turns = config.max_turns or scenario.max_turns
        shash = variants_api.scenario_hash(scenario)
        for target in config.targets:
            for condition in config.conditions:
                for replicate in range(config.replicates):
                    arms = [
                        Arm(
                            variant=v,
                            variant_id=v.id,
                            choices=dict(v.choices),
                            conversation_id=conversation_id(
                                run_id, v.id, target, condition, replicate
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
                            max_turns=max_turns,
                        )
                    )
                    progress.add_total(len(arms) * max_turns * 2)
    missing = wanted - seen_variants
    if missing:
        raise UserError(
            f"--variant {sorted(missing)[0]!r}: no such variant (see `branchpoint variants`)"
        )

    # Turns already stored (a resume) count as done.
    with store.session() as s:
        from core.records import Turn

        done = s.exec(
            select(Turn.id)
            .join(Conversation, Turn.conversation_id == Conversation.id)
            .where(Conversation.run_id == run_id)
        ).all()
        progress.advance(len(done))

    def finished(arms_results: list[ArmResult], spec: TreeSpec) -> None:
        # An arm that stopped early will never write its remaining turns.
        for r in arms_results:
            progress.advance(max(0, spec.max_turns * 2 - r.n_turns))

    async def one_tree(spec: TreeSpec) -> list[ArmResult]:
        results = await run_tree(spec, env)
        finished(results, spec)
        return results

    try:
        await asyncio.gather(*(one_tree(t) for t in trees))
    except BaseException as exc:
        stopped = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
        why = str(exc.args[0]) if exc.args else type(exc).__name__
        mark_interrupted(
            store,
            run_id,
            f"{'interrupted' if stopped else 'failed'}: {why}"[:2000],
            run_status="interrupted" if stopped else "failed",
        )
        raise
    finally:
        result.calls = {
            "persona": env.calls.persona,
            "target": env.calls.target,
            "detector": env.calls.detector,
        }
        if own_gateway:
            await gateway.aclose()

    with store.session() as s:
        run_row = s.get(Run, run_id)
        assert run_row is not None
        run_row.status = "completed"
        run_row.updated_at = utcnow()
        s.add(run_row)
        s.commit()
    result.conversations = summaries(store, run_id)
    return result


def mark_interrupted(
    store: Store, run_id: str, reason: str, *, run_status: str = "interrupted"
) -> int:
    """Conversations of ``run_id`` still running or pending -> interrupted (with ``reason``)."""
    from core.records import Conversation, Run, utcnow

    with store.session() as s:
        rows = s.exec(
            select(Conversation).where(
                Conversation.run_id == run_id, Conversation.status.in_(("running", "pending"))
            )
        ).all()  # type: ignore[attr-defined]
        _interrupt(s, rows, reason)
        run_row = s.get(Run, run_id)
        if run_row is not None:
            run_row.status = run_status
            run_row.updated_at = utcnow()
            s.add(run_row)
        s.commit()
    return len(rows)


def _interrupt(session: Any, conversations: Sequence[Any], reason: str) -> None:
    from core.records import utcnow

    for conv in conversations:
        conv.status, conv.error, conv.updated_at = "interrupted", reason, utcnow()
        session.add(conv)


def summaries(store: Store, run_id: str) -> list[ConversationSummary]:
    from core.records import Conversation

    with store.session() as s:
        rows = s.exec(
            select(Conversation)
            .where(Conversation.run_id == run_id)
            .order_by(
                Conversation.scenario_id,
                Conversation.target,
                Conversation.condition,
                Conversation.replicate,
                Conversation.created_at,
            )
        ).all()
        return [
            ConversationSummary(
                id=c.id,
                scenario_id=c.scenario_id,
                variant_id=c.variant_id,
                target=c.target,
                condition=c.condition,
                replicate=c.replicate,
                status=c.status,
                stop_reason=c.stop_reason,
                n_turns=c.n_turns,
                error=c.error,
                parent_id=c.parent_id,
                fork_turn=c.fork_turn,
            )
            for c in rows
        ]


async def run_scenario(
    scenario: Scenario,
    config: RunConfig | None = None,
    *,
    gateway: Gateway | None = None,
    store: Store | None = None,
    **kwargs: Any,
) -> RunResult:
    """Run one in-memory Scenario (all its variants, or ``variants=[...]``) with ``config``/kwargs."""
    config = config or RunConfig(**kwargs)
    return await run(config, gateway=gateway, store=store, scenarios=[scenario])


def run_scenarios(config: RunConfig | None = None, **kwargs: Any) -> RunResult:
    """Synchronous ``run``: ``run_scenarios(RunConfig(...))`` or ``run_scenarios(scenarios=[...], ...)``."""
    config = config or RunConfig(**kwargs)
    return asyncio.run(run(config))
