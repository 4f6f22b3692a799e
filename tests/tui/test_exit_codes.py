"""Exit codes of ``run`` and ``judge`` (``sweep``'s are in test_sweep_cli.py): 0 all done, 1 some
conversations or verdicts failed (with how many and why), 2 usage errors."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "tests" / "fixtures" / "engine"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "BRANCHPOINT_PLUGINS": "engine_plugin",
        "PYTHONPATH": os.pathsep.join([str(ENGINE), str(REPO)]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, "-m", "branchpoint.tui.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_run_against_a_port_with_no_server_exits_1_saying_why(tmp_path: Path) -> None:
    port = free_port()
    res = cli(
        "run",
        str(ENGINE / "on_event.yaml"),
        "--target",
        "oai:some-model",
        "--target-param",
        f"api_base=http://127.0.0.1:{port}/v1",
        "--simulator",
        "scripted:persona",
        "--max-turns",
        "2",
        "--db",
        str(tmp_path / "r.db"),
    )
    assert res.returncode == 1, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "did not complete" in ln]
    assert len(lines) == 1
    assert lines[0].startswith("3 of 3 conversation(s) did not complete: 3 x target model failed")
    assert f"127.0.0.1:{port}" in lines[0]


@pytest.mark.slow
def test_run_that_completes_exits_0_and_bad_usage_exits_2(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    common = ["--simulator", "scripted:persona", "--max-turns", "2", "--db", db]
    ok = cli("run", str(ENGINE / "on_event.yaml"), "--target", "scripted:slowbot", *common)
    assert ok.returncode == 0, ok.stderr
    assert "did not complete" not in ok.stderr
    bad = cli("run", str(ENGINE / "on_event.yaml"), "--fork", "sometimes", *common)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: --fork 'sometimes': expected shared or independent"


@pytest.mark.slow
def test_judge_with_error_verdicts_exits_1(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    run = cli(
        "run",
        str(ENGINE / "on_event.yaml"),
        "--target",
        "scripted:slowbot",
        "--simulator",
        "scripted:persona",
        "--max-turns",
        "1",
        "--db",
        db,
        "--run-id",
        "r1",
    )
    assert run.returncode == 0, run.stderr
    # scripted:echo repeats its prompt, never the JSON a judge must give: its verdicts are errors.
    judged = cli("judge", "r1", "--rubric", "teen", "--judge", "scripted:echo", "--db", db)
    assert judged.returncode == 1, judged.stdout + judged.stderr
    assert "verdict(s) are error" in judged.stdout
    assert "`branchpoint export r1 --level judgment --out judgments.csv`" in judged.stdout
    # with --all there is no run id to name: it printed `branchpoint export None ...`
    everything = cli(
        "judge",
        "--all",
        "--retry-errors",
        "--rubric",
        "teen",
        "--judge",
        "scripted:echo",
        "--db",
        db,
    )
    assert everything.returncode == 1, everything.stdout + everything.stderr
    assert "`branchpoint export --all --level judgment --out judgments.csv`" in everything.stdout
    assert "None" not in everything.stdout
    heuristic = cli("judge", "r1", "--rubric", "teen", "--judge", "heuristic", "--db", db)
    assert heuristic.returncode == 0, heuristic.stdout + heuristic.stderr


# A plugin's models ($BRANCHPOINT_PLUGINS, register(gateway)) reach ``judge`` as they reach ``run``
# and ``sweep``: a lab that serves its judge from an in-house module can judge with it.
@pytest.mark.slow
def test_judge_uses_a_model_that_a_plugin_registers(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    ran = cli("run", str(ENGINE / "at_turn.yaml"), "--target", "scripted:slowbot",
              "--simulator", "scripted:persona", "--db", str(db))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    judged = cli("judge", "--all", "--rubric", "teen", "--judge", "scripted:slowbot",
                 "--db", str(db))  # fmt: skip
    # slowbot is no judge: its replies are not JSON, so every verdict is an error (exit 1), but
    # the model was found and asked, where before the plugin was never loaded (exit 2).
    assert "no scripted model of that name" not in judged.stderr
    assert judged.returncode == 1, judged.stderr
    with sqlite3.connect(db) as con:
        asked = con.execute(
            "select count(*) from model_calls where model = 'scripted:slowbot' and purpose = 'judge'"
        ).fetchone()[0]
    assert asked > 0
