"""A sweep's judges, run while it runs: ``when: live`` ones as each set of targets finishes,
``when: after`` ones once every tree is done (``branchpoint.study.api.run_study`` wires them in).

Each pass goes through a gateway with the sweep's limits and prices (every call's cost is
recorded) and, with a budget, the sweep's budget, so a judge's calls count against what the
conversations may spend; a judge calling a target's provider draws on the same limiters
(``limiters``). A judge's ``key_env`` is read when it runs, as a target's is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.gateway.budget import Budget
    from branchpoint.gateway.limits import LimiterFactory
    from branchpoint.judges.runner import JudgeSummary
    from branchpoint.study.monitor import SweepMonitor
    from branchpoint.study.plan import SweepPlan


def planned_conversations(plan: SweepPlan) -> dict[str, list[str]]:
    """Target -> the conversation ids the plan grows for it (every arm of its trees)."""
    planned: dict[str, list[str]] = {}
    for _, run_plan in plan.runs:
        for tree in run_plan.trees:
            planned.setdefault(tree.target, []).extend(a.conversation_id for a in tree.arms)
    return planned


def judging_passes(plan: SweepPlan) -> int:
    """How many judging passes the sweep makes: a live judge's rubric once per run config (each
    set of targets), an after one's once."""
    judges = plan.manifest.judges
    return sum(len(e.rubrics) * (len(plan.runs) if e.when == "live" else 1) for e in judges)


class SweepJudging:
    """The sweep's judges: ``live(ids)`` is the sweep's ``on_target_done``; ``judge(None,
    "after")`` runs the judges after; ``summary()`` merges every judge, rubric and pass."""

    def __init__(
        self,
        plan: SweepPlan,
        store: Store,
        *,
        monitor: SweepMonitor | None,
        budget: Budget | None,
        local: bool,
        limiters: LimiterFactory,
    ) -> None:
        self.plan, self.store, self.monitor = plan, store, monitor
        self.budget, self.local, self.limiters = budget, local, limiters
        self.target_of = {
            i: target for target, ids in planned_conversations(plan).items() for i in ids
        }
        self.summaries: list[JudgeSummary] = []  # every judge, rubric and pass

    async def judge(self, ids: list[str] | None, when: str) -> None:
        from branchpoint.gateway.specs import params_from
        from branchpoint.judges.runner import ajudge_run
        from branchpoint.simulator.runner import load_plugins
        from branchpoint.study.manifest import read_keys
        from branchpoint.study.plan import keyed_params
        from branchpoint.study.run import sweep_budget, sweep_gateway, sweep_prices

        plan, store, monitor, target_of = self.plan, self.store, self.monitor, self.target_of
        entries = [e for e in plan.manifest.judges if e.when == when]
        if not entries:
            return
        gateway = sweep_gateway(plan, store, write_behind=False, limiters=self.limiters)
        load_plugins(gateway)  # a judge may be a plugin's model, as a target may
        gateway.budget = self.budget if self.local else sweep_budget(plan, store)
        gateway.prices = sweep_prices(plan)  # budget or not: each verdict's call is priced
        read_keys(plan.manifest, only="judges")  # every variable set, or one line each
        try:
            for entry in entries:
                for rubric in entry.rubrics:
                    on = sorted({target_of[i] for i in ids or [] if i in target_of})
                    label = f"{entry.spec}/{rubric} {when}" + (f" on {', '.join(on)}" if on else "")
                    if monitor is not None:
                        monitor.judge_started(
                            label, when, len(ids if ids is not None else target_of)
                        )
                    summary = await ajudge_run(
                        None if ids is not None else plan.sweep_id,
                        store=store,
                        rubric=rubric,
                        judges=[entry.spec],
                        params=params_from(keyed_params(entry.params, entry), where="judges.params")
                        if entry.params or entry.key_env
                        else None,
                        conversation_ids=ids,
                        gateway=gateway,
                        batch=entry.batch,
                        price=entry.price.per_mtok() if entry.price is not None else None,
                        batch_factor=entry.price.batch_factor if entry.price is not None else None,
                        # as many in flight as the sweep's conversations (the limits still hold)
                        concurrency=plan.manifest.execution.concurrency,
                    )
                    self.summaries.append(summary)
                    if monitor is not None:
                        monitor.judge_finished(label, rows=summary.rows, errors=summary.errors)
        finally:
            await gateway.aclose()

    async def live(self, ids: list[str]) -> None:
        await self.judge(ids, "live")

    def summary(self) -> JudgeSummary:
        from branchpoint.judges.scenario_rubrics import merge_summaries

        return merge_summaries(self.summaries)
