"""Spending limits in USD: a reservation of a call's upper-bound cost before it is sent, settled
with its actual cost after.

    budget = Budget(usd_total=0.05, usd_per_target=None, spent=spend_of_run(store, sweep_id))
    reservation = await budget.acquire("litellm:openai/gpt-4o-mini", upper_usd=0.0004)
    ...                                   # the call
    budget.settle(reservation, actual_usd=0.00011)

A call is sent only while what was spent, plus what calls in flight may still spend, plus its own
upper bound, fits under every limit that applies to it (the total, and its target's). A call that
would fit once the calls in flight are settled waits for them; one that cannot fit even then
raises ``BudgetReached``, and from then on no call of that scope is dispatched: the budget is
reached before it is exceeded, and calls already in flight finish.

With a store, a reservation is also durable before its call is sent: the gateway commits a
``spend_reservations`` row (the attempt's bound) and awaits that commit. The store changes first
and memory follows, so that the store never counts more than memory: an answered attempt's row
is deleted in the transaction that stores the call's row with its cost, and memory settles once
that has committed; an error answer's row (not billed) is deleted, then memory releases it; a
timeout's or a cut connection's (perhaps billed) stays, and memory counts its bound as spent.
The spend a sweep starts from (``spend_of_run``) is its calls' recorded cost plus the bound of
every reservation row left: a call that a killed process had sent (its answer lost, perhaps
billed) or whose row was still in the write-behind buffer counts at its bound, so a crash never
lowers the spend below what the provider can have billed (docs/operations/ledger-and-store.md).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    from branchpoint.core.store import Store

TOTAL = "*"  # the scope of usd_total in BudgetReached.scope and snapshots


class BudgetReached(Exception):
    """A call was not sent because it could exceed the budget.

    Not a ModelError: it is not retried and does not fail a conversation; the conversation is left
    ``interrupted`` (resumable) with ``stopped_by_budget: ...`` as its error. ``scope`` is the
    target whose budget was reached, or ``"*"`` for the total."""

    def __init__(self, message: str, scope: str = TOTAL) -> None:
        super().__init__(message)
        self.scope = scope


@dataclass(frozen=True)
class Reservation:
    id: int
    target: str
    upper_usd: float


class BudgetState(BaseModel):
    """The budget as the live view shows it."""

    usd_total: float | None
    spent_total: float
    reserved_total: float
    spent_by_target: dict[str, float]
    reached: list[str]  # scopes reached: "*" for the total, or targets
    on_reached: Literal["stop", "skip_target"]


class Budget:
    """USD limits for the calls of one sweep (one event loop; no awaits between a check and its
    booking, so no lock is needed). See the module docstring.

    ``usd_per_target`` is one limit for every target or a limit per target; ``spent`` is the spend
    so far by target (``spend_of_run``); ``targets`` maps a conversation id to its target, so that
    a persona or detector call counts against the target of its conversation. ``on_reached``:
    ``stop`` stops every call once any limit is reached, ``skip_target`` stops only the calls of
    a target whose own limit is reached (the total still stops everything).
    """

    def __init__(
        self,
        usd_total: float | None,
        usd_per_target: dict[str, float] | float | None = None,
        spent: Mapping[str, float] | None = None,
        *,
        on_reached: Literal["stop", "skip_target"] = "stop",
        targets: Mapping[str, str] | None = None,
    ) -> None:
        self.usd_total = usd_total
        self.usd_per_target = usd_per_target
        self.on_reached = on_reached
        self.targets = dict(targets or {})
        self._spent: dict[str, float] = {k: float(v) for k, v in (spent or {}).items()}
        self._reserved: dict[int, Reservation] = {}
        self._ids = itertools.count(1)
        self.reached: dict[str, str] = {}  # scope -> why
        self._settled: asyncio.Event | None = None

    # -- what is spent -------------------------------------------------------------------------

    @property
    def spent_total(self) -> float:
        return sum(self._spent.values())

    @property
    def reserved_total(self) -> float:
        return sum(r.upper_usd for r in self._reserved.values())

    def spent_of(self, target: str) -> float:
        return self._spent.get(target, 0.0)

    def limit_of(self, target: str) -> float | None:
        if isinstance(self.usd_per_target, dict):
            return self.usd_per_target.get(target)
        return self.usd_per_target

    def target_for(self, conversation_id: str | None, spec: str) -> str:
        """The target a call counts against: its conversation's, else the model called."""
        if conversation_id is not None and conversation_id in self.targets:
            return self.targets[conversation_id]
        return spec

    @property
    def stopped(self) -> bool:
        """Whether any call was refused (the sweep did not run everything it planned)."""
        return bool(self.reached)

    # -- reserving -----------------------------------------------------------------------------

    def reserve(self, target: str, upper_usd: float) -> Reservation:
        """Book ``upper_usd`` for a call to ``target`` now, or raise BudgetReached (also when it
        would fit only after the calls in flight settle: ``acquire`` waits for those)."""
        problem = self._problem(target, upper_usd, with_reserved=True)
        if problem is not None:
            raise BudgetReached(problem[1], problem[0])
        return self._book(target, upper_usd)

    async def acquire(self, target: str, upper_usd: float) -> Reservation:
        """Book ``upper_usd`` for a call to ``target``, waiting for calls in flight to settle
        while it could still fit; BudgetReached when it cannot fit even with none in flight."""
        while True:
            final = self._problem(target, upper_usd, with_reserved=False)
            if final is not None:
                scope, why = final
                self._mark(scope, why)
                raise BudgetReached(why, scope)
            if self._problem(target, upper_usd, with_reserved=True) is None:
                return self._book(target, upper_usd)
            if self._settled is None:
                self._settled = asyncio.Event()
            settled = self._settled
            await settled.wait()

    def settle(self, reservation: Reservation, actual_usd: float) -> None:
        """Replace ``reservation`` by what the call cost (0 for one that failed unbilled)."""
        if self._reserved.pop(reservation.id, None) is None:
            return  # settled already
        if actual_usd:
            self._spent[reservation.target] = self.spent_of(reservation.target) + actual_usd
        if self._settled is not None:
            self._settled.set()  # waiters look again
            self._settled = None

    def snapshot(self) -> BudgetState:
        return BudgetState(
            usd_total=self.usd_total,
            spent_total=self.spent_total,
            reserved_total=self.reserved_total,
            spent_by_target=dict(self._spent),
            reached=sorted(self.reached),
            on_reached=self.on_reached,
        )

    def summary(self) -> str:
        """One line: what was reached, and the spend."""
        why = "; ".join(self.reached.values()) or "not reached"
        return f"budget: {why}; spent ${self.spent_total:.4f}"

    def _book(self, target: str, upper_usd: float) -> Reservation:
        reservation = Reservation(next(self._ids), target, max(0.0, upper_usd))
        self._reserved[reservation.id] = reservation
        return reservation

    def _mark(self, scope: str, why: str) -> None:
        if scope != TOTAL and self.on_reached == "stop":
            scope = TOTAL  # any limit reached stops the whole sweep
        self.reached.setdefault(scope, why)

    def _problem(
        self, target: str, upper_usd: float, *, with_reserved: bool
    ) -> tuple[str, str] | None:
        """(scope, why) when the call must not be sent, or None."""
        if TOTAL in self.reached:
            return TOTAL, self.reached[TOTAL]
        if target in self.reached:
            return target, self.reached[target]
        if self.usd_total is not None:
            held = self.reserved_total if with_reserved else 0.0
            if self.spent_total + held + upper_usd > self.usd_total:
                return TOTAL, (
                    f"usd_total ${self.usd_total:g} reached (spent ${self.spent_total:.4f}, "
                    f"next call up to ${upper_usd:.4f})"
                )
        limit = self.limit_of(target)
        if limit is not None:
            held = (
                sum(r.upper_usd for r in self._reserved.values() if r.target == target)
                if with_reserved
                else 0.0
            )
            spent = self.spent_of(target)
            if spent + held + upper_usd > limit:
                return target, (
                    f"usd_per_target ${limit:g} reached for {target} (spent ${spent:.4f}, "
                    f"next call up to ${upper_usd:.4f})"
                )
        return None


