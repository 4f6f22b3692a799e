"""Running a planned sweep in this process: one Run row (kind ``sweep``), every run config's trees
grown concurrently through one gateway, resumable.

The sweep holds its run's lease for the whole time (simulator/lease.py), writes each run config's
provenance, then executes the plans together; trees already finished are skipped by the engine,
so a re-run continues where the last one stopped. Judging belongs to a higher layer: the caller
passes ``on_target_done``, awaited with the conversation ids of each set of targets as soon as
their trees are done (what ``when: live`` judges use).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlmodel import col, select

from core.records import Conversation, Run, utcnow
from simulator.sweep.identity import identity_record

if TYPE_CHECKING:
    from core.store import Store
    from simulator.gateway import Gateway
    from simulator.plan import RunPlan
    from simulator.sweep.plan import SweepPlan

OnTargetDone = Callable[[list[str]], Awaitable[None]]


@dataclass
class SweepResult:
    sweep_id: str
    calls: Counter[str] = field(default_factory=Counter)  # this invocation's, by purpose
    conversations: int = 0
    completed: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # stop reason -> conversations

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
) -> SweepResult:
    """Grow every tree of ``plan`` into ``store`` (see the module docstring)."""
    from simulator.execute import Progress, execute
    from simulator.gateway import Gateway
    from simulator.lease import RunLease
    from simulator.lifecycle import mark_interrupted, stored_turns
    from simulator.provenance import record_provenance
    from simulator.runner import load_plugins

    m = plan.manifest
    own_gateway = gateway is None
    limits = {k: v for config, _ in plan.runs for k, v in config.limits.items()}
    gateway = gateway or Gateway(
        store=store,
        limits=limits,
        default_concurrency=m.execution.concurrency,
        max_attempts=m.execution.retries + 1,
        write_behind=True,
    )
    progress = Progress(on_progress)
    result = SweepResult(plan.sweep_id)
    try:
        load_plugins(gateway)
        lease = RunLease(store, plan.sweep_id)
        claimed = lease.claim()
        try:
            _begin(store, plan, lease.owner)
            if not claimed:
                lease.held()
            for config, run_plan in plan.runs:
                record_provenance(store, run_plan, config)
            heartbeat = asyncio.create_task(lease.keep_alive())
            progress.add_total(sum(p.turn_budget for _, p in plan.runs))
            progress.advance(stored_turns(store, plan.sweep_id))

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
                stopped = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
                why = str(exc.args[0]) if exc.args else type(exc).__name__
                mark_interrupted(
                    store,
                    plan.sweep_id,
                    f"{'interrupted' if stopped else 'failed'}: {why}"[:2000],
                    run_status="interrupted" if stopped else "failed",
                )
                raise
            finally:
                heartbeat.cancel()
            _finish(store, plan, result)
        finally:
            lease.release()
    finally:
        if own_gateway:
            await gateway.aclose()
    return result


def _begin(store: Store, plan: SweepPlan, owner: str) -> None:
    """Write the sweep's Run row, or mark a re-run of it running again."""
    with store.session() as s:
        row = s.get(Run, plan.sweep_id)
        record = identity_record(plan.manifest, plan.path, plan.scenario_hashes)
        if row is None:
            s.add(
                Run(
                    id=plan.sweep_id,
                    kind="sweep",
                    name=plan.manifest.name,
                    status="running",
                    config=record,
                    branchpoint_version=record["versions"].get("branchpoint", ""),
                    owner=owner,
                    heartbeat_at=utcnow(),
                )
            )
        else:
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


def _finish(store: Store, plan: SweepPlan, result: SweepResult) -> None:
    from core.read import run_conversations

    planned = {a.conversation_id for _, p in plan.runs for t in p.trees for a in t.arms}
    convs = [c for c in run_conversations(store, plan.sweep_id) if c.id in planned]
    result.conversations = len(convs)
    result.completed = sum(1 for c in convs if c.status == "completed")
    for c in convs:
        if c.status != "completed":
            reason = c.stop_reason or c.status
            result.failed[reason] = result.failed.get(reason, 0) + 1
    with store.session() as s:
        row = s.get(Run, plan.sweep_id)
        if row is not None:
            row.status = "completed"
            row.updated_at = utcnow()
            s.add(row)
            s.commit()
