"""Numbers on screen equal numbers in the store (issue 33, Build 6): a sweep against the loopback
OpenAI-compatible server (branchpoint/gateway/testing/openai_server.py), as a user runs it, and what the
summary and the live view say of it next to what the store (and the server) counted."""

from __future__ import annotations

import json
import re
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_sweep_cli import SCENARIO, SWEEP, cli

from branchpoint.gateway.testing.openai_server import ServerThread


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow  # a sweep through litellm to its budget stop: about 7 s of CPU
def test_the_summary_at_a_budget_stop_counts_the_call_rows_the_server_answered(
    tmp_path: Path,
) -> None:
    server = ServerThread()
    url = server.start()
    try:
        assert server.server is not None
        manifest = tmp_path / "study.yaml"
        body = {
            "scenarios": {"paths": [str(SCENARIO)]},
            "targets": [
                {"spec": "litellm:openai/gpt-4o", "params": {"api_base": url, "max_tokens": 20}}
            ],
            "simulators": ["scripted:sweep-persona"],
            "max_exchanges": 4,
            "replicates": 4,
            "fork": "independent",
            "budget": {"usd_total": 0.004},  # a few calls' worth of gpt-4o: it binds midway
            "execution": {"concurrency": 4},
            "store": "results.db",
        }
        manifest.write_text(json.dumps(body), encoding="utf-8")
        res = cli("sweep", str(manifest), "--yes")
        received = server.server.requests
    finally:
        server.stop()
    assert res.returncode == 1 and "stopped by budget" in res.stdout, res.stdout + res.stderr
    db = tmp_path / "results.db"
    stored = dict(rows(db, "select purpose, count(*) from model_calls group by purpose"))
    found = re.search(r"model calls stored: (.*)$", res.stdout, re.M)
    assert found, res.stdout
    shown = {p: int(n) for n, p in (part.split() for part in found.group(1).split(", "))}
    assert shown == stored
    # the target's rows are the requests the server received: none refused by the budget
    assert shown["target"] == received > 0
    # and `runs` counts the same rows
    listed = cli("runs", "--db", str(db))
    sweep_row = next(ln for ln in listed.stdout.splitlines() if "sweep-study" in ln)
    assert str(sum(stored.values())) in sweep_row.split()


@dataclass
class Viewed:
    """A finished sweep of an unpriced target and a target whose server is down, and its view."""

    db: Path
    url: str
    line: str  # the live view's plain line (a log's)
    out: str  # the live view as a terminal shows it


@pytest.fixture(scope="module")
def viewed(tmp_path_factory: pytest.TempPathFactory) -> Viewed:
    from branchpoint.core.store import open_store
    from branchpoint.gateway import event_loop
    from branchpoint.study.api import arun_study, plan_study, study_monitor
    from branchpoint.tui.commands.live_view import plain_line, render

    tmp_path = tmp_path_factory.mktemp("viewed")
    server = ServerThread()
    url = server.start()
    manifest = tmp_path / "study.yaml"
    body = {
        "scenarios": {"paths": [str(SCENARIO)]},
        "targets": [
            # no price known for this model name: its dollars are unknown, not $0
            {"spec": "oai:unpriced-loopback", "params": {"api_base": url}},
            # nothing listens there: every conversation of it fails
            {"spec": "oai:down", "params": {"api_base": f"http://127.0.0.1:{_closed_port()}/v1"}},
        ],
        "simulators": ["scripted:sweep-persona"],
        "max_exchanges": 3,
        "replicates": 2,
        "execution": {"retries": 0},
        "store": "results.db",
    }
    manifest.write_text(json.dumps(body), encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:  # the sweep tests' scripted persona, as a plugin
        mp.syspath_prepend(str(SWEEP))
        mp.setenv("BRANCHPOINT_PLUGINS", "sweep_plugin")
        try:
            plan = plan_study(manifest)
            store = open_store(plan.store_url)
            try:
                monitor = study_monitor(plan, store)
                event_loop.run(arun_study(plan, store, monitor=monitor))
                monitor.refresh()
                snap = monitor.snapshot()
            finally:
                store.close()
        finally:
            server.stop()
    console = Console(record=True, width=200, color_system=None)
    console.print(render(snap))
    return Viewed(tmp_path / "results.db", url, plain_line(snap), console.export_text())


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_the_live_view_counts_failed_conversations_apart_from_done(viewed: Viewed) -> None:
    status = dict(rows(viewed.db, "select status, count(*) from conversations group by status"))
    assert status.get("failed", 0) > 0 and status.get("completed", 0) > 0, status
    planned = sum(status.values())
    # failed conversations are not done; finished of planned, never above 100%
    expected = (
        f"{status['completed']} done, {status['failed']} failed, 0 running of {planned} "
        "conversations (100%)"
    )
    assert expected in viewed.line, viewed.line
    assert expected in viewed.out.splitlines()[0], viewed.out


def test_the_live_view_shows_the_turns_stored_not_a_share_of_the_plan(viewed: Viewed) -> None:
    turns = rows(viewed.db, "select count(*) from turns")[0][0]
    assert f"turns stored {turns:,};" in viewed.line, viewed.line
    assert not re.search(r"turns \d+/\d+", viewed.line + viewed.out)


def test_the_live_view_says_unpriced_where_no_price_is_known(viewed: Viewed) -> None:
    assert "unpriced" in viewed.line and "$0.0000" not in viewed.line, viewed.line
    lines = viewed.out.splitlines()
    assert "unpriced" in lines[0]
    target = next(ln for ln in lines if ln.startswith("oai:unpriced-loopback "))
    assert target.split()[-1] == "unpriced"


def test_the_live_view_has_one_eta(viewed: Viewed) -> None:
    assert viewed.out.count("ETA") == 1 and viewed.line.count("ETA") == 1, viewed.out


def test_the_live_view_names_roles_with_their_specs_and_the_stores_counts(
    viewed: Viewed,
) -> None:
    lines = viewed.out.splitlines()
    by_role = rows(
        viewed.db, "select purpose, model, count(*) from model_calls group by purpose, model"
    )
    assert {p for p, _, _ in by_role} == {"target", "persona"}
    for purpose, model, n in by_role:
        row = next(ln for ln in lines if ln.split()[:2] == [purpose, model])
        assert row.split()[2] == str(n), row
    target = next(ln for ln in lines if ln.split()[:2] == ["target", "oai:unpriced-loopback"])
    assert target.split()[-2] == "unpriced"  # USD, then the share a prompt cache served
    # the providers' rows too are the roles and specs they serve, not their endpoints
    assert viewed.url not in viewed.out
    assert any(ln.split()[:2] == ["persona", "scripted:sweep-persona"] for ln in lines)
