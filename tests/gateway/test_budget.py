"""Budgets: a sweep against a model with registered prices (``litellm:openai/gpt-4o``, litellm's
price map, served by the loopback server) stops before its budget is exceeded, leaves what it did
not do resumable, rebuilds its spend from the call rows after a SIGKILL, and a bigger budget
completes it. Real HTTP, a real SQLite file; the persona is the sweep tests' scripted one."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from branchpoint.gateway.budget import Budget, BudgetReached
from branchpoint.gateway.testing.openai_server import ServerThread

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "tests" / "fixtures" / "sweep"
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"
TARGET = "litellm:openai/gpt-4o"


def write(path: Path, url: str, usd_total: float, **extra: object) -> Path:
    body = {
        "scenarios": {"paths": [str(SCENARIO)]},
        "targets": [{"spec": TARGET, "params": {"api_base": url, "max_tokens": 20}}],
        "simulators": ["scripted:sweep-persona"],
        "max_exchanges": 4,
        "replicates": 4,
        "fork": "independent",  # enough calls that a budget of a fraction binds midway
        "budget": {"usd_total": usd_total},
        "execution": {"concurrency": 4},
        "store": "results.db",
        **extra,
    }
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def cli(*args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from branchpoint.tui.cli import app

    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()


def spent(db: Path) -> float:
    return float(rows(db, "select coalesce(sum(cost), 0) from model_calls")[0][0] or 0.0)


@pytest.mark.slow
def test_a_budget_stops_the_sweep_before_it_is_exceeded_and_survives_a_sigkill(
    tmp_path: Path, sweep_plugin: Any
) -> None:
    server = ServerThread()
    url = server.start()
    db = tmp_path / "results.db"
    study = tmp_path / "study.yaml"
    try:
        assert server.server is not None
        # What the whole sweep costs, measured on a copy with a budget that does not bind.
        full_dir = tmp_path / "full"
        full_dir.mkdir()
        code, out = cli("sweep", str(write(full_dir / "study.yaml", url, 100.0)))
        assert code == 0, out
        full = spent(full_dir / "results.db")
        n_cells = rows(full_dir / "results.db", "select count(*) from conversations")[0][0]
        assert full > 0 and "spent $" in out

        # 1. A quarter of that: stopped by budget, within it, the rest left resumable.
        small = full / 4
        code, out = cli("sweep", str(write(study, url, small)))
        assert code == 1, out
        assert "stopped by budget: budget: usd_total" in out
        assert 0 < spent(db) <= small
        assert rows(db, "select status from runs where kind = 'sweep'") == [("stopped_by_budget",)]
        convs = rows(db, "select status, stop_reason, error from conversations")
        stopped = [c for c in convs if c[0] == "interrupted"]
        assert stopped and all(
            r == "stopped_by_budget" and str(e).startswith("stopped_by_budget: ")
            for _, r, e in stopped
        )
        assert not [c for c in convs if c[0] in ("failed", "running")]

        # 2. Half of it, in a process killed midway: what it spent is in its call rows ...
        half = full / 2
        write(study, url, half)
        server.server.delay_s = 0.3
        before = spent(db)
        proc = subprocess.Popen(
            [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(study)],
            cwd=REPO,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(SWEEP), str(REPO)]),
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and spent(db) <= before + (half - before) / 3:
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        server.server.delay_s = 0.0
        killed_at = spent(db)
        assert before < killed_at < half

        # ... and a fresh start counts it: the same budget stops it within the budget again
        # (a spend not rebuilt would let it spend the whole budget once more).
        from branchpoint.core.store import open_store
        from branchpoint.gateway.budget import spend_of_run

        store = open_store(str(db))
        try:
            rebuilt = spend_of_run(store, "sweep-study")
        finally:
            store.close()
        # the calls it had out when it died count at their bound: their reservations were
        # committed before they were sent (tests/study/test_budget_kill.py checks what was billed)
        held = rows(db, "select coalesce(sum(upper_usd), 0) from spend_reservations")[0][0]
        assert sum(rebuilt.values()) == pytest.approx(killed_at + held)
        assert set(rebuilt) == {TARGET}  # the persona calls cost nothing, and count there too
        code, out = cli("sweep", str(study))
        assert code == 1 and "stopped by budget" in out, out
        # (it may have no room left for another call once the lost calls count at their bound)
        assert killed_at <= spent(db) and spent(db) + held <= half

        # 3. A bigger budget completes the rest, each cell once.
        write(study, url, full * 3)
        code, out = cli("sweep", str(study))
        assert code == 0, out
        final = rows(db, "select status, count(*) from conversations group by status")
        assert final == [("completed", n_cells)]
        assert rows(db, "select status from runs where kind = 'sweep'") == [("completed",)]
    finally:
        server.stop()


def test_reservations_wait_for_calls_in_flight_and_per_target_limits_skip_only_that_target() -> (
    None
):
    async def main() -> None:
        b = Budget(1.0, {"a": 0.5}, {"a": 0.2}, on_reached="skip_target")
        first = await b.acquire("a", 0.25)  # 0.2 spent + 0.25 held: 0.45 of a's 0.5
        waiting = asyncio.create_task(b.acquire("a", 0.25))
        await asyncio.sleep(0.01)
        assert not waiting.done()  # it fits only if the call in flight spends less
        b.settle(first, 0.05)
        second = await asyncio.wait_for(waiting, 1)
        b.settle(second, 0.2)  # a: 0.45 spent
        with pytest.raises(BudgetReached) as reached:
            await b.acquire("a", 0.1)
        assert reached.value.scope == "a"
        # target a is skipped from now on; b goes on under the total
        with pytest.raises(BudgetReached):
            await b.acquire("a", 0.0)
        other = await b.acquire("b", 0.5)
        b.settle(other, 0.5)
        assert b.spent_total == pytest.approx(0.95) and b.reserved_total == 0
        with pytest.raises(BudgetReached) as total:
            await b.acquire("b", 0.1)
        assert total.value.scope == "*" and b.snapshot().reached == ["*", "a"]

    asyncio.run(main())


def test_spend_is_rebuilt_from_the_call_rows_by_target(store) -> None:  # type: ignore[no-untyped-def]
    from branchpoint.core.records import Conversation, ModelCall, Run
    from branchpoint.gateway.budget import spend_of_run

    with store.session() as s:
        s.add(Run(id="r1", kind="sweep", status="running"))
        s.add(Run(id="r2", kind="sweep", status="running"))
        s.commit()  # before the rows that refer to them
        for cid, target in (("c1", "oai:a"), ("c2", "oai:b")):
            s.add(
                Conversation(
                    id=cid, run_id="r1", scenario_id="s", scenario_hash="h", variant_id="v",
                    target=target,
                )
            )  # fmt: skip
        s.commit()
        rows_ = [
            ("r1", "c1", "target", "oai:a", 0.25),
            ("r1", "c1", "persona", "oai:p", 0.5),  # the persona counts against c1's target
            ("r1", "c2", "target", "oai:b", 1.0),
            ("r1", "c2", "target", "oai:b", None),  # failed: no cost
            ("r1", None, "detector", "oai:d", 0.125),  # no conversation: the model called
            ("r2", "c1", "target", "oai:a", 8.0),  # another run's
        ]
        for i, (run, conv, purpose, model, cost) in enumerate(rows_):
            s.add(
                ModelCall(
                    id=f"m{i}", run_id=run, conversation_id=conv, purpose=purpose, model=model,
                    request_hash="x", cost=cost,
                )
            )  # fmt: skip
        s.commit()
    assert spend_of_run(store, "r1") == {"oai:a": 0.75, "oai:b": 1.0, "oai:d": 0.125}
    assert spend_of_run(store, "none") == {}

    # reservations left unsettled (a process killed with calls out) count at their bound; so
    # does one whose call row is stored: the gateway deletes the row of the attempt that call
    # row settles, so one still here is an earlier attempt that may have been billed (a timeout)
    from branchpoint.core.read import reserved_by_target, run_reserved
    from branchpoint.core.records import SpendReservation

    with store.session() as s:
        for rid, call, run, target, usd in (
            ("lost:1", "lost", "r1", "oai:a", 0.5),
            ("lost:2", "lost", "r1", "oai:a", 0.25),  # its retry: both attempts may be billed
            ("m0:1", "m0", "r1", "oai:a", 4.0),  # m0's first attempt timed out; its retry's row
            ("gone:1", "gone", "r2", "oai:b", 2.0),
        ):
            s.add(SpendReservation(id=rid, call_id=call, run_id=run, target=target, upper_usd=usd))
        s.commit()
    assert reserved_by_target(store, "r1") == {"oai:a": 4.75}
    assert spend_of_run(store, "r1") == {"oai:a": 5.5, "oai:b": 1.0, "oai:d": 0.125}
    assert run_reserved(store) == {"r1": 4.75, "r2": 2.0}


@pytest.mark.parametrize("write_behind", [True, False])
def test_a_priced_call_is_not_sent_before_its_reservation_is_committed(  # type: ignore[no-untyped-def]
    store, write_behind: bool
) -> None:
    """The provider looks in the store, on a connection of its own, while it is being called:
    the call's reservation (its upper bound) is committed by then; once the call returns and its
    row is written, the reservation is gone in the same transaction and the row holds the cost.
    A call that is never recorded (the process died) leaves its reservation counted."""
    from sqlalchemy import text

    from branchpoint.gateway.completion import Completion, GenParams, Message
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.gateway.pricing import Price

    seen: list[list[tuple[str, str, float]]] = []

    class Peeking:
        async def complete(self, model: str, messages: Any, params: Any) -> Completion:
            with store.engine.connect() as conn:
                seen.append(
                    [
                        (str(r[0]), str(r[1]), float(r[2]))
                        for r in conn.execute(
                            text("select call_id, target, upper_usd from spend_reservations")
                        )
                    ]
                )
            return Completion(text="ok", tokens_in=10, tokens_out=5)

    async def main() -> tuple[str, str, float]:
        gw = Gateway(store=store, cache=False, write_behind=write_behind)
        gw.register("oai:bot", Peeking())  # type: ignore[arg-type]
        gw.budget = Budget(1.0, targets={"c1": "oai:target"})
        gw.prices = {"oai:bot": Price(input=1e-4, output=1e-3)}
        messages = [Message(role="user", content="hello there")]
        params = GenParams(max_tokens=50)
        _, call_id = await gw.complete(
            "oai:bot", messages, params, run_id="r1", conversation_id="c1"
        )
        upper = gw._upper_usd(gw.prices["oai:bot"], messages, params)
        await gw.flush()  # the row (and the settling with it) may still be in the writer's queue
        # no store row for a call of no run: nothing rebuilds a budget from it
        await gw.complete("oai:bot", messages, params)
        await gw.aclose()
        return call_id, "oai:target", upper

    call_id, target, upper = asyncio.run(main())
    assert seen[0] == [(call_id, target, pytest.approx(upper))]
    assert seen[1] == []  # the first call's was settled with its row; the second made none
    with store.engine.connect() as conn:
        assert conn.execute(text("select count(*) from spend_reservations")).scalar_one() == 0
        cost = conn.execute(
            text("select cost from model_calls where id = :i"), {"i": call_id}
        ).scalar_one()
    assert cost == pytest.approx(10 * 1e-4 + 5 * 1e-3)


@pytest.mark.slow
def test_judging_counts_against_the_budget_and_what_it_leaves_is_judged_later(
    tmp_path: Path, sweep_plugin: Any
) -> None:
    from branchpoint.gateway.providers.scripted import ScriptedModel

    judge_spec = "litellm:openai/gpt-4o-mini"  # priced by litellm's map, as the target is
    server = ServerThread(
        models={"scripted:judge": ScriptedModel(default=sweep_plugin.not_applicable_judge)},
        routes={"gpt-4o-mini": "scripted:judge"},
    )
    url = server.start()
    judges = [
        {
            "spec": judge_spec,
            "rubrics": ["teen"],
            "params": {"api_base": url, "max_tokens": 400},
        }
    ]

    def judged(db: Path) -> dict[str, int]:
        return dict(rows(db, "select verdict, count(*) from judgments group by verdict"))

    def judge_spend(db: Path) -> float:
        sql = "select coalesce(sum(cost), 0) from model_calls where purpose = 'judge'"
        return float(rows(db, sql)[0][0])

    try:
        full_dir = tmp_path / "full"
        full_dir.mkdir()
        code, out = cli("sweep", str(write(full_dir / "study.yaml", url, 100.0, judges=judges)))
        assert code == 0, out
        full_db = full_dir / "results.db"
        full, judging = spent(full_db), judge_spend(full_db)
        all_verdicts = judged(full_db)
        assert judging > 0 and "error" not in all_verdicts and sum(all_verdicts.values()) > 0
        assert f"spent ${full:.4f} of the budget" in out  # the judges' spend is the budget's

        # The trees' cost and most of the judging: the trees complete, judging stops within the
        # budget. (A judge call reserves about 4 times what it costs, so four fifths of the
        # judging leaves room for one of the few calls the cache does not answer.)
        db = tmp_path / "results.db"
        cap = (full - judging) + judging * 0.8
        study = write(tmp_path / "study.yaml", url, cap, judges=judges)
        code, out = cli("sweep", str(study))
        assert code == 1, out
        assert "judging stopped by budget: usd_total" in out
        assert spent(db) <= cap
        assert rows(db, "select status, count(*) from conversations group by status") == rows(
            full_db, "select status, count(*) from conversations group by status"
        )
        some = judged(db)
        assert "error" not in some  # a refused call is not a failed judgment
        assert 0 < sum(some.values()) < sum(all_verdicts.values())

        # A bigger budget judges the rest, each unit once, and spends what one full run does.
        write(study, url, full * 3, judges=judges)
        code, out = cli("sweep", str(study))
        assert code == 0, out
        assert judged(db) == all_verdicts
        assert spent(db) == pytest.approx(full)
    finally:
        server.stop()


def test_a_schema_7_store_gets_the_reservations_table_and_the_current_version(
    tmp_path: Path,
) -> None:
    from sqlalchemy import inspect, text

    from branchpoint.core.records import SCHEMA_VERSION
    from branchpoint.core.store import open_store

    path = tmp_path / "old.db"
    with open_store(path).engine.begin() as con:
        con.execute(text("DROP TABLE spend_reservations"))
        con.execute(text("UPDATE schema_info SET value = '7' WHERE key = 'schema_version'"))
    store = open_store(path)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert inspect(store.engine).has_table("spend_reservations")
    finally:
        store.close()
