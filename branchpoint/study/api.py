"""The study's Python API: plan a sweep from its manifest, then run it, as ``branchpoint sweep``
does (the command is these calls with a cost question and a live view between them).

    from branchpoint.study import plan_study, run_study
    plan = plan_study("study.yaml")       # cells, calls, tokens, dollars, wall time, power
    print("\\n".join(plan.lines()))
    result = run_study(plan)              # grows the cells not done yet, and judges them
    result.sweep.completed, result.judging.errors

``run_study`` runs its own event loop; where one already runs (a Jupyter notebook),
``await arun_study(plan, store)`` instead. Re-planning and running the same manifest continues
the sweep, as the command does; the results are read through ``branchpoint.core.read``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.judges.runner import JudgeSummary
    from branchpoint.study.manifest import Manifest
    from branchpoint.study.monitor import SweepMonitor
    from branchpoint.study.plan import SweepPlan
    from branchpoint.study.run import SweepResult


@dataclass
class StudyPlan:
    """A sweep's plan (its judging estimated) and where it runs."""

    sweep: SweepPlan
    # the store it reads and runs into: the ``db`` given, else the manifest's, else the default
    store_url: str | None
    retry_failed: bool = False  # the sweep's failed conversations count as to do, and run again

    @property
    def sweep_id(self) -> str:
        return self.sweep.sweep_id

    def lines(self) -> list[str]:
        """The plan as ``branchpoint sweep`` prints it."""
        return self.sweep.lines()

    def check_runnable(self) -> None:
        """Refuse what cannot run: on Ray, a SQLite store or a budget, or Ray not installed. (A
        budget is enforced while a local sweep runs; the plan has already refused a budget with
        an unpriced model.)"""
        from branchpoint.core.store import resolve_url

        if self.sweep.manifest.execution.mode == "ray":
            from branchpoint.study.ray_exec import check_ray

            check_ray(self.sweep, resolve_url(self.store_url))


@dataclass
class StudyResult:
    """What a run did: its conversations (``sweep``) and its judges (``judging``, every judge,
    rubric and pass merged)."""

    sweep: SweepResult
    judging: JudgeSummary
    # The sweep's model call rows in the store at the end, by purpose (target, persona,
    # detector, judge): what ``branchpoint runs`` counts, and what the summary prints. A call the
    # budget refused before sending it has no row (``sweep.calls`` counts the calls attempted).
    stored_calls: dict[str, int] = field(default_factory=dict)
    cached_calls: dict[str, int] = field(default_factory=dict)  # of them, the cache's answers
    # persona turns not enacted / low in realism (the judges' manipulation checks and realism
    # ratings, or the realism gate's), as every summary words them; None when none is rated
    persona_flags: str | None = None
    # arms whose branch point never fired: their parents' conversations stored again, which the
    # analysis counts once (the unit of analysis); the summary says so beside the stored count
    never_forked: int = 0

    @property
    def ok(self) -> bool:
        """Every conversation completed, no verdict is an error, no budget stopped anything."""
        stopped = self.sweep.stopped_by_budget or self.judging.stopped_by_budget
        return not (self.sweep.n_failed or self.judging.errors or stopped)


def plan_study(
    manifest_file: str | Path,
    *,
    db: str | None = None,
    new_sweep: bool = False,
    add_cells: bool = False,
    retry_failed: bool = False,
    with_keys: bool = True,
    amend: str | None = None,
) -> StudyPlan:
    """Plan the manifest's cells, the ones done counted from the store (``db``: a SQLite path or
    URL, wins over the manifest's ``store``). ``new_sweep``: a new sweep id even when one of this
    manifest exists. ``add_cells``: scenario files added to the manifest's folders or globs since
    the sweep began become new cells (without it such a sweep is refused). ``with_keys``: resolve the providers' keys (False for a plan that is only
    printed). Raises ``ManifestError`` (every problem of the file) or ``UserError`` (a change
    that would alter the stored sweep's cells, a budget with an unpriced model). A store that
    does not exist yet is not created."""
    from branchpoint.core.store import open_store
    from branchpoint.study.identity import analysis_registration, check_compatible
    from branchpoint.study.manifest import load_manifest, sweep_id_for

    manifest = load_manifest(manifest_file)
    sweep_id = sweep_id_for(manifest, manifest_file)
    url = db or _store_url(manifest, Path(manifest_file))
    # A plan of a sweep never run needs no store: planning leaves none behind.
    store = open_store(url) if _exists(url) else None
    try:
        sweep_id, stored = _identify(store, sweep_id, new_sweep)
        plan = _plan(
            manifest,
            Path(manifest_file),
            sweep_id,
            store,
            with_keys=with_keys,
            retry_failed=retry_failed,
        )
        if stored is not None:
            check_compatible(
                stored, manifest, sweep_id, str(manifest_file), plan.scenario_hashes,
                add_cells=add_cells,
            )  # fmt: skip
        plan.analysis_registration = analysis_registration(
            stored, manifest, sweep_id, str(manifest_file), amend, plan.done
        )
    finally:
        if store is not None:
            store.close()
    return StudyPlan(plan, url, retry_failed)


def run_study(plan: StudyPlan, *, monitor: SweepMonitor | None = None) -> StudyResult:
    """Run ``plan`` into its store (created if need be) on an event loop of its own: the cells
    not done yet, and the manifest's judges (``arun_study``)."""
    from branchpoint.core.store import open_store
    from branchpoint.gateway import event_loop

    plan.check_runnable()
    store = open_store(plan.store_url)
    try:
        return event_loop.run(arun_study(plan, store, monitor=monitor))
    finally:
        store.close()


