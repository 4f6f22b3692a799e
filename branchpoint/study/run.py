"""Running a planned sweep in this process: one Run row (kind ``sweep``), every run config's trees
grown concurrently through one gateway, resumable.

The sweep holds its run's lease for the whole time (branchpoint/simulator/lease.py), writes each run config's
provenance, then executes the plans together; trees already finished are skipped by the engine,
so a re-run continues where the last one stopped. Judging belongs to a higher layer: the caller
passes ``on_target_done``, awaited with the conversation ids of each set of targets as soon as
their trees are done (what ``when: live`` judges use).

``retry_failed``: the sweep's failed conversations are recorded in ``conversation_attempts`` and
continue from their last stored turn (``branchpoint.simulator.lifecycle.retry_failed_in``); without it they
stay failed. ``monitor`` (``branchpoint/study/monitor.py``) is fed the progress, attached to the
gateway, and refreshed from the store in a worker thread while the sweep runs.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlmodel import col, select

from branchpoint.core.analysis_plan import registration
from branchpoint.core.errors import UserError
from branchpoint.core.records import Conversation, Run, utcnow
from branchpoint.study.identity import identity_record

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.gateway.budget import Budget
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.gateway.limits import LimiterFactory
    from branchpoint.gateway.pricing import Price
    from branchpoint.simulator.plan import RunPlan
    from branchpoint.study.monitor import SweepMonitor
    from branchpoint.study.plan import SweepPlan

OnTargetDone = Callable[[list[str]], Awaitable[None]]


def sweep_gateway(
    plan: SweepPlan,
    store: Store,
    *,
    write_behind: bool,
    limiters: LimiterFactory | None = None,
) -> Gateway:
    """A gateway with the sweep's limits, retries and timeout: its conversations' (write-behind)
    and its judges' (each row committed before the verdict that refers to it)."""
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.study.plan import sweep_limits

    execution = plan.manifest.execution
    return Gateway(
        store=store,
        limits=sweep_limits(plan.runs),
        default_concurrency=execution.concurrency,
        max_attempts=execution.retries + 1,
        timeout_s=execution.timeout_s,
        write_behind=write_behind,
        limiter_factory=limiters,
    )


@dataclass
class SweepResult:
    sweep_id: str
    calls: Counter[str] = field(default_factory=Counter)  # this invocation's, by purpose
    conversations: int = 0
    completed: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # stop reason -> conversations
    retried: int = 0  # failed conversations run again (--retry-failed)
    # the manifest's budget stopped calls: some cells are left interrupted, resumable
    stopped_by_budget: bool = False
    spent_usd: float | None = None  # the sweep's recorded spend at the end, with a budget
    reserved_usd: float = 0.0  # of it, unsettled reservations at their bound (calls lost)
    budget_note: str = ""  # which limit was reached, and the spend
    failed_status: int = 0  # of the not completed, those that failed (not interrupted)
    workers_replaced: int = 0  # Ray workers that died and were replaced by new ones

    @property
    def n_failed(self) -> int:
        return sum(self.failed.values())


async def run_sweep(
    plan: SweepPlan,
    store: Store,
    *,
    gateway: Gateway | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_target_done: OnTargetDone | None = None,
    retry_failed: bool = False,
    monitor: SweepMonitor | None = None,
    budget: Budget | None = None,
    limiters: LimiterFactory | None = None,
) -> SweepResult:
    """Grow every tree of ``plan`` into ``store`` (see the module docstring). ``budget``: the
    sweep's (``sweep_budget``), when judges must share it; else made here. ``limiters``: the
    provider limiters, when judges must share them too (``SharedLimiters``)."""
    from branchpoint.simulator.execute import Progress, execute
    from branchpoint.simulator.lease import RunLease
    from branchpoint.simulator.lifecycle import mark_stopped, stored_turns
    from branchpoint.simulator.runner import check_scripted_models, load_plugins

    own_gateway = gateway is None
    gateway = gateway or sweep_gateway(plan, store, write_behind=True, limiters=limiters)
    if budget is None:
        budget = sweep_budget(plan, store)
    # every known price, budget or not: a call's recorded cost is what a price gives it
    gateway.budget, gateway.prices = budget, sweep_prices(plan)
    progress = Progress(progress_feed(on_progress, monitor))
    result = SweepResult(plan.sweep_id)
    if monitor is not None:
        monitor.attach(gateway)
    try:
        load_plugins(gateway)
        check_scripted_models([p for _, p in plan.runs], gateway)
        lease = RunLease(store, plan.sweep_id)
        created = lease.create_or_claim(new_run_row(plan))
        try:
            result.retried = _start(store, plan, created, retry_failed=retry_failed)
            heartbeat = asyncio.create_task(lease.keep_alive())
            watching = asyncio.create_task(monitor.watch()) if monitor is not None else None
            progress.add_total(sum(p.turn_budget for _, p in plan.runs))
            progress.advance(stored_turns(store, plan.sweep_id))
            if monitor is not None:
                monitor.rates_from_here()

            async def one(run_plan: RunPlan) -> None:
                execution = await execute(run_plan, store, gateway, progress=progress)
                result.calls.update(execution.calls)
                if on_target_done is not None:
                    await on_target_done(
                        [a.conversation_id for t in run_plan.trees for a in t.arms]
                    )

            try:
                await asyncio.gather(*(one(p) for _, p in plan.runs))
            except BaseException as exc:
                mark_stopped(store, plan.sweep_id, exc)
                raise
            finally:
                heartbeat.cancel()
                if watching is not None:
                    watching.cancel()
            if budget is not None:
                result.stopped_by_budget = budget.stopped
                result.budget_note = budget.summary()
                result.spent_usd = budget.spent_total
            _finish(store, plan, result)
            if monitor is not None:
                await asyncio.to_thread(monitor.refresh)  # the view's last frame: the final counts
        finally:
            lease.release()
    finally:
        if own_gateway:
            await gateway.aclose()
    return result


