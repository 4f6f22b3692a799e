"""SIGKILL while the write-behind thread is busy: many conversations in flight, replies at once.

The guarantees are those of tests/test_resume.py, under load: a killed run has lost at most the
calls in flight (every stored turn is whole, each conversation's turns are a prefix of its
transcript and its progress counter says so), and the resume makes exactly the missing calls.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fixtures.engine.helpers import cli_command, plugin_env

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "engine"
REPLICATES = 30  # x 4 arms, independent: 120 conversations, 1,680 turns


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return (
        request.getfixturevalue("postgres_url")
        if request.param == "postgres"
        else str(tmp_path / "load.db")
    )


def _cli(db: str, *extra: str) -> list[str]:
    return cli_command(
        "run",
        str(FIX / "on_event.yaml"),
        str(FIX / "at_turn.yaml"),
        "--target",
        "scripted:slowbot",
        "--simulator",
        "scripted:persona",
        "--db",
        db,
        "--replicates",
        str(REPLICATES),
        "--fork",
        "independent",
        "--concurrency",
        "120",
        *extra,
    )


def _rows(db: str, sql: str) -> list[Any]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import DBAPIError

    if "://" not in db and not Path(db).exists():
        return []
    engine = create_engine(db if "://" in db else f"sqlite:///{db}")
    try:
        with engine.connect() as con:
            return [tuple(r) for r in con.execute(text(sql)).fetchall()]
    except DBAPIError:  # tables not created yet
        return []
    finally:
        engine.dispose()


def _count(db: str, sql: str) -> int:
    rows = _rows(db, sql)
    return int(rows[0][0]) if rows else 0


def _assert_prefixes(db: str) -> None:
    """Each conversation's stored turns are 0..n-1 with n its progress counter: no half turn."""
    per_conv: dict[str, list[int]] = {}
    for conv, index in _rows(db, 'select conversation_id, "index" from turns'):
        per_conv.setdefault(conv, []).append(index)
    counters = dict(_rows(db, "select id, n_turns from conversations"))
    for conv, indexes in per_conv.items():
        assert sorted(indexes) == list(range(len(indexes))), conv
        assert counters[conv] == len(indexes), conv


def test_sigkill_under_heavy_write_load_then_resume_makes_exactly_the_missing_calls(
    db: str,
) -> None:
    proc = subprocess.Popen(
        _cli(db, "--run-id", "load"),
        env=plugin_env(0.001),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while _count(db, "select count(*) from turns") < 400:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no 400 turns within 240 s"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    stored = {i: (t, c) for i, t, c in _rows(db, "select id, created_at, content from turns")}
    total = REPLICATES * 4 * 14
    assert 400 <= len(stored) < total, len(stored)
    _assert_prefixes(db)
    stored_calls = _count(db, "select count(*) from turns where call_id is not null")
    calls_before = _count(db, "select count(*) from model_calls")

    done = subprocess.run(
        _cli(db, "--resume", "load"),
        env=plugin_env(0.0),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    after = {i: (t, c) for i, t, c in _rows(db, "select id, created_at, content from turns")}
    assert len(after) == total
    assert all(after[k] == v for k, v in stored.items())  # finished turns kept, not redone
    _assert_prefixes(db)
    assert {s for (s,) in _rows(db, "select status from conversations")} == {"completed"}
    all_calls = _count(db, "select count(*) from turns where call_id is not null")
    # one call per turn that has one (the scripted persona never breaks role): the resume made
    # those of the turns that were not stored, no more
    assert _count(db, "select count(*) from model_calls") - calls_before == all_calls - stored_calls
