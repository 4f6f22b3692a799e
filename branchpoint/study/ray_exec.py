"""Running a planned sweep on a Ray cluster (``execution: {mode: ray}``), on a PostgreSQL store.

The driver (this process) does what ``run_sweep`` does before growing trees: it holds the sweep's
run lease, writes its Run row and provenance. It then writes one ``tree_leases`` row per tree
not finished (``branchpoint.simulator.tree_lease``), puts the plan in Ray's object store (keys stripped from
it) and starts ``execution.workers`` worker actors. Each worker opens the store and a gateway of
its own and keeps ``execution.concurrency`` trees going: claim one (``FOR UPDATE SKIP LOCKED``),
heartbeat it while ``branchpoint.simulator.execute.execute(..., trees=[spec])`` grows it, mark it done.
Turns are committed as they are made, as in one process; a tree whose worker dies is claimable
once its heartbeat is ``execution.lease_s`` old (at once when the driver sees the worker die),
and whoever takes it resumes it from its last stored turn; a new worker takes the dead one's
place while trees are left (at most ``execution.workers`` of them in a sweep). A worker that
cannot refresh a lease for half that time stops growing its tree itself, so that two workers
never grow one tree.

Every provider key has one limiter actor (``branchpoint.study.ray_limits``) that every worker's
gateway asks for its calls: the limits in the manifest hold for the whole cluster, and a
Retry-After one worker gets cools them all down. API keys never travel through Ray: a worker is
sent the names of the keys its calls need and reads them where the operator put them on its node
(its environment, else ``execution.secrets_file``: ``branchpoint.study.worker_keys``), then sets them in its
environment, where the providers read them; a key missing there fails the sweep with one line
before that worker claims a tree. A budget is one budget actor
(``branchpoint.study.ray_budget``) that every worker's gateway reserves from and settles with.

``when: live`` judges run in the driver, each run plan's as soon as the lease table says all of its
trees are finished, while the workers grow the rest, their calls limited by the same limiter
actors (``ClusterLimiters``). With a budget they wait for every tree: the judges book through a
budget rebuilt from the call rows, which cannot see what the trees will still spend.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from branchpoint.core.errors import UserError
from branchpoint.study.run import OnTargetDone, SweepResult

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.gateway.limits import CallLimiter, LimiterState, ProviderLimits
    from branchpoint.simulator.plan import RunPlan, TreeSpec
    from branchpoint.study.monitor import SweepMonitor
    from branchpoint.study.plan import SweepPlan

NAMESPACE = "branchpoint"
# variables every worker needs before it imports anything (none of them secret: they travel in
# the workers' Ray runtime environment, which Ray logs)
PASSED_ENV = (
    "BRANCHPOINT_PLUGINS",
    "PYTHONPATH",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "LITELLM_LOCAL_MODEL_COST_MAP",
)
FINISHED = ("completed", "failed")


def check_ray(plan: SweepPlan, store_url: str) -> None:
    """Refuse, in one line, what a sweep on Ray cannot do: a SQLite store, Ray missing."""
    from branchpoint.core.store import resolve_url

    where = plan.path
    if not resolve_url(store_url).startswith("postgresql"):
        raise UserError(
            f"{where}: store: execution.mode ray needs a PostgreSQL store (got a SQLite file; "
            "expected postgresql+psycopg://USER@HOST/DB): workers on many machines share it"
        )
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UserError(
            f"{where}: execution.mode: ray is not installed (expected `pip install "
            "'branchpoint[ray]'`)"
        ) from None


def shippable(run_plan: RunPlan) -> RunPlan:
    """The plan without any key in its targets' params (a Ray sweep's plan is made without them;
    workers read theirs on their node, ``branchpoint.study.worker_keys``)."""
    from branchpoint.core.redaction import is_secret_key

    def strip(tree: TreeSpec) -> TreeSpec:
        extra = {k: v for k, v in tree.target_params.extra.items() if not is_secret_key(k)}
        return dataclasses.replace(
            tree, target_params=tree.target_params.model_copy(update={"extra": extra})
        )

    return dataclasses.replace(run_plan, trees=[strip(t) for t in run_plan.trees])


def worker_env() -> dict[str, str]:
    """The workers' runtime environment: what the providers and plugins read at import."""
    return {name: os.environ[name] for name in PASSED_ENV if os.environ.get(name)}


