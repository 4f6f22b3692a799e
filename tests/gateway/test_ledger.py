"""One ledger, in memory and in the store (issue 45): a budget's memory and its
``spend_reservations`` rows agree at every step of a call's attempts.

Real HTTP to the loopback server (its fault options: 500s, hangs), a real store (SQLite, and
PostgreSQL with ``$BRANCHPOINT_TEST_POSTGRES``). The store's ledger is what a re-run rebuilds a
budget from (``spend_of_run``: the call rows' cost plus every reservation row left).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import text

from branchpoint.core.records import Run
from branchpoint.gateway.budget import Budget, BudgetReached, spend_of_run
from branchpoint.gateway.completion import GenParams, Message, ModelError
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.pricing import Price
from branchpoint.gateway.testing.openai_server import ServerThread

PRICE = Price(input=1e-4, output=1e-3)  # USD a token: a bound of a few cents a call
MESSAGES = [Message(role="user", content="hello there")]
PARAMS = GenParams(max_tokens=20)


def _rows(store: Any) -> list[tuple[str, float]]:
    with store.engine.connect() as conn:
        return [
            (str(r[0]), float(r[1]))
            for r in conn.execute(text("select call_id, upper_usd from spend_reservations"))
        ]


def _gateway(store: Any, url: str, budget: Budget, **kw: Any) -> Gateway:
    with store.session() as s:
        if s.get(Run, "r1") is None:
            s.add(Run(id="r1", kind="sweep", status="running"))
            s.commit()
    gw = Gateway(store=store, cache=False, backoff_s=0.05, max_backoff_s=0.1, **kw)
    gw.budget = budget
    gw.prices = {"oai:bot": PRICE}
    return gw


def _params(url: str) -> GenParams:
    return PARAMS.model_copy(update={"api_base": url})


@pytest.mark.parametrize("write_behind", [True, False])
def test_a_budget_stop_after_an_error_answer_leaves_no_row_counted(  # type: ignore[no-untyped-def]
    store, write_behind: bool
) -> None:
    """Attempt 1 is answered 500 (not billed); before attempt 2 the budget is reached. The
    500's reservation must not stay in the store at its bound: memory released it at once, so
    the store must too, or a re-run starts from more than was spent (the held-out ledger of
    $0.1595 on a $0.15 budget)."""
    server = ServerThread(fault_500=1.0)
    url = server.start()
    budget = Budget(1.0, targets={"c1": "oai:bot"})

    async def main() -> None:
        gw = _gateway(store, url, budget, write_behind=write_behind, max_attempts=3)
        call = asyncio.create_task(
            gw.complete("oai:bot", MESSAGES, _params(url), run_id="r1", conversation_id="c1")
        )
        assert server.server is not None
        while server.server.requests < 1:
            await asyncio.sleep(0.001)
        budget.usd_total = 1e-9  # another conversation spent the rest meanwhile
        with pytest.raises(BudgetReached):
            await call
        await gw.aclose()

    try:
        asyncio.run(main())
    finally:
        server.stop()
    assert budget.reserved_total == 0 and budget.spent_total == 0
    assert _rows(store) == []
    assert spend_of_run(store, "r1") == {}


def test_a_timed_out_attempt_stays_at_its_bound_in_memory_and_in_the_store(store) -> None:  # type: ignore[no-untyped-def]
    """A timeout may have been billed (the server got the request): its bound stays spent in
    memory, and its row stays in the store, also after the call's (failed) row is stored."""
    server = ServerThread(fault_hang=1.0, hang_s=5.0)
    url = server.start()
    budget = Budget(1.0, targets={"c1": "oai:bot"})
    bound = 0.0

    async def main() -> None:
        nonlocal bound
        gw = _gateway(store, url, budget, max_attempts=1, timeout_s=0.2)
        bound = gw._upper_usd(PRICE, MESSAGES, PARAMS)
        with pytest.raises(ModelError, match="timed out"):
            await gw.complete("oai:bot", MESSAGES, _params(url), run_id="r1", conversation_id="c1")
        await gw.aclose()

    try:
        asyncio.run(main())
    finally:
        server.stop()
    assert bound > 0
    assert budget.reserved_total == 0
    assert budget.spent_total == pytest.approx(bound)
    rows = _rows(store)
    assert [usd for _, usd in rows] == [pytest.approx(bound)]
    assert spend_of_run(store, "r1") == {"oai:bot": pytest.approx(bound)}


@pytest.mark.parametrize("write_behind", [True, False])
def test_a_success_is_settled_in_memory_only_once_its_row_has_committed(  # type: ignore[no-untyped-def]
    store, write_behind: bool
) -> None:
    """When memory lets go of a call's bound, the store has the call's row and no longer its
    reservation; and at every settle the store's ledger is within the budget."""
    server = ServerThread(fail_first=1, retry_after=0.01)  # attempt 1 is a 429, then answers
    url = server.start()
    seen: list[tuple[float, list[tuple[str, float]], float]] = []

    class Watching(Budget):
        def settle(self, reservation: Any, actual_usd: float) -> None:
            with store.engine.connect() as conn:
                settled = conn.execute(
                    text("select coalesce(sum(cost), 0) from model_calls")
                ).scalar_one()
            seen.append((actual_usd, _rows(store), float(settled or 0.0)))
            super().settle(reservation, actual_usd)

    budget = Watching(1.0, targets={"c1": "oai:bot"})

    async def main() -> str:
        gw = _gateway(store, url, budget, write_behind=write_behind, max_attempts=3)
        _, call_id = await gw.complete(
            "oai:bot", MESSAGES, _params(url), run_id="r1", conversation_id="c1"
        )
        await gw.flush()
        await asyncio.sleep(0.05)  # the settle scheduled by the writer's commit runs
        await gw.aclose()
        return call_id

    try:
        call_id = asyncio.run(main())
    finally:
        server.stop()
    assert [usd for usd, _, _ in seen][0] == 0.0  # the 429: released at 0, its row gone first
    assert seen[0][1] == []
    cost, rows_then, settled_then = seen[-1]
    assert cost > 0
    assert rows_then == []  # the reservation row went with the call's row...
    assert settled_then == pytest.approx(cost)  # ...which was committed with its cost
    assert all(s + sum(u for _, u in r) <= 1.0 for _, r, s in seen)
    assert budget.reserved_total == 0 and budget.spent_total == pytest.approx(cost)
    with store.engine.connect() as conn:
        attempts = conn.execute(
            text("select attempts from model_calls where id = :i"), {"i": call_id}
        ).scalar_one()
    assert attempts == 2


def test_a_refused_connection_is_released_not_counted(store) -> None:  # type: ignore[no-untyped-def]
    """A connection refused never reached a server: like an error answer, nothing is billed,
    so a server that is down does not eat the budget at each attempt's bound."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    budget = Budget(1.0, targets={"c1": "oai:bot"})

    async def main() -> None:
        gw = _gateway(store, url, budget, max_attempts=2)
        with pytest.raises(ModelError):
            await gw.complete("oai:bot", MESSAGES, _params(url), run_id="r1", conversation_id="c1")
        await gw.aclose()

    asyncio.run(main())
    assert budget.spent_total == 0 and budget.reserved_total == 0
    assert _rows(store) == []
