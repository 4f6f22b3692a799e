"""A plugin's models (``$BRANCHPOINT_PLUGINS``, ``register(gateway)``) reach ``judge`` as they reach
``run`` and ``sweep``: a lab that serves its judge from an in-house module can judge with it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

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
        [sys.executable, "-m", "tui.cli", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


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