async def run_sweep_ray(
    plan: SweepPlan,
    store: Store,
    *,
    on_progress: Callable[[int, int], None] | None = None,
    on_target_done: OnTargetDone | None = None,
    retry_failed: bool = False,
    monitor: SweepMonitor | None = None,
    num_cpus: int | None = None,
    limiters: ClusterLimiters | None = None,
) -> SweepResult:
    """Grow every tree of ``plan`` on Ray workers (see the module docstring).

    Connects to ``execution.address`` when set, uses the cluster this process already joined,
    or starts a local one (``num_cpus``: its size; default one a worker). ``limiters``: the
    driver's gateways (live judges) that are to draw on the workers' limits use it as their
    ``limiter_factory``.
    """
    import ray

    from branchpoint.simulator.lease import RunLease
    from branchpoint.simulator.lifecycle import mark_stopped, stored_turns
    from branchpoint.simulator.runner import check_scripted_models
    from branchpoint.simulator.tree_lease import TreeLeases, tree_id
    from branchpoint.study.run import _finish, _start, new_run_row, progress_feed

    check_ray(plan, store.url)
    # an unknown scripted model stops the sweep here, as a local one, not on every worker
    check_scripted_models([p for _, p in plan.runs])
    judged: set[int] = set()

    async def run_done(i: int) -> None:
        judged.add(i)
        if on_target_done is not None:
            await on_target_done([a.conversation_id for t in plan.runs[i][1].trees for a in t.arms])

    ex = plan.manifest.execution
    result = SweepResult(plan.sweep_id)
    report = progress_feed(on_progress, monitor)
    lease = RunLease(store, plan.sweep_id)
    created = lease.create_or_claim(new_run_row(plan))
    started_ray = False
    workers: list[Any] = []
    try:
        result.retried = _start(store, plan, created, retry_failed=retry_failed)
        heartbeat = asyncio.create_task(lease.keep_alive())
        # the live view reads the store, and the cluster's limiters from their actors (the
        # workers' gateways are elsewhere)
        watching = None
        if monitor is not None:
            limiters = limiters or ClusterLimiters()
            limiters.interval_s = monitor.interval_s
            monitor.attach(limiters)
            watching = asyncio.create_task(monitor.watch())
        todo = _trees_to_do(store, plan)
        leases = TreeLeases(store, plan.sweep_id)
        leases.enqueue(tree_id(t) for _, t in todo)
        total = sum(p.turn_budget for _, p in plan.runs)
        report(stored_turns(store, plan.sweep_id), total)
        if monitor is not None:
            monitor.rates_from_here()
        try:
            if todo:
                if not ray.is_initialized():
                    await asyncio.to_thread(_init_ray, ex.address, num_cpus or ex.workers)
                    started_ray = True
                # a local cluster's workers inherit this process's environment (keys included:
                # the environment route works as it does for a local sweep)
                local = started_ray and not ex.address
                spend: dict[str, Any] = {}
                trees_of_run: dict[int, set[str]] = {}
                for i, tree in todo:
                    trees_of_run.setdefault(i, set()).add(tree_id(tree))
                calls, result.workers_replaced = await _drive(
                    plan,
                    store,
                    leases,
                    workers,
                    report,
                    total,
                    {} if local else worker_env(),
                    spend,
                    limiters,
                    # with a budget, judging waits for the trees: the judges book through one
                    # rebuilt from the call rows, which sees the trees' spend only once it is made
                    on_run_done=run_done
                    if on_target_done is not None and plan.manifest.budget is None
                    else None,
                    trees_of_run=trees_of_run,
                )
                result.calls.update(calls)
                if spend:
                    result.stopped_by_budget = bool(spend["stopped"])
                    result.budget_note = str(spend["summary"])
                    result.spent_usd = float(spend["spent_total"])
            counts = leases.counts()
            left = counts.get("pending", 0) + counts.get("running", 0)
            if left:
                raise RuntimeError(f"{left} tree(s) left unfinished: every Ray worker stopped")
        except BaseException as exc:
            for w in workers:
                with contextlib.suppress(Exception):
                    ray.kill(w)
            mark_stopped(store, plan.sweep_id, exc)
            raise
        finally:
            heartbeat.cancel()
            if watching is not None:
                watching.cancel()
        # live judges got each run plan's conversations as its trees finished (in the driver:
        # workers do not judge); those with no tree to grow get theirs now
        for i in range(len(plan.runs)):
            if i not in judged:
                await run_done(i)
        _finish(store, plan, result)
        if monitor is not None:
            await asyncio.to_thread(monitor.refresh)
    finally:
        lease.release()
        if started_ray:
            ray.shutdown()
    return result