def spend_of_run(store: Store, run_id: str) -> dict[str, float]:
    """The USD a budget of ``run_id`` starts from, by target: what its recorded calls cost
    (``settled_of_run``) plus the bound of each of its reservations not settled (calls in flight
    or lost in a crash: ``branchpoint.core.read.costs.reserved_by_target``)."""
    from branchpoint.core.read.costs import reserved_by_target

    spend = settled_of_run(store, run_id)
    for target, usd in reserved_by_target(store, run_id).items():
        spend[target] = spend.get(target, 0.0) + usd
    return spend


def settled_of_run(store: Store, run_id: str) -> dict[str, float]:
    """USD spent by ``run_id``'s recorded calls, by target (the target of the call's
    conversation, or the model called where it has none)."""
    from sqlalchemy import func, select

    from branchpoint.core.records import Conversation, ModelCall

    calls = ModelCall.__table__  # type: ignore[attr-defined]
    convs = Conversation.__table__  # type: ignore[attr-defined]
    query = (
        select(
            func.coalesce(convs.c.target, calls.c.model),
            func.sum(calls.c.cost),
        )
        .select_from(calls.outerjoin(convs, convs.c.id == calls.c.conversation_id))
        .where(calls.c.run_id == run_id, calls.c.cost.is_not(None))
        .group_by(func.coalesce(convs.c.target, calls.c.model))
    )
    with store.session() as s:
        return {str(k): float(v or 0.0) for k, v in s.connection().execute(query)}
