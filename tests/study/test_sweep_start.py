"""One owner for a sweep (issue 45): the same sweep started twice at the same moment runs once;
the other process is refused in one line by the lease, and no call is paid twice.

Before: the loser inserted the same Run row (a ``UNIQUE constraint failed: runs.id`` traceback),
or, with a delay between the lease's claim and the Run row's insert, both processes ran the
same cells (calls paid twice, conversations failing on ``turns.id``); on a store not yet made,
"table schema_info already exists". Real processes (``branchpoint sweep``), real HTTP to the
loopback server, SQLite and PostgreSQL; the delay is the lease's test-only hook.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from branchpoint.core.store import open_store
from branchpoint.gateway.testing.openai_server import ServerThread
from branchpoint.simulator.lease import CLAIM_DELAY_ENV

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"


def _manifest(path: Path, url: str, store: str) -> Path:
    path.write_text(
        f"""
name: twice
scenarios: {{paths: ["{SCENARIO}"]}}
targets:
  - spec: oai:bot
    params: {{api_base: "{url}", max_tokens: 16}}
simulators: [oai:bot]
simulator_params: {{api_base: "{url}", max_tokens: 16}}
replicates: 2
max_exchanges: 3
fork: independent
seed: 5
execution: {{concurrency: 4, retries: 0}}
store: "{store}"
""",
        encoding="utf-8",
    )
    return path


def _start(manifest: Path, delay_s: float) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": "sk-test-unused",
        CLAIM_DELAY_ENV: str(delay_s),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(manifest), "--yes"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _twice(tmp_path: Path, store: str, delay_s: float, *, made: bool) -> None:
    if made:
        open_store(store).close()  # an existing, empty store
    server = ServerThread(delay_s=0.05)  # the winner is still running when the loser claims
    url = server.start()
    try:
        manifest = _manifest(tmp_path / "study.yaml", url, store)
        procs = [_start(manifest, delay_s) for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        codes = [p.returncode for p in procs]
        said = [f"exit {c}\n{o}{e}" for c, (o, e) in zip(codes, outs, strict=True)]
        assert sorted(codes) == [0, 2], said
        loser = outs[codes.index(2)][1]
        assert "Traceback" not in loser, said
        errors = [ln for ln in loser.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, said  # one line says why
        assert errors[0].startswith("error: run twice is being run by process "), said
        assert server.server is not None
        answered = server.server.requests
    finally:
        server.stop()
    s = open_store(store)
    try:
        with s.engine.connect() as conn:
            calls = conn.execute(text("select count(*) from model_calls")).scalar_one()
            statuses = dict(
                conn.execute(
                    text("select status, count(*) from conversations group by status")
                ).all()
            )
            run_status = conn.execute(text("select status from runs where id = 'twice'")).scalar()
    finally:
        s.close()
    assert calls == answered  # each request the server answered is one call row: none twice
    assert statuses == {"completed": 14}, statuses  # 7 cells x 2 replicates, each once
    assert run_status == "completed"


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.0, 1.0])
def test_the_same_sweep_started_twice_runs_once(
    tmp_path: Path, cli_db: str, delay_s: float
) -> None:
    _twice(tmp_path, cli_db, delay_s, made=True)


@pytest.mark.slow
def test_the_same_sweep_started_twice_on_a_new_sqlite_file_runs_once(tmp_path: Path) -> None:
    """Both processes create the new store's tables at once: the second's CREATE TABLE finds
    the first's ("table schema_info already exists") and looks again."""
    _twice(tmp_path, str(tmp_path / "new.db"), 0.0, made=False)


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.0, 1.0])
def test_the_same_run_started_twice_runs_once(tmp_path: Path, delay_s: float) -> None:
    """`branchpoint run --run-id ID` started twice at once: the same one owner as a sweep."""
    engine = REPO / "tests" / "fixtures" / "engine"
    db = str(tmp_path / "r.db")
    env = {
        **os.environ,
        "BRANCHPOINT_PLUGINS": "engine_plugin",
        "PYTHONPATH": os.pathsep.join([str(engine), str(REPO)]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "ENGINE_TEST_DELAY_S": "0.2",  # the winner is still running when the loser claims
        CLAIM_DELAY_ENV: str(delay_s),
    }
    command = [
        sys.executable, "-m", "branchpoint.tui.cli", "run", str(engine / "on_event.yaml"),
        "--target", "scripted:slowbot", "--simulator", "scripted:persona", "--max-turns", "4",
        "--run-id", "twice", "--db", db,
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    said = [f"exit {c}\n{o}{e}" for c, (o, e) in zip(codes, outs, strict=True)]
    assert sorted(codes) == [0, 2], said
    loser = outs[codes.index(2)][1]
    assert "Traceback" not in loser, said
    errors = [ln for ln in loser.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: run twice is being run by "), said
    with sqlite3.connect(db) as con:
        statuses = dict(con.execute("select status, count(*) from conversations group by status"))
        # a request made twice for one conversation: a call paid twice
        twice = con.execute(
            "select count(*) from (select conversation_id, request_hash from model_calls "
            "group by conversation_id, request_hash having count(*) > 1) as paired"
        ).fetchone()[0]
    assert set(statuses) == {"completed"}, statuses
    assert twice == 0