def _init_ray(address: str | None, num_cpus: int) -> None:
    """Join the cluster at ``address``, or start a local one of ``num_cpus`` (a small object
    store: only the plan goes through it)."""
    import ray

    ray.init(
        address=address,
        namespace=NAMESPACE,
        num_cpus=None if address else num_cpus,
        object_store_memory=None if address else 150 * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
    )


def _trees_to_do(store: Store, plan: SweepPlan) -> list[tuple[int, TreeSpec]]:
    """(index of its run plan, tree) of every tree with an arm not finished."""
    from branchpoint.core.read import run_conversations

    status = {c.id: c.status for c in run_conversations(store, plan.sweep_id)}
    return [
        (i, t)
        for i, (_, p) in enumerate(plan.runs)
        for t in p.trees
        if any(status.get(a.conversation_id) not in FINISHED for a in t.arms)
    ]


async def _drive(
    plan: SweepPlan,
    store: Store,
    leases: Any,
    workers: list[Any],
    report: Callable[[int, int], None],
    total: int,
    env: dict[str, str],
    budget_state: dict[str, Any],
    limiters: ClusterLimiters | None,
    *,
    on_run_done: Callable[[int], Awaitable[None]] | None = None,
    trees_of_run: dict[int, set[str]] | None = None,
) -> tuple[dict[str, int], int]:
    """Start the workers, wait for them, hand back a dead one's trees; the calls they made and
    the number of dead workers replaced. ``on_run_done(i)`` runs (here, while the workers go on)
    once every tree of run plan ``i`` in ``trees_of_run`` is finished."""
    import ray

    from branchpoint.simulator.lifecycle import stored_turns
    from branchpoint.study.plan import sweep_limits
    from branchpoint.study.ray_budget import budget_actor_class
    from branchpoint.study.ray_limits import registry_actor_class
    from branchpoint.study.run import sweep_budget, sweep_prices
    from branchpoint.study.worker_keys import worker_key_needs

    ex = plan.manifest.execution
    budget = sweep_budget(plan, store)  # its spend so far rebuilt from the sweep's call rows
    budget_actor = None
    if budget is not None:
        budget_actor = budget_actor_class().remote(
            budget.usd_total,
            budget.usd_per_target,
            budget.snapshot().spent_by_target,
            budget.on_reached,
        )
    limits = {k: v.model_dump() for k, v in sweep_limits(plan.runs).items()}
    judging: list[asyncio.Future[None]] = []
    registry = registry_actor_class().remote()
    polling = None
    if limiters is not None:
        limiters.registry = registry
        polling = asyncio.ensure_future(limiters.poll())
    plans_ref = ray.put([shippable(p) for _, p in plan.runs])
    options = {
        "sweep_id": plan.sweep_id,
        "store_url": store.url,
        "limits": limits,
        "concurrency": ex.concurrency,
        # with no limit configured, a provider may have every worker's calls in flight (the
        # limiter actor is global)
        "default_concurrency": ex.concurrency * ex.workers,
        "max_attempts": ex.retries + 1,
        "timeout_s": ex.timeout_s,
        "lease_s": ex.lease_s,
        "heartbeat_s": ex.heartbeat_s,
        "budget": budget_actor,
        "prices": sweep_prices(plan),  # budget or not: each call's cost is recorded
        # names only: each worker reads the values on its own node
        "key_needs": worker_key_needs(plan.manifest),
        "secrets_file": ex.secrets_file,
    }
    actor = ray.remote(TreeWorker)
    # the owner tag of each run call's worker, once it has started
    owners: dict[asyncio.Future[dict[str, int]], str | None] = {}

    def start_worker() -> asyncio.Future[dict[str, int]]:
        handle: Any = actor.options(
            name=f"{plan.sweep_id}-worker-{len(workers)}",
            num_cpus=1,
            max_restarts=0,
            runtime_env={"env_vars": env} if env else None,
        ).remote()
        workers.append(handle)

        async def work() -> dict[str, int]:
            owners[fut] = await handle.owner.remote()
            try:
                made: dict[str, int] = await handle.run.remote(plans_ref, registry, options)
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, UserError):  # a key missing on its node, say: its line
                    raise UserError(str(exc.cause)) from None
                raise
            return made

        fut = asyncio.ensure_future(work())
        owners[fut] = None
        return fut

    try:
        pending = {start_worker() for _ in range(ex.workers)}
        # a dead worker's place is taken by a new one, up to as many as were started: a worker
        # that dies of what it runs does not die for ever
        replacements = ex.workers
        replaced = 0
        calls: dict[str, int] = {}
        waiting = dict(trees_of_run or {}) if on_run_done is not None else {}
        while pending:
            done, pending = await asyncio.wait(pending, timeout=1.0, return_when="FIRST_COMPLETED")
            report(await asyncio.to_thread(stored_turns, store, plan.sweep_id), total)
            if waiting:
                assert on_run_done is not None
                finished = await asyncio.to_thread(leases.finished)
                for i in [i for i, trees in waiting.items() if trees <= finished]:
                    del waiting[i]
                    judging.append(asyncio.ensure_future(on_run_done(i)))
            for fut in done:
                owner = owners[fut]
                try:
                    for purpose, n in fut.result().items():
                        calls[purpose] = calls.get(purpose, 0) + n
                except ray.exceptions.RayActorError:
                    # the worker died: its trees are claimable now, its limiter slots are free
                    if owner is not None:
                        await asyncio.to_thread(leases.release_owner, owner)
                        await registry.forget.remote(owner)
                    if replacements and _trees_left(await asyncio.to_thread(leases.counts)):
                        replacements -= 1
                        replaced += 1
                        pending.add(start_worker())
            # only workers the cluster has not started yet (no CPU free where one died, say):
            # with no tree left for them, the sweep is done without them
            if (
                pending
                and all(owners[f] is None for f in pending)
                and not _trees_left(await asyncio.to_thread(leases.counts))
            ):
                for fut in pending:
                    fut.cancel()
                pending = set()
        if budget_actor is not None:
            state = await budget_actor.state.remote()
            budget_state.update(state)
        await asyncio.gather(*judging)
    finally:
        if limiters is not None:
            limiters.registry = None  # a gateway made from now on limits its own calls
        if polling is not None:
            polling.cancel()
        for task in judging:
            task.cancel()  # the sweep failed: no judging of it goes on
        # done with them: the names are free for the next sweep, the actors' memory too (a
        # limiter actor belongs to the registry and goes with it)
        for handle in [*workers, registry, *([budget_actor] if budget_actor else [])]:
            with contextlib.suppress(Exception):
                ray.kill(handle)
    return calls, replaced


