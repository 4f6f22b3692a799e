"""Issue 33's acceptance line on spend: SIGKILL a budgeted sweep three times while at least 3 of
its calls are in flight, re-run it to the end; what the loopback server billed is within the
budget, and within the spend the store reports (the calls' recorded cost plus the reservations
never settled, at their bound).

Issue 45's: that ledger itself (what a re-run rebuilds its budget from) stays within the budget,
with and without kills, against a server that answers 8% of requests 429 and 4% 500 (retried:
each failed attempt's reservation must leave the store when it leaves memory), and against one
that bills every call at its bound (its reply is ``max_tokens`` long and its prompt counted as
the gateway's bound counts it), on SQLite and PostgreSQL.

A call killed in flight was billed by the server but its answer never reached a row; so was a
call whose row sat in the write-behind buffer. Only a reservation committed before each call is
sent (``spend_reservations``) keeps them counted. SQLite always; PostgreSQL, and Ray on
PostgreSQL, with ``$BRANCHPOINT_TEST_POSTGRES`` (``.ci/with-postgres``). The sweep is ``branchpoint
sweep`` in a process group of its own, killed whole (with Ray: the driver, its local cluster and
its workers); the server, in this process, bills each answer when it makes it, before its delay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from branchpoint.gateway.completion import Completion, GenParams, Message
from branchpoint.gateway.testing.openai_server import ServerThread, bill_usd

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"
PRICE_IN, PRICE_OUT = 20.0, 80.0  # USD per million tokens: the sweep costs about a dollar
KILLS = 3
IN_FLIGHT = 3  # calls the server holds when each kill lands, at least
DELAY_S = 0.4  # each answer of the killed runs: calls pile up in flight


# the servers of issue 45's ledger: faults that are retried, and bills at the bound
FAULTS: dict[str, Any] = {"fault_429": 0.08, "fault_500": 0.04, "retry_after": 0.05}


class AtBound:
    """A model whose every answer bills the bound the gateway reserved for it: ``max_tokens``
    out, and the prompt at the gateway's generous count (2 characters a token and framing)."""

    def __init__(self) -> None:
        from branchpoint.gateway.gateway import Gateway
        from branchpoint.gateway.pricing import Price

        self.count = Gateway(cache=False)
        self.one_a_token = Price(input=1.0, output=0.0)  # the bound in USD is then the tokens

    async def complete(self, model: str, messages: list[Message], params: GenParams) -> Completion:
        prompt = round(self.count._upper_usd(self.one_a_token, messages, params))
        out = params.max_tokens or 16
        return Completion(text=" ".join(["word"] * out), tokens_in=prompt, tokens_out=out)

    async def aclose(self) -> None:
        await self.count.aclose()


def _server(kind: str, **kw: Any) -> ServerThread:
    if kind == "bound":
        return ServerThread(
            model="scripted:at-bound", models={"scripted:at-bound": AtBound()}, **kw
        )
    return ServerThread(model="scripted:echo", **(FAULTS if kind == "faults" else {}), **kw)


def _manifest(
    path: Path, url: str, store: str, usd_total: float, *, ray: bool, retries: int = 0
) -> Path:
    execution = (
        "{mode: ray, workers: 2, concurrency: 4, lease_s: 4, heartbeat_s: 0.5, "
        f"retries: {retries}}}"
        if ray
        else f"{{concurrency: 8, retries: {retries}}}"
    )
    path.write_text(
        f"""
name: kill-budget
scenarios: {{paths: ["{SCENARIO}"]}}
targets:
  - spec: oai:priced-bot
    params: {{api_base: "{url}", max_tokens: 24}}
    price: {{input_per_mtok: {PRICE_IN}, output_per_mtok: {PRICE_OUT}}}
simulators: [oai:priced-bot]  # the persona too: the target's price prices it
simulator_params: {{api_base: "{url}", max_tokens: 24}}
replicates: 6
max_exchanges: 4
fork: independent
seed: 11
budget: {{usd_total: {usd_total}}}
execution: {execution}
store: "{store}"
""",
        encoding="utf-8",
    )
    return path


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": "sk-kill-test-unused",
    }


def _sweep(manifest: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(manifest), "--yes"],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the kill takes Ray's processes too
    )


def _store_spend(url: str) -> tuple[float, float]:
    """(settled, reserved) USD of the sweep as its store records them."""
    from sqlalchemy import inspect, text

    from branchpoint.core.store import open_store

    store = open_store(url)
    try:
        with store.engine.connect() as conn:
            settled = conn.execute(
                text("select coalesce(sum(cost), 0) from model_calls where run_id = 'kill-budget'")
            ).scalar_one()
            reserved = 0.0
            if inspect(conn).has_table("spend_reservations"):  # the table the fix adds
                # every row left counts (issue 45): a row whose call row is stored is an
                # earlier attempt of it that may have been billed (a timeout)
                reserved = conn.execute(
                    text(
                        "select coalesce(sum(upper_usd), 0) from spend_reservations "
                        "where run_id = 'kill-budget'"
                    )
                ).scalar_one()
    finally:
        store.close()
    return float(settled or 0.0), float(reserved or 0.0)


def _full_cost(tmp_path: Path, kind: str = "plain", retries: int = 0) -> float:
    """What the whole sweep bills, under a budget that does not bind (a store of its own)."""
    server = _server(kind)
    url = server.start()
    try:
        folder = tmp_path / "full"
        folder.mkdir()
        manifest = _manifest(
            folder / "study.yaml", url, str(folder / "r.db"), 1000.0, ray=False, retries=retries
        )
        proc = _sweep(manifest)
        out, _ = proc.communicate(timeout=600)
        # with 429s and 500s a conversation may still fail once its retries are spent (exit 1:
        # "1 not completed", about one run in twenty): what the sweep billed is its full cost all
        # the same, which is all this run is for
        ok = (0, 1) if kind == "faults" else (0,)
        assert proc.returncode in ok, out.decode(errors="replace")
        assert server.server is not None
        return bill_usd(server.server.billed, PRICE_IN, PRICE_OUT)
    finally:
        server.stop()


