"""``branchpoint run --processes N``: the plan's trees split across worker processes.

Each end-to-end test runs the command line as a user does, against real HTTP (the loopback
server) or the engine plugin's scripted models, into a real SQLite file or PostgreSQL database.
Two processes must write exactly what one writes; a SIGKILL of the parent, a worker killed
midway or a Ctrl-C must leave the run resumable, and the resume must make exactly the missing
calls.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.engine.crash_checks import (
    assert_prefixes,
    assert_resume_makes_exactly_the_missing_calls,
    count,
    rows,
)
from fixtures.engine.helpers import cli_command, plugin_env, run_cli, scripted_run

from branchpoint.gateway.limits import ProviderLimits
from branchpoint.gateway.testing.openai_server import ServerThread
from branchpoint.simulator.plan import plan_run
from branchpoint.simulator.processes import partition, resolve_processes, tree_weight, worker_config
from branchpoint.simulator.run_config import RunConfig
from branchpoint.simulator.runner import run

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "engine"
SCENARIOS = [str(FIX / "at_turn.yaml"), str(FIX / "on_event.yaml")]


@pytest.fixture
def slow_server() -> Iterator[ServerThread]:
    server = ServerThread(model="scripted:echo", delay_s=0.25)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- reading the store and the process table ---------------------------------------------------


def _transcripts(db: str) -> dict[str, Any]:
    """Every conversation and its turns, as the store holds them, minus times and call ids."""
    convs = {
        r[0]: r[1:]
        for r in rows(
            db,
            "select id, variant_id, condition, replicate, status, stop_reason, n_turns, "
            "parent_id, fork_turn from conversations",
        )
    }
    turns: dict[str, list[tuple[Any, ...]]] = {c: [] for c in convs}
    for r in rows(
        db,
        'select conversation_id, "index", exchange, role, content, reasoning, stage, '
        "branch_state, fired, events, model, tokens_in, tokens_out, finish_reason, retries, "
        'origin_turn_id, event_source from turns order by conversation_id, "index"',
    ):
        # JSON columns come back as text from SQLite and parsed from PostgreSQL
        row = r[1:]
        turns[r[0]].append(
            tuple(
                json.loads(v) if i in (6, 7, 8) and isinstance(v, str) else v
                for i, v in enumerate(row)
            )
        )
    return {c: (convs[c], turns[c]) for c in convs}


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # [state, ppid, ...]; the name may hold spaces


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _descendants(pid: int) -> list[int]:
    parents = {int(d): _stat(int(d)) for d in os.listdir("/proc") if d.isdigit()}
    found, frontier = [], [pid]
    while frontier:
        ppid = frontier.pop()
        kids = [p for p, st in parents.items() if st is not None and int(st[1]) == ppid]
        found += kids
        frontier += kids
    return [p for p in found if _alive(p)]


def _workers(pid: int) -> list[int]:
    """The run's worker processes: its descendants that have none of their own (not the fork
    server that forks them) and are not multiprocessing's resource tracker."""
    out = []
    for p in _descendants(pid):
        try:
            cmdline = Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" not in cmdline and not _descendants(p):
            out.append(p)
    return out


def _wait_for(what: str, cond: Any, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.02)


def _gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


# -- two processes write what one writes -------------------------------------------------------


def _echo_config(url: str, db: str, **over: Any) -> RunConfig:
    fields: dict[str, Any] = {
        "scenarios": SCENARIOS,
        "targets": ["oai:echo"],
        "target_params": {"api_base": url},
        "simulators": ["oai:echo"],
        "simulator_params": {"api_base": url},
        "replicates": 3,
        "run_id": "same",
        "db": db,
        "concurrency": 8,
    }
    return RunConfig(**(fields | over))


def _calls_line(stdout: str) -> tuple[int, int]:
    found = re.search(r"model calls: (\d+) persona, (\d+) target", stdout)
    assert found, stdout
    return int(found[1]), int(found[2])


