"""No network at run time from any entry point: the Python API (``examples/study.py``), ``run``
and ``judge`` make no connection and no name look-up beyond the loopback interface.

Each runs in a subprocess under a socket guard (tests/fixtures/socket_guard/sitecustomize.py)
that refuses and records every other attempt, with the offline variables that conftest.py and a
lab's shell might set removed: the package itself must keep litellm from fetching its price map.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchpoint.gateway.testing.openai_server import spawn
from branchpoint.scenarios.bundled import LIBRARY

ROOT = Path(__file__).resolve().parents[1]
GUARD = Path(__file__).parent / "fixtures" / "socket_guard"
# what a process might inherit that would hide a download: the package must set these itself
OFFLINE_VARS = (
    "LITELLM_LOCAL_MODEL_COST_MAP",
    "LITELLM_TELEMETRY",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "BRANCHPOINT_PLUGINS",
)
SCENARIO = LIBRARY / "teen" / "teen-ah-rail-bridge-jump.yaml"


def guarded_env(log: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARS}
    env.update(
        PYTHONPATH=f"{GUARD}{os.pathsep}{ROOT}",
        BRANCHPOINT_SOCKET_GUARD_LOG=str(log),
        # uvloop connects through libuv, which a Python socket guard cannot see
        BRANCHPOINT_EVENT_LOOP="asyncio",
    )
    return env


def guarded(
    args: list[str], log: Path, cwd: Path, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env={**guarded_env(log), **extra},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def attempts(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_the_guard_refuses_and_records_a_connection_out(tmp_path: Path) -> None:
    log = tmp_path / "attempts.log"
    code = (
        "import socket\n"
        "for attempt in (lambda: socket.socket().connect(('192.0.2.1', 80)),\n"
        "                lambda: socket.create_connection(('example.org', 443), timeout=1)):\n"
        "    try:\n"
        "        attempt()\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__)\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "socket.create_connection(s.getsockname(), timeout=1).close(); print('loopback ok')\n"
    )
    result = guarded(["-c", code], log, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["ConnectionRefusedError", "gaierror", "loopback ok"]
    found = attempts(log)
    assert len(found) == 2 and "192.0.2.1" in found[0] and "example.org" in found[1], found


@pytest.mark.slow
def test_the_python_api_example_makes_no_connection_out(tmp_path: Path) -> None:
    log = tmp_path / "attempts.log"
    result = guarded(
        [str(ROOT / "examples" / "study.py")],
        log,
        tmp_path,
        BRANCHPOINT_EXAMPLE_DIR=str(tmp_path / "study"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: True" in result.stdout, result.stdout
    assert attempts(log) == []


@pytest.mark.slow
def test_run_and_judge_make_no_connection_out(tmp_path: Path) -> None:
    log = tmp_path / "attempts.log"
    db = str(tmp_path / "results.db")
    server, url = spawn()
    try:
        ran = guarded(
            [
                "-m", "branchpoint.tui.cli", "run", str(SCENARIO), "--max-turns", "2",
                "--target", "oai:target", "--target-param", f"api_base={url}",
                "--simulator", "oai:persona", "--simulator-param", f"api_base={url}",
                "--db", db, "--run-id", "offline",
            ],
            log,
            tmp_path,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout + ran.stderr
        judged = guarded(
            ["-m", "branchpoint.tui.cli", "judge", "offline", "--judge", "heuristic", "--db", db],
            log,
            tmp_path,
        )
        assert judged.returncode == 0, judged.stdout + judged.stderr
    finally:
        server.kill()
        server.wait()
    assert attempts(log) == []