def _kill_in_flight(manifest: Path, chat: Any) -> int:
    """Start the sweep and SIGKILL its process group once it has made a few calls and the
    server holds at least IN_FLIGHT of them; how many it held."""
    before = chat.requests
    proc = _sweep(manifest)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, "the sweep ended before the kill: " + (
                proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            )
            assert time.monotonic() < deadline, "no calls in flight within 300 s"
            held = chat.in_flight
            if chat.requests >= before + 2 * IN_FLIGHT and held >= IN_FLIGHT:
                break
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
        if proc.stdout is not None:
            proc.stdout.close()
    return held


def _killed_three_times_then_finished(
    tmp_path: Path, store: str, *, ray: bool, kind: str = "plain", kills: int = KILLS
) -> None:
    retries = 0 if kind == "plain" else 3  # issue 45's servers: failed attempts are retried
    full = _full_cost(tmp_path, kind, retries)
    usd_total = round(full * 0.6, 6)  # binds: the last run stops at the budget
    server = _server(kind, delay_s=DELAY_S if kills else 0.02)
    url = server.start()
    try:
        chat = server.server
        assert chat is not None
        manifest = _manifest(
            tmp_path / "study.yaml", url, store, usd_total, ray=ray, retries=retries
        )
        held = [_kill_in_flight(manifest, chat) for _ in range(kills)]
        time.sleep(1.0 if kills else 0.0)  # what a killed Ray worker had in hand reaches the server
        assert all(h >= IN_FLIGHT for h in held), held
        chat.delay_s = 0.02
        proc = _sweep(manifest)
        out, _ = proc.communicate(timeout=600)
        text = out.decode(errors="replace")
        assert proc.returncode in (0, 1), text  # 1: stopped by budget
        billed = bill_usd(chat.billed, PRICE_IN, PRICE_OUT)
        settled, reserved = _store_spend(store)
        ledger = settled + reserved
        figures = (
            f"{kind} server, {kills} kills: budget ${usd_total:.4f}, billed ${billed:.4f}, "
            f"ledger ${ledger:.4f} (settled ${settled:.4f} + reserved ${reserved:.4f}); "
            f"in flight at the kills: {held}; answers {dict(chat.counts)}"
        )
        print(figures)
        assert billed <= usd_total + 1e-9, figures
        # what a re-run rebuilds its budget from never passes the budget (issue 45)
        assert ledger <= usd_total + 1e-9, figures
        assert billed <= settled + reserved + 1e-9, figures
        assert billed > usd_total / 2, figures  # the sweep did spend most of it
        # `runs` shows both: what the calls' rows cost, and the bounds still reserved
        listed = subprocess.run(
            [sys.executable, "-m", "branchpoint.tui.cli", "runs", "--db", store],
            cwd=REPO,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert listed.returncode == 0, listed.stderr
        header = next(ln for ln in listed.stdout.splitlines() if ln.split()[:1] == ["id"])
        # then "cached", "not enacted", "low realism" (persona ratings, none here), "created"
        assert header.split()[-8:-5] == ["USD", "reserved", "cached"]
        line = next(ln for ln in listed.stdout.splitlines() if ln.split()[:1] == ["kill-budget"])
        # "-" where nothing is left reserved (a re-run that settled or released every bound)
        shown_reserved = f"{reserved:.4f}" if reserved else "-"
        cells = line.split()
        assert cells[-7:-5] + cells[-4:-2] == [f"{settled:.4f}", shown_reserved, "-", "-"], line
    finally:
        server.stop()


@pytest.mark.slow
def test_sigkilled_budgeted_sweep_on_sqlite_never_bills_past_its_budget(tmp_path: Path) -> None:
    _killed_three_times_then_finished(tmp_path, str(tmp_path / "results.db"), ray=False)


def test_sigkilled_budgeted_sweep_on_postgresql_never_bills_past_its_budget(
    tmp_path: Path, postgres_url: str
) -> None:
    _killed_three_times_then_finished(tmp_path, postgres_url, ray=False)


def test_sigkilled_budgeted_sweep_on_ray_never_bills_past_its_budget(
    tmp_path: Path, postgres_url: str
) -> None:
    pytest.importorskip("ray")
    _killed_three_times_then_finished(tmp_path, postgres_url, ray=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "kills"), [("faults", 0), ("faults", KILLS), ("bound", 0), ("bound", KILLS)]
)
def test_the_ledger_stays_within_the_budget_on_sqlite(
    tmp_path: Path, kind: str, kills: int
) -> None:
    _killed_three_times_then_finished(
        tmp_path, str(tmp_path / "results.db"), ray=False, kind=kind, kills=kills
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "kills"), [("faults", 0), ("faults", KILLS), ("bound", 0), ("bound", KILLS)]
)
def test_the_ledger_stays_within_the_budget_on_postgresql(
    tmp_path: Path, postgres_url: str, kind: str, kills: int
) -> None:
    _killed_three_times_then_finished(tmp_path, postgres_url, ray=False, kind=kind, kills=kills)


@pytest.mark.slow
@pytest.mark.parametrize("kills", [0, KILLS])
def test_the_ledger_stays_within_the_budget_on_ray(
    tmp_path: Path, postgres_url: str, kills: int
) -> None:
    pytest.importorskip("ray")
    _killed_three_times_then_finished(tmp_path, postgres_url, ray=True, kind="faults", kills=kills)
