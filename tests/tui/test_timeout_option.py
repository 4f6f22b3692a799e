"""`--timeout` on `run` and `judge` bounds one attempt of a model call (issue 45): against a
loopback server that never answers, each attempt gives up after that many seconds and the call
fails saying so, instead of holding the conversation for the default."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
from fixtures.engine.helpers import plugin_env, run_cli

from branchpoint.gateway.testing.openai_server import ServerThread

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "tests" / "fixtures" / "engine"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=plugin_env(OPENAI_API_KEY="sk-test-unused", COLUMNS="200"))


@pytest.mark.slow
def test_run_and_judge_give_up_an_attempt_after_timeout_seconds(tmp_path: Path) -> None:
    server = ServerThread(fault_hang=1.0, hang_s=60.0)
    url = server.start()
    db = str(tmp_path / "r.db")
    try:
        hung = cli(
            "run", str(ENGINE / "on_event.yaml"), "--target", "oai:bot",
            "--target-param", f"api_base={url}", "--simulator", "scripted:persona",
            "--max-turns", "2", "--db", db, "--run-id", "hung", "--timeout", "0.3",
        )  # fmt: skip
        assert hung.returncode == 1, hung.stderr
        assert "timed out after 0.3s" in hung.stderr, hung.stderr
        done = cli(
            "run", str(ENGINE / "on_event.yaml"), "--target", "scripted:slowbot",
            "--simulator", "scripted:persona", "--max-turns", "2", "--db", db, "--run-id", "ok",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        judged = cli(
            "judge", "ok", "--judge", "oai:bot", "--judge-param", f"api_base={url}",
            "--rubric", "teen", "--db", db, "--timeout", "0.3", "--max-retries", "0",
        )  # fmt: skip
        said = judged.stdout + judged.stderr
        assert judged.returncode == 1, said
        assert "verdict(s) are error" in said, said
        with sqlite3.connect(db) as con:
            errors = [
                str(e)
                for (e,) in con.execute(
                    "select error from model_calls where model = 'oai:bot' and run_id = 'ok'"
                )
            ]
        assert errors and all(e.startswith("timed out after 0.3s") for e in errors), errors
    finally:
        server.stop()