def study_monitor(plan: StudyPlan, store: Store) -> SweepMonitor:
    """A monitor of ``plan``'s run (``branchpoint/study/monitor.py``), for a live view to draw."""
    from branchpoint.study.judging import judging_passes, planned_conversations
    from branchpoint.study.monitor import SweepMonitor

    sweep = plan.sweep
    return SweepMonitor(
        store,
        sweep.sweep_id,
        planned_conversations(sweep),
        judging_planned=judging_passes(sweep),
    )


async def arun_study(
    plan: StudyPlan, store: Store, *, monitor: SweepMonitor | None = None
) -> StudyResult:
    """Grow ``plan``'s cells into ``store``, locally or on Ray as its manifest says, with its
    live judges as each set of targets finishes and its judges after once all are done.
    ``monitor``: fed the progress (``study_monitor``)."""
    from branchpoint.gateway.limits import LimiterFactory, SharedLimiters
    from branchpoint.study.judging import SweepJudging
    from branchpoint.study.ray_exec import ClusterLimiters, run_sweep_ray
    from branchpoint.study.run import run_sweep, sweep_budget

    plan.check_runnable()
    sweep, retry_failed = plan.sweep, plan.retry_failed
    local = sweep.manifest.execution.mode != "ray"
    # A local sweep's judges share its budget object (live ones judge while trees still
    # reserve); on Ray the actors' is gone by then, and one rebuilt from the stored calls is exact.
    budget = sweep_budget(sweep, store) if local else None
    # and its provider limiters: a judge calling a target's provider draws on the same limits
    # (on Ray, while the workers run, the limiter actors they share)
    cluster = None if local else ClusterLimiters()
    limiters: LimiterFactory = SharedLimiters() if cluster is None else cluster
    judging = SweepJudging(
        sweep, store, monitor=monitor, budget=budget, local=local, limiters=limiters
    )
    if not local:
        result = await run_sweep_ray(
            sweep,
            store,
            on_target_done=judging.live,
            retry_failed=retry_failed,
            monitor=monitor,
            limiters=cluster,
        )
    else:
        result = await run_sweep(
            sweep,
            store,
            on_target_done=judging.live,
            retry_failed=retry_failed,
            monitor=monitor,
            budget=budget,
            limiters=limiters,
        )
    await judging.judge(None, "after")
    from branchpoint.core.read.persona_flags import persona_flags_line

    if result.spent_usd is not None:  # the judges' spend too, from the call rows
        from branchpoint.core.read import reserved_by_target
        from branchpoint.gateway.budget import spend_of_run

        result.spent_usd = sum(spend_of_run(store, sweep.sweep_id).values())
        result.reserved_usd = sum(reserved_by_target(store, sweep.sweep_id).values())
    from branchpoint.core.read.calls import cached_call_counts

    return StudyResult(
        result,
        judging.summary(),
        stored_calls=_stored_calls(store, sweep.sweep_id),
        cached_calls=cached_call_counts(store, sweep.sweep_id),
        persona_flags=persona_flags_line(store, sweep.sweep_id),
        never_forked=_never_forked(store, sweep.sweep_id),
    )


def _never_forked(store: Store, sweep_id: str) -> int:
    from branchpoint.core.read import conversation_tree

    tree = conversation_tree(store, [sweep_id])
    return int((tree["parent_id"].notna() & tree["fork_turn"].isna()).sum())


def _stored_calls(store: Store, sweep_id: str) -> dict[str, int]:
    from sqlalchemy import func, select

    from branchpoint.core.read.schema import MODEL_CALLS

    m = MODEL_CALLS.c
    q = select(m.purpose, func.count()).where(m.run_id == sweep_id).group_by(m.purpose)
    with store.engine.connect() as conn:
        return {str(p): int(n) for p, n in conn.execute(q)}


def _store_url(manifest: Manifest, path: Path) -> str | None:
    """The manifest's store: a URL as is, a path relative to the manifest's folder."""
    if manifest.store is None:
        return None
    if "://" in manifest.store or Path(manifest.store).is_absolute():
        return manifest.store
    return str(path.resolve().parent / manifest.store)


def _exists(url: str | None) -> bool:
    from branchpoint.core.store import resolve_url

    resolved = resolve_url(url)
    if not resolved.startswith("sqlite"):
        return True
    return Path(resolved.removeprefix("sqlite:///")).exists()


def _identify(
    store: Store | None, sweep_id: str, new_sweep: bool
) -> tuple[str, dict[str, Any] | None]:
    """The id to run under (a new one with ``new_sweep``), and its stored identity if any."""
    from branchpoint.core.read import find_run

    if new_sweep:
        return f"{sweep_id}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}", None
    existing = find_run(store, sweep_id) if store is not None else None
    return sweep_id, (dict(existing.config or {}) if existing is not None else None)


def _plan(
    manifest: Manifest,
    path: Path,
    sweep_id: str,
    store: Store | None,
    *,
    with_keys: bool,
    retry_failed: bool = False,
) -> SweepPlan:
    from branchpoint.study.judge_estimate import estimate_judging
    from branchpoint.study.plan import plan_sweep

    plan = plan_sweep(
        manifest, path, sweep_id, store=store, with_keys=with_keys, retry_failed=retry_failed
    )
    plan.attach_judging(estimate_judging(plan, store))  # its calls, costs and wall time
    return plan
