"""Running scenarios: variants x targets x conditions x replicates, into the store, resumable.

    from branchpoint.simulator import RunConfig, run_scenarios
    result = run_scenarios(RunConfig(scenarios=["branchpoint/scenarios/library/teen"], targets=["embedded"],
                                     max_turns=6, db="results.db"))

A run is three stages: ``plan_run`` (``branchpoint/simulator/plan.py``) turns the config into conversation
trees as plain data, touching no store; ``execute`` (``branchpoint/simulator/execute.py``) grows them into the
store through the gateway; ``branchpoint/simulator/lifecycle.py`` keeps the Run row, marks interruptions and
reads back the summaries. This module holds them together: in this process, or with
``processes`` > 1 (``--processes``) in that many worker processes on this machine, each growing a
share of the trees (``branchpoint/simulator/processes.py``).

A run is recorded as a ``Run`` row (config redacted). Re-running with the same run id
(``--resume RUN_ID`` or ``--run-id``) marks the conversations a dead process left ``running`` as
``interrupted`` and continues them from their last stored turn; finished conversations and
finished turns are never redone. One process at a time holds a run (``branchpoint/simulator/lease.py``):
another that tries to run or resume it meanwhile is refused with a one-line error, and a run whose
process died can be resumed (at once on the same host).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from branchpoint.core.errors import UserError
from branchpoint.gateway import event_loop
from branchpoint.gateway.plugins import load_plugins
from branchpoint.gateway.providers.registry import PLUGINS_ENV
from branchpoint.simulator.execute import Progress, execute
from branchpoint.simulator.lifecycle import (
    ConversationSummary,
    RunResult,
    begin_run,
    complete_run,
    mark_interrupted,
    mark_stopped,
    new_run_row,
    stored_turns,
    summaries,
)
from branchpoint.simulator.plan import PERSONA_DEFAULTS, check_specs, load, new_run_id, plan_run
from branchpoint.simulator.provenance import record_provenance
from branchpoint.simulator.run_config import RunConfig

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.scenarios.models import Scenario
    from branchpoint.simulator.plan import RunPlan

__all__ = [
    "PERSONA_DEFAULTS",
    "PLUGINS_ENV",
    "ConversationSummary",
    "RunConfig",
    "RunResult",
    "check_specs",
    "load",
    "load_plugins",
    "make_gateway",
    "mark_interrupted",
    "new_run_id",
    "run",
    "run_scenario",
    "run_scenarios",
    "summaries",
]


def check_scripted_models(plans: Iterable[RunPlan], gateway: Gateway | None = None) -> None:
    """A scripted model that is not registered is a usage error before anything is written,
    not a failed conversation per arm (other kinds need the network or weights to tell).
    Without ``gateway`` (a driver whose gateways are elsewhere), one with the plugins loaded."""
    from branchpoint.gateway.specs import parse_spec

    if gateway is None:
        from branchpoint.gateway.gateway import Gateway

        gateway = Gateway(cache=False)  # no store: only the plugins' registrations are read
        load_plugins(gateway)

    from branchpoint.simulator.adaptive import split_mode

    specs: set[str] = set()
    for plan in plans:
        sims = {plan.simulator, *plan.simulators, *(t.simulator for t in plan.trees if t.simulator)}
        specs |= {t.target for t in plan.trees} | {split_mode(s)[1] for s in sims}
        if plan.detector:
            specs.add(plan.detector)
    for raw in sorted(specs):
        spec = parse_spec(raw)
        if spec.kind == "scripted":
            gateway.provider_for(spec)  # raises UserError naming the spec and the known names


async def run(
    config: RunConfig,
    *,
    gateway: Gateway | None = None,
    store: Store | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    scenarios: list[Scenario] | None = None,
    retry_failed: bool = False,
) -> RunResult:
    """Run (or resume) everything ``config`` names; see the module docstring.

    ``scenarios`` runs these Scenario objects instead of loading ``config.scenarios`` from files.
    ``retry_failed``: the run's failed conversations continue from their last stored turn
    (``branchpoint.simulator.lifecycle.retry_failed_in``); the run must exist.
    """
    from branchpoint.core.store import open_store

    plan = plan_run(config, scenarios=scenarios)
    own_store = store is None
    store = store or open_store(config.db)
    try:
        return await _run_plan(
            plan, config, store, gateway, Progress(on_progress), retry_failed=retry_failed
        )
    finally:
        if own_store:
            store.close()


async def _run_plan(
    plan: RunPlan,
    config: RunConfig,
    store: Store,
    gateway: Gateway | None,
    progress: Progress,
    *,
    retry_failed: bool = False,
) -> RunResult:
    from branchpoint.simulator.lease import RunLease
    from branchpoint.simulator.processes import worker_count

    workers = worker_count(config, len(plan.trees))
    if workers > 1 and gateway is not None:
        raise UserError(
            f"processes={workers}: each worker process makes its own gateway, so none can be "
            "passed in (models a worker needs come from $BRANCHPOINT_PLUGINS)"
        )
    own_gateway = gateway is None
    gateway = gateway or make_gateway(config, store)
    try:
        load_plugins(gateway)
        check_scripted_models([plan], gateway)
        lease = RunLease(store, plan.run_id)
        # before anything is changed: another live process may run it. A new run's row is
        # written with its owner in one statement, so two processes starting it at once cannot
        # both run it; a resume must find the row (begin_run says so where there is none).
        created = False
        if config.resume or retry_failed:
            claimed = lease.claim()
        else:
            created = lease.create_or_claim(new_run_row(plan.run_id, config))
            claimed = True  # held either way
        try:
            result = begin_run(
                store, plan.run_id, config, lease.owner, retry_failed=retry_failed, created=created
            )
            record_provenance(store, plan, config)
            if not claimed:
                lease.held()
            heartbeat = asyncio.create_task(lease.keep_alive())
            try:
                return await _execute_held(
                    plan, store, gateway, progress, result, config=config, workers=workers
                )
            finally:
                heartbeat.cancel()
        finally:
            lease.release()
    finally:
        if own_gateway:
            await gateway.aclose()


def make_gateway(config: RunConfig, store: Store) -> Gateway:
    """The gateway a run's process (or each of its worker processes) calls models through."""
    from branchpoint.gateway.gateway import Gateway

    return Gateway(
        store=store,
        limits=config.limits,
        default_concurrency=config.concurrency,
        write_behind=True,
        timeout_s=config.timeout_s,
    )


