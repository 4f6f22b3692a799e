"""A sweep judge with ``batch: true`` judges through the loopback server's batch API, priced as
the manifest's ``price`` and ``batch_factor`` say."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from branchpoint.gateway.pricing import Price, Tokens
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.gateway.testing.openai_server import ServerThread

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"


@pytest.mark.slow
def test_a_batch_judge_in_a_sweep(
    tmp_path: Path, sweep_plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from branchpoint.tui.cli import app

    # The sweep polls a batch every 30 s (branchpoint.judges.batch_judging.DEFAULT_POLL_S); the server's
    # batch is done after 0.2 s: without this the test waits out one whole poll interval.
    monkeypatch.setattr("branchpoint.judges.batch_judging.DEFAULT_POLL_S", 0.1)

    judge = ScriptedModel(default=sweep_plugin.not_applicable_judge)
    srv = ServerThread(
        "scripted:echo",
        models={"scripted:na": judge},
        routes={"na": "scripted:na"},
        batch_delay_s=0.2,
    )
    srv.start()
    try:
        body = {
            "scenarios": {"paths": [str(SCENARIO)]},
            "targets": ["scripted:quiet"],
            "simulators": ["scripted:sweep-persona"],
            "max_exchanges": 2,
            "fork": "shared",
            "judges": [
                {
                    "spec": "oai:na",
                    "params": {"api_base": srv.base_url},
                    "rubrics": ["teen"],
                    "batch": True,
                    "price": {"input_per_mtok": 1, "output_per_mtok": 2, "batch_factor": 0.4},
                }
            ],
            "store": "results.db",
        }
        path = tmp_path / "study.yaml"
        path.write_text(json.dumps(body), encoding="utf-8")
        out = CliRunner().invoke(app, ["sweep", str(path), "--yes"])
        assert out.exit_code == 0, out.output
        assert "(direct: " in out.output  # the plan prices the other way beside
        assert srv.server is not None and srv.server.batch is not None
        assert srv.server.batch.created == 1
        with sqlite3.connect(tmp_path / "results.db") as db:
            calls = db.execute(
                "select tokens_in, tokens_out, cost, params from model_calls where purpose = 'judge'"
            ).fetchall()
            (verdicts,) = db.execute("select count(*) from judgments").fetchone()
        assert calls and verdicts
        price = Price(1e-6, 2e-6)
        for tokens_in, tokens_out, cost, params in calls:
            assert "batch_id" in json.loads(params)
            assert abs(cost - Tokens(tokens_in, tokens_out).usd(price) * 0.4) < 1e-12
    finally:
        srv.stop()
