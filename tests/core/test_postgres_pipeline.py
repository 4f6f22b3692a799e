"""The whole command-line pipeline on PostgreSQL gives what it gives on SQLite.

run -> judge -> export -> report, each a separate process talking to the store by URL, with the
scripted test models: the same inputs must leave the same rows, whichever database holds them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from fixtures.engine.helpers import HERE as FIX
from fixtures.engine.helpers import plugin_env, run_cli, scripted_run


def _branchpoint(*args: str) -> str:
    done = run_cli(*args, env=plugin_env(COLUMNS="200"))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _pipeline(db: str, out: Path) -> pd.DataFrame:
    _branchpoint(
        *scripted_run(db, str(FIX / "on_event.yaml"), str(FIX / "at_turn.yaml")),
        "--replicates",
        "2",
        "--run-id",
        "pg1",
    )
    judged = _branchpoint("judge", "pg1", "--rubric", "teen", "--judge", "heuristic", "--db", db)
    assert "0 error(s)" in judged
    _branchpoint("export", "--all", "--out", str(out / "judgments.csv"), "--db", db)
    _branchpoint("report", "--all", "--n-boot", "50", "--out", str(out / "report"), "--db", db)
    return pd.read_csv(out / "judgments.csv").sort_values("judgment_id").reset_index(drop=True)


def test_run_judge_export_report_on_postgres_match_sqlite(
    postgres_url: str, tmp_path: Path
) -> None:
    (tmp_path / "pg").mkdir()
    (tmp_path / "lite").mkdir()
    on_pg = _pipeline(postgres_url, tmp_path / "pg")
    on_sqlite = _pipeline(str(tmp_path / "lite" / "store.db"), tmp_path / "lite")
    assert len(on_pg) > 0 and on_pg["applicable"].notna().all()
    pd.testing.assert_frame_equal(on_pg, on_sqlite)
    # The reports read the same rows; only the store's name in them differs.
    pg_md = (tmp_path / "pg" / "report" / "report.md").read_text()
    lite_md = (tmp_path / "lite" / "report" / "report.md").read_text()
    assert "| " in pg_md and len(pg_md.splitlines()) == len(lite_md.splitlines())
    # The show command finds a conversation in the PostgreSQL store by a prefix of its id.
    conv = on_pg["conversation_id"].iloc[0]
    assert f"conversation {conv}" in _branchpoint("show", conv[:10], "--db", postgres_url)


@pytest.mark.slow
def test_unreachable_or_unknown_database_is_one_line_without_password(tmp_path: Path) -> None:
    cases = [
        (
            "postgresql+psycopg://bob:s3cret-pw@127.0.0.1:1/x",
            "cannot open the store: connection failed",
        ),
        ("nosuchdb://bob:s3cret-pw@host/x", "not a usable database URL"),
    ]
    for url, expected in cases:
        for args in (
            ["run", str(FIX / "on_event.yaml"), "--target", "scripted:slowbot"],
            ["show", "abc"],
            ["export", "--all", "--out", str(tmp_path / "x.csv")],
            ["report", "--all"],
        ):
            done = run_cli(*args, "--db", url, timeout=120)
            lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
            assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], (
                args,
                done.stderr,
            )
            assert "Traceback" not in done.stderr and "s3cret-pw" not in done.stdout + done.stderr
