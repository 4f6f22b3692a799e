"""Resume: completed turns survive a crash, and a re-run finishes the conversations without redoing them."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fixtures.engine.crash_checks import count, rows
from fixtures.engine.helpers import (
    cli_command,
    conversations,
    plugin_env,
    run_engine,
    scripted_run,
    turns_of,
)
from sqlalchemy import delete
from sqlmodel import col, select

from branchpoint.core.records import Conversation, ModelCall, Run, Turn

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "engine"


def _transcripts(store, run_id):  # type: ignore[no-untyped-def]
    return {
        (c.variant_id, c.replicate): [(t.role, t.content) for t in turns_of(store, c.id)]
        for c in conversations(store, run_id)
    }


def _crash_at(store, run_id: str, keep: int) -> None:  # type: ignore[no-untyped-def]
    """Make the store look like the process died after ``keep`` turns of every conversation."""
    with store.session() as s:
        for conv in s.exec(select(Conversation).where(Conversation.run_id == run_id)).all():
            for t in s.exec(
                select(Turn).where(Turn.conversation_id == conv.id, Turn.index >= keep)
            ).all():
                s.delete(t)
            conv.status, conv.stop_reason, conv.n_turns, conv.error = "running", None, keep, None
            if conv.fork_turn is not None and conv.fork_turn >= keep:
                conv.fork_turn = None
            s.add(conv)
        run = s.get(Run, run_id)
        run.status = "running"
        s.add(run)
        s.commit()


# keep=4: died before the help offer (index 5) that forks the arms: they must share exchange 3
# again (1 persona + 1 target call), then fork into accept/decline (3 + 3 calls each).
# keep=6: died right at the fork: the fork happens again, then 3 + 3 calls each.
@pytest.mark.parametrize(
    "keep,persona_calls,target_calls", [(4, 1 + 2 * 3, 1 + 2 * 3), (6, 2 * 3, 2 * 3)]
)
def test_resume_regroups_shared_prefixes_and_redoes_nothing(
    store, keep, persona_calls, target_calls
) -> None:
    path = FIX / "on_event.yaml"
    full, _ = run_engine(store, path, run_id="r-full")
    want = _transcripts(store, "r-full")
    _crash_at(store, "r-full", keep=keep)
    before = {
        t.id: t.created_at for c in conversations(store, "r-full") for t in turns_of(store, c.id)
    }

    resumed, _ = run_engine(store, path, run_id="r-full", resume=True)
    assert resumed.resumed and resumed.interrupted_before == 3
    assert _transcripts(store, "r-full") == want
    after = {
        t.id: t.created_at for c in conversations(store, "r-full") for t in turns_of(store, c.id)
    }
    assert all(after[k] == v for k, v in before.items())  # stored turns untouched
    assert resumed.calls["target"] == target_calls and resumed.calls["persona"] == persona_calls
    assert resumed.total_calls < full.total_calls
    convs = {
        c.choices["help"] + "/" + c.choices["limit"]: c for c in conversations(store, "r-full")
    }
    assert convs["decline/accept_limit"].fork_turn == 6
    assert all(c.status == "completed" for c in convs.values())


def test_resume_from_a_persona_turn_and_after_the_fork(store) -> None:
    path = FIX / "on_event.yaml"
    run_engine(store, path, run_id="r2")
    want = _transcripts(store, "r2")
    _crash_at(store, "r2", keep=9)  # mid-exchange 5, after the fork: persona turn stored, reply not
    resumed, _ = run_engine(store, path, run_id="r2", resume=True)
    assert _transcripts(store, "r2") == want
    # two groups (accept, decline): the exchange-5 reply plus exchange 6, each; no persona redo at 5
    assert resumed.calls["target"] == 2 * 2 and resumed.calls["persona"] == 2 * 1


def test_finished_conversations_are_not_rerun(store) -> None:
    path = FIX / "at_turn.yaml"
    run_engine(store, path, run_id="r3")
    again, _ = run_engine(store, path, run_id="r3")  # --run-id naming an existing run resumes it
    assert again.resumed and again.total_calls == 0
    assert all(c.n_turns == 10 for c in conversations(store, "r3"))


def _cli(db: str, *extra: str) -> list[str]:
    return cli_command(
        *scripted_run(db, str(FIX / "on_event.yaml"), str(FIX / "at_turn.yaml")),
        "--replicates",
        "2",
        *extra,
    )


def _start(db: str, run_id: str, delay_s: float) -> subprocess.Popen[str]:
    """``run_id`` started in a process of its own, each bot reply taking ``delay_s``."""
    return subprocess.Popen(
        _cli(db, "--run-id", run_id),
        env=plugin_env(delay_s),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_turns(db: str, n: int, proc: subprocess.Popen, limit_s: float = 180) -> int:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        got = count(db, "select count(*) from turns")
        if got >= n:
            return got
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.1)
    raise AssertionError(f"no {n} turns within {limit_s}s")


@pytest.mark.slow
def test_sigkill_midway_then_resume_completes_without_redoing_turns(cli_db: str) -> None:
    proc = _start(cli_db, "rk", delay_s=0.25)
    try:
        _wait_for_turns(cli_db, 30, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    turns_sql = "select id, created_at, content from turns"
    before = {i: (t, c) for i, t, c in rows(cli_db, turns_sql)}
    statuses = {s for (s,) in rows(cli_db, "select status from conversations")}
    stored_calls = {
        c for (c,) in rows(cli_db, "select distinct call_id from turns where call_id is not null")
    }
    calls_before = count(cli_db, "select count(*) from model_calls")
    assert 30 <= len(before) < 112  # 112 turns when the run completes
    assert "running" in statuses  # a killed process cannot say more; the next start marks them

    done = subprocess.run(
        _cli(cli_db, "--resume", "rk"),
        env=plugin_env(0.0),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumed" in done.stdout
    after = {i: (t, c) for i, t, c in rows(cli_db, turns_sql)}
    statuses = {s for (s,) in rows(cli_db, "select status from conversations")}
    run_status = rows(cli_db, "select status, config from runs where id='rk'")[0]
    calls_after = count(cli_db, "select count(*) from model_calls")
    distinct = count(
        cli_db, 'select count(*) from (select distinct conversation_id, "index" from turns) d'
    )
    config = run_status[1] if isinstance(run_status[1], dict) else json.loads(run_status[1])
    assert statuses == {"completed"} and run_status[0] == "completed" and "resumes" in config
    assert len(after) == 112 and distinct == 112  # complete, no index written twice
    assert all(after[k] == v for k, v in before.items())  # finished turns kept, not redone
    # The uninterrupted run makes 64 calls (30 persona + 34 target): per replicate, on_event shares
    # exchanges 1-3 (2 persona, 3 target calls) and then forks in two (3 + 3 each); at_turn shares
    # exchanges 1-2 (1 persona, 2 target) and then forks in two (3 + 3 each). The resumed process makes
    # exactly those whose turn was not stored: no finished turn is generated again.
    assert calls_after - calls_before == 64 - len(stored_calls)


def test_sigterm_marks_conversations_interrupted(cli_db: str) -> None:
    proc = _start(cli_db, "rt", delay_s=0.3)
    try:
        _wait_for_turns(cli_db, 10, proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert "--resume rt" in out
    statuses = [s for (s,) in rows(cli_db, "select status from conversations")]
    errors = [
        e for (e,) in rows(cli_db, "select error from conversations where status='interrupted'")
    ]
    run_status = rows(cli_db, "select status from runs where id='rt'")[0][0]
    assert "running" not in statuses and "interrupted" in statuses
    assert all(e and "interrupted" in e for e in errors)
    assert run_status == "interrupted"


@pytest.mark.slow
def test_a_run_in_progress_cannot_be_resumed_by_a_second_process(cli_db: str) -> None:
    # Slow replies (1 s each) keep the first process busy while the second one starts and is refused.
    proc = _start(cli_db, "rl", delay_s=1.0)
    try:
        _wait_for_turns(cli_db, 4, proc)
        second = subprocess.run(
            _cli(cli_db, "--resume", "rl"),
            env=plugin_env(0.0),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.poll() is None  # the first is still running
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    errors = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
    assert second.returncode == 2 and len(errors) == 1 and "Traceback" not in second.stderr
    assert f"is being run by process {proc.pid}" in errors[0]
    # The killed owner ran on this host and is gone: its run can be resumed at once, and completes.
    done = subprocess.run(
        _cli(cli_db, "--resume", "rl"),
        env=plugin_env(0.0),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert rows(cli_db, "select status, owner from runs where id='rl'") == [("completed", None)]


def test_only_trees_with_stored_rows_are_read_back(store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from branchpoint.simulator.turn_writer import TurnWriter

    loaded: list[set[int]] = []
    original = TurnWriter.load

    def counting(self, arms):  # type: ignore[no-untyped-def]
        found = original(self, arms)
        loaded.append({c.replicate for c, _ in found.values() if c is not None})
        return found

    monkeypatch.setattr(TurnWriter, "load", counting)
    path = FIX / "at_turn.yaml"
    run_engine(store, path, run_id="r6", replicates=2)
    assert loaded == []  # a fresh run has nothing to read back
    want = _transcripts(store, "r6")
    _crash_at(store, "r6", keep=4)
    with store.session() as s:  # replicate 1's tree died before its rows were committed
        lost = s.exec(
            select(Conversation.id).where(Conversation.run_id == "r6", Conversation.replicate == 1)
        ).all()
        s.execute(delete(ModelCall).where(col(ModelCall.conversation_id).in_(lost)))
        s.execute(delete(Turn).where(col(Turn.conversation_id).in_(lost)))
        gone = col(Conversation.id).in_(lost)
        s.execute(delete(Conversation).where(gone, col(Conversation.parent_id).is_not(None)))
        s.execute(delete(Conversation).where(gone))  # the followers above, then their leader
        s.commit()
    run_engine(store, path, run_id="r6", replicates=2, resume=True)
    assert loaded == [{0}]  # replicate 0's tree is read back and resumed; 1's starts afresh
    assert _transcripts(store, "r6") == want