class ClusterLimiters:
    """The driver's side of the cluster's limiter actors while the workers run.

    As a ``limiter_factory`` it gives a gateway of the driver (a live judge's) limiters that
    draw on the actors, so a judge calling a target's provider shares the workers' limits;
    before the workers start and after they are done it gives local ones. As the live view's
    gateway it reports the actors' states, as last polled."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.registry: Any = None  # set while the workers run
        self.states: list[LimiterState] = []
        self._owner: str | None = None

    def __call__(self, key: str, limits: ProviderLimits) -> CallLimiter:
        from branchpoint.gateway.limits import local_limiter
        from branchpoint.study.ray_limits import RayLimiter

        if self.registry is None:
            return local_limiter(key, limits)
        if self._owner is None:
            from branchpoint.simulator.lease import owner_tag

            self._owner = owner_tag()
        return RayLimiter(key, limits, self.registry, self._owner)

    def limiter_states(self) -> list[LimiterState]:
        return list(self.states)

    async def poll(self) -> None:
        from branchpoint.gateway.limits import LimiterState

        while self.registry is not None:
            with contextlib.suppress(Exception):  # a missed poll: the view shows the last one
                snapshots = await self.registry.snapshots.remote()
                self.states = [LimiterState.model_validate(d) for d in snapshots]
            await asyncio.sleep(self.interval_s)


def _trees_left(counts: dict[str, int]) -> bool:
    return bool(counts.get("pending") or counts.get("running"))


class TreeWorker:
    """A Ray worker actor: claims trees and grows them until none is left (module docstring)."""

    def __init__(self) -> None:
        from branchpoint.simulator.lease import owner_tag

        self.tag = owner_tag()

    def owner(self) -> str:
        return self.tag

    def pid(self) -> int:
        return os.getpid()

    async def run(
        self, plans: list[RunPlan], registry: Any, options: dict[str, Any]
    ) -> dict[str, int]:
        from branchpoint.study.worker_keys import resolve_keys, this_node

        # before anything is claimed: a worker without its keys grows nothing
        keys = resolve_keys(
            [(name, role) for name, role in options["key_needs"]],
            options["secrets_file"],
            this_node(),
        )
        os.environ.update(keys)  # where the providers read a key_env
        from branchpoint.core.store import open_store
        from branchpoint.gateway.gateway import Gateway
        from branchpoint.gateway.limits import ProviderLimits
        from branchpoint.simulator.runner import load_plugins
        from branchpoint.simulator.tree_lease import TreeLeases, tree_id
        from branchpoint.study.ray_limits import RayLimiter

        store = open_store(options["store_url"])
        gateway = Gateway(
            store=store,
            limits=options["limits"],
            default_concurrency=options["default_concurrency"],
            max_attempts=options["max_attempts"],
            timeout_s=options["timeout_s"],
            write_behind=True,
            limiter_factory=lambda key, limits: RayLimiter(
                key, ProviderLimits.model_validate(limits), registry, self.tag
            ),
        )
        if options["budget"] is not None:
            from branchpoint.study.ray_budget import RayBudget

            targets = {a.conversation_id: t.target for p in plans for t in p.trees for a in t.arms}
            gateway.budget = RayBudget(options["budget"], targets)
        gateway.prices = options["prices"]
        load_plugins(gateway)
        index = {tree_id(t): (p, t) for p in plans for t in p.trees}
        leases = TreeLeases(store, options["sweep_id"])
        calls: dict[str, int] = {}
        try:
            await asyncio.gather(
                *(
                    self._slot(store, gateway, leases, index, options, calls)
                    for _ in range(options["concurrency"])
                )
            )
        finally:
            await gateway.aclose()
            store.close()
        return calls

    async def _slot(
        self,
        store: Store,
        gateway: Any,
        leases: Any,
        index: dict[str, tuple[RunPlan, TreeSpec]],
        options: dict[str, Any],
        calls: dict[str, int],
    ) -> None:
        from branchpoint.simulator.execute import execute

        lease_s, beat_s = float(options["lease_s"]), float(options["heartbeat_s"])
        while True:
            claim = await asyncio.to_thread(leases.claim, self.tag, lease_s)
            if claim is None:
                counts = await asyncio.to_thread(leases.counts)
                if not _trees_left(counts):
                    return
                # trees held by others: one may go stale and be ours to take over
                await asyncio.sleep(min(beat_s, lease_s / 4))
                continue
            run_plan, spec = index[claim.tree_id]
            if claim.previous_owner is not None:
                await asyncio.to_thread(
                    leases.interrupt_arms,
                    [a.conversation_id for a in spec.arms],
                    claim.previous_owner,
                )
            task = asyncio.create_task(execute(run_plan, store, gateway, trees=[spec]))
            last_beat, lost = time.monotonic(), False
            while not task.done():
                await asyncio.wait({task}, timeout=beat_s)
                if task.done():
                    break
                try:
                    if await asyncio.to_thread(leases.beat, self.tag, claim.tree_id):
                        last_beat = time.monotonic()
                    else:
                        lost = True
                except Exception:  # a missed beat is not fatal; a lease gone stale is
                    pass
                if lost or time.monotonic() - last_beat > lease_s / 2:
                    # another worker has it (or may have it soon): stop writing this tree
                    lost = True
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                    break
            if lost:
                continue
            try:
                execution = task.result()
            except Exception as exc:  # a store failure: hand the tree back, or give it up
                error = f"{type(exc).__name__}: {exc}"[:2000]
                status = "failed" if claim.attempts >= 3 else "pending"
                await asyncio.to_thread(leases.finish, self.tag, claim.tree_id, status, error)
                continue
            for purpose, n in execution.calls.items():
                calls[purpose] = calls.get(purpose, 0) + n
            await asyncio.to_thread(leases.finish, self.tag, claim.tree_id, "done")
