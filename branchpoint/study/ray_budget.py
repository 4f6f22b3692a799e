"""A sweep's budget shared by every Ray worker: one budget actor, and a client in each gateway.

The actor holds one ``branchpoint.gateway.budget.Budget`` (the same rules as a local sweep: reserve an
upper bound before an attempt, settle with its cost after, wait while the calls in flight could
still leave room, refuse once even an idle budget cannot fit the call). It is an async actor, so
a reservation that waits for others to settle waits on the actor's own event loop while other
workers' calls go on. ``RayBudget`` is what a worker's gateway holds: ``acquire`` asks the actor
and raises ``BudgetReached`` locally when it is refused (the tree then leaves its arms resumable,
as in one process); ``settle`` is sent without waiting. Each worker's gateway commits a priced
call's reservation to the store before sending it, as in one process, so the spend the driver
rebuilds (``spend_of_run``: the call rows, plus the reservations a killed driver or worker left)
counts what the cluster had out when it died.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from branchpoint.gateway.budget import Budget, BudgetReached, Reservation


def budget_actor_class() -> Any:
    """The Ray actor class around Budget (made on first use: Ray is an optional extra)."""
    import ray

    global _ACTOR
    if _ACTOR is None:

        class BudgetActor:
            def __init__(
                self,
                usd_total: float | None,
                usd_per_target: dict[str, float] | float | None,
                spent: dict[str, float],
                on_reached: Literal["stop", "skip_target"],
            ) -> None:
                self.budget = Budget(usd_total, usd_per_target, spent, on_reached=on_reached)

            async def acquire(self, target: str, upper_usd: float) -> Reservation | list[str]:
                try:
                    return await self.budget.acquire(target, upper_usd)
                except BudgetReached as exc:
                    return [exc.scope, str(exc)]

            async def settle(self, reservation: Reservation, actual_usd: float) -> None:
                self.budget.settle(reservation, actual_usd)

            async def state(self) -> dict[str, Any]:
                return {
                    "stopped": self.budget.stopped,
                    "summary": self.budget.summary(),
                    "spent_total": self.budget.spent_total,
                }

        _ACTOR = ray.remote(num_cpus=0)(BudgetActor)
    return _ACTOR


_ACTOR: Any = None


class RayBudget(Budget):
    """The gateway's side of the budget actor; ``targets``: conversation id -> its target."""

    def __init__(self, actor: Any, targets: Mapping[str, str]) -> None:
        super().__init__(None, None, targets=targets)
        self.actor = actor

    def reserve(self, target: str, upper_usd: float) -> Reservation:
        raise TypeError("a budget shared by Ray workers books through acquire (it may wait)")

    async def acquire(self, target: str, upper_usd: float) -> Reservation:
        outcome = await self.actor.acquire.remote(target, upper_usd)
        if isinstance(outcome, Reservation):
            return outcome
        scope, why = outcome
        self.reached.setdefault(scope, why)
        raise BudgetReached(why, scope)

    def settle(self, reservation: Reservation, actual_usd: float) -> None:
        self.actor.settle.remote(reservation, actual_usd)