@pytest.mark.slow
def test_two_processes_write_exactly_what_one_writes(
    loopback_server: str, cli_db: str, tmp_path: Path
) -> None:
    def served() -> int:
        import urllib.request

        with urllib.request.urlopen(f"{loopback_server}/_stats", timeout=30) as r:
            return int(json.loads(r.read())["requests"])

    reference = str(tmp_path / "one.db")
    before = served()
    one = asyncio.run(run(_echo_config(loopback_server, reference, processes=1)))
    one_served = served() - before

    before = served()
    cli = run_cli(
        "run",
        *SCENARIOS,
        "--target",
        "oai:echo",
        "--target-param",
        f"api_base={loopback_server}",
        "--simulator",
        "oai:echo",
        "--simulator-param",
        f"api_base={loopback_server}",
        "--replicates",
        "3",
        "--concurrency",
        "8",
        "--run-id",
        "same",
        "--db",
        cli_db,
        "--processes",
        "2",
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    two_served = served() - before

    expected, got = _transcripts(reference), _transcripts(cli_db)
    plan = plan_run(_echo_config(loopback_server, reference))
    assert len(expected) == sum(len(t.arms) for t in plan.trees) == 15
    assert all(v[0][3] == "completed" for v in got.values())
    assert got == expected  # the same conversations, turn for turn, byte for byte
    # the same calls: counted by the engine, stored as rows, and answered by the server
    assert _calls_line(cli.stdout) == (one.calls["persona"], one.calls["target"])
    # (the server answers fewer than the engine counts: arms that agree share cached answers)
    assert two_served == one_served
    assert count(cli_db, "select count(*) from model_calls") == count(
        reference, "select count(*) from model_calls"
    )
    # each turn once
    assert count(cli_db, "select count(*) from turns") == sum(len(v[1]) for v in expected.values())
    assert_prefixes(cli_db)
    status = rows(cli_db, "select status, owner from runs where id = 'same'")
    assert status == [("completed", None)]  # finalised once, the lease let go


@pytest.mark.slow
def test_limits_and_concurrency_are_shared_out_between_the_processes(
    slow_server: ServerThread, tmp_path: Path
) -> None:
    assert slow_server.server is not None
    base = [
        "run",
        str(FIX / "at_turn.yaml"),
        "--target",
        "oai:echo",
        "--target-param",
        f"api_base={slow_server.base_url}",
        "--simulator",
        "oai:echo",
        "--simulator-param",
        f"api_base={slow_server.base_url}",
        "--replicates",
        "4",
        "--max-turns",
        "2",
        "--fork",
        "independent",
        "--processes",
        "2",
    ]
    # --concurrency 2 gives each worker one conversation at a time: two calls in flight at
    # once can only come from both workers running together
    done = run_cli(*base, "--concurrency", "2", "--db", str(tmp_path / "a.db"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert slow_server.server.peak_in_flight == 2
    # a limit of 3 calls in flight is split 2 + 1: never more than 3 together, though 8 could
    slow_server.server.peak_in_flight = 0
    key = f"oai:{slow_server.base_url}"
    done = run_cli(
        *base,
        "--concurrency",
        "8",
        "--limit",
        f"{key},max_concurrency=3",
        "--db",
        str(tmp_path / "b.db"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert slow_server.server.peak_in_flight == 3


# -- crashes, stops and resumes ----------------------------------------------------------------

REPLICATES = 10  # x 5 arms (56 turns a replicate), independent: 50 conversations
TOTAL = REPLICATES * 56


def _kill_cli(db: str, *extra: str) -> list[str]:
    return cli_command(
        *scripted_run(db, *SCENARIOS),
        "--replicates",
        str(REPLICATES),
        "--fork",
        "independent",
        "--concurrency",
        "4",
        "--processes",
        "2",
        *extra,
    )


def _start(db: str, run_id: str, **popen: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _kill_cli(db, "--run-id", run_id),
        env=plugin_env(0.05),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        **popen,
    )


def _resume_exactly(db: str, run_id: str) -> None:
    assert_resume_makes_exactly_the_missing_calls(db, _kill_cli(db, "--resume", run_id), TOTAL)


@pytest.mark.slow
def test_sigkill_of_the_parent_stops_the_workers_and_a_rerun_makes_the_missing_calls(
    cli_db: str,
) -> None:
    proc = _start(cli_db, "pk")
    workers: list[int] = []
    try:
        _wait_for(
            "100 turns", lambda: count(cli_db, "select count(*) from turns") >= 100, 240, proc
        )
        _wait_for("two workers", lambda: len(_workers(proc.pid)) == 2, 30, proc)
        workers = _descendants(proc.pid)  # the workers, the fork server, the resource tracker
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    # no parent: its workers see their control pipe close, commit what they queued and exit
    assert _gone(workers, 30) == []
    _resume_exactly(cli_db, "pk")


@pytest.mark.slow
def test_a_worker_killed_midway_fails_the_run_naming_it_and_a_rerun_completes(cli_db: str) -> None:
    proc = _start(cli_db, "wk")
    try:
        _wait_for(
            "100 turns", lambda: count(cli_db, "select count(*) from turns") >= 100, 240, proc
        )
        _wait_for("two workers", lambda: len(_workers(proc.pid)) == 2, 30, proc)
        victim = _workers(proc.pid)[0]
        others = [p for p in _descendants(proc.pid) if p != victim]
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = err.decode()
    assert proc.returncode == 1, text
    assert re.search(rf"error: worker [12] of 2 \(pid {victim}\) died: killed by SIGKILL", text)
    assert "Traceback" not in text
    assert _gone(others, 30) == []  # the other worker was stopped, not left running
    assert rows(cli_db, "select status, owner from runs where id = 'wk'") == [("failed", None)]
    statuses = {s for (s,) in rows(cli_db, "select status from conversations")}
    assert "running" not in statuses and "interrupted" in statuses  # left resumable
    _resume_exactly(cli_db, "wk")


@pytest.mark.slow
def test_ctrl_c_stops_every_process_exits_130_and_a_rerun_completes(cli_db: str) -> None:
    proc = _start(cli_db, "cc", start_new_session=True)  # its own process group, like a terminal's
    try:
        _wait_for(
            "100 turns", lambda: count(cli_db, "select count(*) from turns") >= 100, 240, proc
        )
        _wait_for("two workers", lambda: len(_workers(proc.pid)) == 2, 30, proc)
        everyone = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 130, err.decode()
    assert "resume with --resume cc" in " ".join(err.decode().split())
    assert _gone(everyone, 30) == []
    assert rows(cli_db, "select status from runs where id = 'cc'") == [("interrupted",)]
    _resume_exactly(cli_db, "cc")


# -- sharing out the work and the limits -------------------------------------------------------


def _plan_config(**over: Any) -> RunConfig:
    fields: dict[str, Any] = {
        "scenarios": SCENARIOS,
        "targets": ["scripted:a", "scripted:b"],
        "simulators": ["scripted:persona"],
        "conditions": ["none", "teen_aware"],
        "replicates": 3,
    }
    return RunConfig(**(fields | over))


@pytest.mark.parametrize("n", [2, 3, 5])
def test_trees_are_shared_out_once_each_and_evenly_by_planned_calls(n: int) -> None:
    plan = plan_run(_plan_config())
    weights = [tree_weight(t) for t in plan.trees]
    assert len(set(weights)) > 1  # the two scenarios differ: a count of trees would not do
    groups = partition(plan.trees, n)
    assert sorted(i for g in groups for i in g) == list(range(len(plan.trees)))
    assert all(g == sorted(g) for g in groups)  # each worker's trees in plan order
    loads = [sum(weights[i] for i in g) for g in groups]
    assert len(groups) == n
    assert max(loads) - min(loads) <= max(weights)
    # never more workers than trees
    assert len(partition(plan.trees[:2], 5)) == 2


def test_each_worker_gets_its_share_of_the_concurrency_and_of_every_limit() -> None:
    config = _plan_config(
        concurrency=10,
        limits={
            "oai:x": ProviderLimits(max_concurrency=5, rpm=600, tpm=90000),
            "*": ProviderLimits(max_concurrency=1),
        },
    )
    shares = [worker_config(config, i, 3) for i in range(3)]
    assert [c.concurrency for c in shares] == [4, 3, 3]  # adds up to 10
    assert [c.limits["oai:x"].max_concurrency for c in shares] == [2, 2, 1]
    assert all(c.limits["oai:x"].rpm == 200 and c.limits["oai:x"].tpm == 30000 for c in shares)
    assert [c.limits["*"].max_concurrency for c in shares] == [1, 1, 1]  # at least 1 each
    assert all(c.processes == 1 for c in shares)


def test_a_local_model_is_refused_with_more_than_one_process_and_auto_means_one() -> None:
    from branchpoint.core.errors import UserError

    with pytest.raises(UserError, match=r"--processes 2: embedded is a local model"):
        resolve_processes(_plan_config(targets=["embedded"], processes=2))
    assert resolve_processes(_plan_config(simulators=["embedded"], processes="auto")) == 1
    assert resolve_processes(_plan_config(processes="auto")) == (os.cpu_count() or 1)
    assert resolve_processes(_plan_config(targets=["hf:x"], processes=1)) == 1


def test_bad_processes_values_get_one_line_errors(tmp_path: Path) -> None:
    from branchpoint.core.errors import UserError
    from branchpoint.tui.commands.run_cmds import _processes

    assert _processes("3") == 3 and _processes("auto") == "auto"
    with pytest.raises(UserError, match=r"^--processes '0': expected a number >= 1 or auto$"):
        _processes("0")
    done = run_cli("run", SCENARIOS[0], "--processes", "two", "--db", str(tmp_path / "x.db"))
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --processes 'two': expected a number >= 1 or auto"
    done = run_cli("run", SCENARIOS[0], "--processes", "2", "--db", str(tmp_path / "x.db"))
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: --processes 2: embedded is a local model")
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.db").exists()  # refused before the store was touched


def test_the_parent_of_the_workers_does_not_load_the_conversation_engine() -> None:
    """The run's own process plans and watches; the workers run the graph. Importing LangGraph
    (most of a second of CPU) is the workers' cost only, so the parent reaches the fork server
    sooner, which meanwhile imports it once for all of them (``start_fork_server``)."""
    code = (
        "import sys, branchpoint.simulator.runner, branchpoint.simulator.processes, branchpoint.gateway.gateway, branchpoint.core.store, "
        "branchpoint.tui.commands.run_cmds; print(sorted(m for m in sys.modules if m.startswith('langgraph')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_the_run_reports_its_workers_cpu_time(cli_db: str) -> None:
    """The workers are the fork server's children: the run's own usage (what ``wait4`` and
    ``time`` report) has their CPU only if the fork server reaped them and was waited for."""
    burn = 0.05  # a second or more in all, beyond what the parent alone spends
    proc = subprocess.Popen(
        cli_command(
            *scripted_run(cli_db, *SCENARIOS, target="scripted:cpubot"),
            *("--replicates", "2", "--processes", "2"),
        ),
        env=plugin_env(ENGINE_TEST_BURN_S=str(burn)),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, out
    _, replies = _calls_line(out)
    assert replies >= 20
    assert usage.ru_utime + usage.ru_stime >= replies * burn


def test_the_fork_server_starts_before_the_store_and_the_engine_are_imported(
    tmp_path: Path,
) -> None:
    """``run --processes N`` starts the fork server as early as it can: its imports then overlap
    the parent's, which are half a second more if the run's module comes first."""
    code = (
        "import sys, branchpoint.simulator.processes as p\n"
        "def probe(config):\n"
        "    heavy = ['branchpoint.simulator.runner', 'branchpoint.core.store', 'branchpoint.simulator.graph']\n"
        "    print('loaded:', [m for m in heavy if m in sys.modules])\n"
        "    raise SystemExit(0)\n"
        "p.start_fork_server = probe\n"
        "from branchpoint.tui.cli import app\n"
        f"app(['run', {str(SCENARIOS[0])!r}, '--target', 'oai:x', '--target-param',"
        f" 'api_base=http://127.0.0.1:9/v1', '--simulator', 'oai:x', '--simulator-param',"
        f" 'api_base=http://127.0.0.1:9/v1', '--processes', '2', '--db',"
        f" {str(tmp_path / 'x.db')!r}])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "loaded: []"
