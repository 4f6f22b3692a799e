"""The study's Python API (``study.plan_study`` / ``run_study``) as ``examples/study.py`` uses it:
the example, run against the loopback server, stores the same cells, model calls and
transcripts as ``branchpoint sweep`` of the same manifest into another store."""

from __future__ import annotations

import runpy
import sqlite3
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "study.py"

CELLS = (
    "select id, scenario_id, variant_id, target, condition, simulator, replicate, status, "
    "stop_reason from conversations order by id"
)
# a call's id is made when it is made (branchpoint/gateway/call_ids.py): the calls are compared without it.
# Two cells that send one request at once share one answer (the gateway's single flight): which of
# them made the call and which got the cached copy depends on the order the workers ran in, so the
# calls are compared per conversation without `cached`, and the cache hits per request as counts.
CALLS = (
    "select conversation_id, purpose, model, request_hash, text, reasoning, error "
    "from model_calls order by conversation_id, purpose, request_hash, text, reasoning, error"
)
CACHE_HITS = (
    "select purpose, model, request_hash, sum(cached), count(*) from model_calls "
    "group by purpose, model, request_hash order by purpose, model, request_hash"
)
TRANSCRIPTS = (
    'select id, conversation_id, "index", role, content, reasoning, branch_state, events, '
    "origin_turn_id from turns order by id"
)
VERDICTS = "select id, conversation_id, turn_id, criterion_id, verdict from judgments order by id"


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()


@pytest.mark.slow
def test_the_example_stores_what_the_cli_sweep_of_its_manifest_stores(
    tmp_path: Path,
    loopback_server: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from typer.testing import CliRunner

    from branchpoint.tui.cli import app

    folder = tmp_path / "api"
    monkeypatch.setenv("BRANCHPOINT_EXAMPLE_API_BASE", loopback_server)
    monkeypatch.setenv("BRANCHPOINT_EXAMPLE_DIR", str(folder))
    namespace = runpy.run_path(str(EXAMPLE), run_name="__main__")
    printed = capsys.readouterr().out
    result = namespace["result"]
    assert result.ok and result.sweep.conversations == result.sweep.completed > 0
    assert result.judging.rows > 0 and result.judging.errors == 0
    assert "sweep example-study: " in printed and " cells (0 done, " in printed

    cli_db = tmp_path / "cli.db"
    ran = CliRunner().invoke(
        app, ["sweep", str(folder / "study.yaml"), "--db", str(cli_db), "--yes"]
    )
    assert ran.exit_code == 0, ran.output
    api_db = folder / "results.db"
    for sql in (CELLS, CALLS, CACHE_HITS, TRANSCRIPTS, VERDICTS):
        api, cli = rows(api_db, sql), rows(cli_db, sql)
        assert api and api == cli, sql


def test_a_planned_study_runs_once_and_a_second_plan_has_nothing_to_do(
    tmp_path: Path, loopback_server: str
) -> None:
    import json

    from branchpoint.study import StudyPlan, StudyResult, plan_study, run_study

    manifest = tmp_path / "study.yaml"
    manifest.write_text(
        json.dumps(
            {
                "scenarios": {
                    "paths": [
                        str(
                            REPO
                            / "branchpoint/scenarios/library/teen/teen-ah-rail-bridge-jump.yaml"
                        )
                    ]
                },
                "targets": [{"spec": "oai:target", "params": {"api_base": loopback_server}}],
                "simulators": ["oai:persona"],
                "simulator_params": {"api_base": loopback_server},
                "max_exchanges": 1,
                "store": "results.db",
            }
        ),
        encoding="utf-8",
    )
    plan = plan_study(manifest)
    assert isinstance(plan, StudyPlan) and plan.sweep.done == 0
    assert not (tmp_path / "results.db").exists()  # planning creates no store
    result = run_study(plan)
    assert isinstance(result, StudyResult) and result.ok
    assert result.sweep.completed == plan.sweep.cells
    again = plan_study(manifest)
    assert again.sweep_id == plan.sweep_id == "sweep-study"
    assert again.sweep.done == again.sweep.cells == plan.sweep.cells
