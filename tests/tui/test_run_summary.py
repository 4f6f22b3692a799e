"""The summary that ``run`` prints ends with a command a newcomer can paste: it names a real
conversation of the run, not a placeholder (issue 43)."""

from __future__ import annotations

import re
import shlex
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"


def test_the_run_summary_names_a_conversation_of_the_run_that_show_prints(tmp_path: Path) -> None:
    from branchpoint.tui.cli import app

    db = tmp_path / "summary.db"
    runner = CliRunner()
    env = {"COLUMNS": "200"}
    ran = runner.invoke(
        app,
        ["run", str(SCENARIO), "--target", "scripted:echo", "--simulator", "scripted:echo"]
        + ["--max-turns", "3", "--db", str(db)],
        env=env,
    )
    assert ran.exit_code == 0, ran.output
    assert "CONVERSATION_ID" not in ran.output
    hint = re.search(r"see one with: (branchpoint show .+)$", ran.output, re.M)
    assert hint, ran.output
    words = shlex.split(hint.group(1))
    assert words[:2] == ["branchpoint", "show"] and words[3:] == ["--db", str(db)]
    with sqlite3.connect(db) as conn:
        ids = {i for (i,) in conn.execute("SELECT id FROM conversations")}
    assert words[2] in ids
    shown = runner.invoke(app, words[1:], env=env)
    assert shown.exit_code == 0, shown.output
    assert words[2] in shown.output