def worker_gateway(config: RunConfig, store: Store) -> Gateway:
    """A worker process's gateway (``branchpoint.simulator.processes``), with the plugins loaded."""
    gateway = make_gateway(config, store)
    load_plugins(gateway)
    return gateway


async def _execute_held(
    plan: RunPlan,
    store: Store,
    gateway: Gateway,
    progress: Progress,
    result: RunResult,
    *,
    config: RunConfig,
    workers: int = 1,
) -> RunResult:
    """Execute the plan while this process holds the run's lease, and finalise the run.

    With ``workers`` > 1 the trees run in that many worker processes (``branchpoint.simulator.processes``);
    this process keeps the lease, the progress and the run's final status."""
    from branchpoint.core.records import utcnow
    from branchpoint.simulator.processes import execute_in_processes

    progress.add_total(plan.turn_budget)
    progress.advance(stored_turns(store, plan.run_id))
    started = utcnow()  # this invocation's calls are those recorded from here on
    try:
        if workers > 1:
            calls = await execute_in_processes(
                plan, config, store.url, workers, progress, worker_gateway
            )
        else:
            calls = (await execute(plan, store, gateway, progress=progress)).calls
    except BaseException as exc:
        mark_stopped(store, plan.run_id, exc)
        raise
    result.calls = calls
    complete_run(store, plan.run_id)
    result.conversations = summaries(store, plan.run_id)
    from branchpoint.core.read.calls import cached_call_counts
    from branchpoint.core.read.persona_flags import persona_flags_line

    result.cached_calls = cached_call_counts(store, plan.run_id, since=started)
    result.persona_flags = persona_flags_line(store, plan.run_id)
    return result


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
    return event_loop.run(run(config))
