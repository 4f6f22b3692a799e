"""SIGKILL while the write-behind thread is busy: many conversations in flight, replies at once.

The guarantees are those of tests/simulator/test_resume.py, under load: a killed run has lost at most the
calls in flight (every stored turn is whole, each conversation's turns are a prefix of its
transcript and its progress counter says so), and the resume makes exactly the missing calls.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from fixtures.engine.crash_checks import assert_resume_makes_exactly_the_missing_calls, count
from fixtures.engine.helpers import cli_command, plugin_env, scripted_run

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "engine"
REPLICATES = 30  # x 4 arms, independent: 120 conversations, 1,680 turns


def _cli(db: str, *extra: str) -> list[str]:
    return cli_command(
        *scripted_run(db, str(FIX / "on_event.yaml"), str(FIX / "at_turn.yaml")),
        "--replicates",
        str(REPLICATES),
        "--fork",
        "independent",
        "--concurrency",
        "120",
        *extra,
    )


@pytest.mark.slow
def test_sigkill_under_heavy_write_load_then_resume_makes_exactly_the_missing_calls(
    cli_db: str,
) -> None:
    proc = subprocess.Popen(
        _cli(cli_db, "--run-id", "load"),
        env=plugin_env(0.001),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while count(cli_db, "select count(*) from turns") < 400:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no 400 turns within 240 s"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert count(cli_db, "select count(*) from turns") >= 400
    assert_resume_makes_exactly_the_missing_calls(
        cli_db, _cli(cli_db, "--resume", "load"), total=REPLICATES * 4 * 14, timeout=600
    )