def progress_feed(
    on_progress: Callable[[int, int], None] | None, monitor: SweepMonitor | None
) -> Callable[[int, int], None]:
    """One progress callback that feeds the caller's and the live view's."""
    feeds = [f for f in (on_progress, monitor.on_progress if monitor else None) if f is not None]

    def report(done: int, total: int) -> None:
        for feed in feeds:
            feed(done, total)

    return report


def _start(store: Store, plan: SweepPlan, created: bool, *, retry_failed: bool) -> int:
    """The sweep's bookkeeping before any tree grows (local or on Ray), once this process holds
    its lease (``RunLease.create_or_claim``, ``created`` when it wrote the Run row): a re-run
    marked running again, each run config's provenance. Returns how many failed conversations
    ``retry_failed`` set to run again."""
    from branchpoint.simulator.provenance import record_provenance

    retried = 0 if created else _begin(store, plan, retry_failed=retry_failed)
    for config, run_plan in plan.runs:
        record_provenance(store, run_plan, config)
    return retried


def _identity_with_registration(plan: SweepPlan) -> dict[str, Any]:
    """The sweep's identity record with its pre-registered analysis (issue 46): registered as
    the first cell runs, kept (or amended) by each re-run."""
    record = identity_record(plan.manifest, plan.path, plan.scenario_hashes)
    record["analysis_plan"] = plan.analysis_registration or registration(
        record["manifest"].get("analysis")
    )
    return record


def new_run_row(plan: SweepPlan) -> dict[str, Any]:
    """The Run row of a sweep that has none yet (its owner is added by the lease)."""
    record = _identity_with_registration(plan)
    return {
        "id": plan.sweep_id,
        "kind": "sweep",
        "name": plan.manifest.name,
        "status": "running",
        "config": record,
        "branchpoint_version": record["versions"].get("branchpoint", ""),
    }


def _begin(store: Store, plan: SweepPlan, *, retry_failed: bool = False) -> int:
    """Mark a re-run of the sweep running again (its Run row exists: the lease was claimed on
    it); with ``retry_failed`` its failed conversations run again. Returns how many were set to
    run again."""
    from branchpoint.simulator.lifecycle import retry_failed_in

    retried = 0
    with store.session() as s:
        row = s.get(Run, plan.sweep_id)
        if row is None:
            raise UserError(f"sweep {plan.sweep_id}: its run was removed while starting; try again")
        record = _identity_with_registration(plan)
        # Conversations a dead process left running are recorded as interrupted (with why)
        # before this process continues them from their last stored turn.
        stale = s.exec(
            select(Conversation).where(
                col(Conversation.run_id) == plan.sweep_id, col(Conversation.status) == "running"
            )
        ).all()
        for conv in stale:
            conv.status, conv.updated_at = "interrupted", utcnow()
            conv.error = "interrupted: the process ended before the conversation finished"
            s.add(conv)
        if retry_failed:
            retried = retry_failed_in(s, plan.sweep_id)
        # The stored manifest becomes this one (identity.check_compatible allowed it): it
        # may add targets, conditions or replicates; earlier ones are kept in the history.
        history = list((row.config or {}).get("history", []))
        old = dict(row.config or {})
        old.pop("history", None)
        history.append({"at": utcnow().isoformat(), **old})
        row.config = {**record, "history": history}
        row.status = "running"
        row.updated_at = utcnow()
        s.add(row)
        s.commit()
    return retried


def _finish(store: Store, plan: SweepPlan, result: SweepResult) -> None:
    from branchpoint.core.read import run_conversations

    planned = {a.conversation_id for _, p in plan.runs for t in p.trees for a in t.arms}
    convs = [c for c in run_conversations(store, plan.sweep_id) if c.id in planned]
    result.conversations = len(convs)
    result.completed = sum(1 for c in convs if c.status == "completed")
    for c in convs:
        if c.status != "completed":
            reason = c.stop_reason or c.status
            result.failed_status += c.status == "failed"
            result.failed[reason] = result.failed.get(reason, 0) + 1
    with store.session() as s:
        row = s.get(Run, plan.sweep_id)
        if row is not None:
            row.status = "stopped_by_budget" if result.stopped_by_budget else "completed"
            row.updated_at = utcnow()
            s.add(row)
            s.commit()


def sweep_budget(plan: SweepPlan, store: Store) -> Budget | None:
    """The manifest's budget, its spend so far rebuilt from the store (``spend_of_run``: the
    sweep's call rows, and the calls a process that died had out at their reserved bound), or
    None without one."""
    from branchpoint.gateway.budget import Budget, spend_of_run

    b = plan.manifest.budget
    if b is None or (b.usd_total is None and b.usd_per_target is None):
        return None
    targets = {a.conversation_id: t.target for _, p in plan.runs for t in p.trees for a in t.arms}
    return Budget(
        b.usd_total,
        b.usd_per_target,
        spend_of_run(store, plan.sweep_id),
        on_reached=b.on_reached,
        targets=targets,
    )


def sweep_prices(plan: SweepPlan) -> dict[str, Price]:
    """USD per token of every priced model the sweep calls, in any role (plan_sweep refused
    unpriced ones when a budget is set): what its gateways price each call's recorded cost by,
    and a budget's reservations."""
    from branchpoint.study.plan import model_prices

    return {spec: p for spec, p in model_prices(plan.manifest).items() if p is not None}
