"""A sweep through provider faults: ``branchpoint sweep`` (in this process), its target and persona
simulator both ``oai:`` models of one loopback server that answers 10% 429, 5% 500, 2% hangs and
1% malformed JSON under a requests/min limit; a real SQLite file."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from branchpoint.gateway.completion import GenParams, Message
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.gateway.testing.openai_server import ServerThread, max_in_window

REPO = Path(__file__).resolve().parents[2]
TEEN = REPO / "branchpoint" / "scenarios" / "library" / "teen"
SCENARIOS = [
    "teen-ah-rail-bridge-jump.yaml",
    "teen-ah-exam-burden-lagos.yaml",
    "teen-ah-running-away-lyon.yaml",
]
RPM = 2400  # 40 requests a second
WINDOW_S = 1.0  # the server counts arrivals in any 1 s window: at most 40 within the limit


def persona(messages: list[Message], params: GenParams) -> str:
    digest = hashlib.sha256(messages[0].content.encode()).hexdigest()[:8]
    return f"message {len(messages)} ({digest})"


def cli(*args: str) -> tuple[int, str]:
    """``branchpoint ARGS`` in this process (the server's thread goes on answering)."""
    from typer.testing import CliRunner

    from branchpoint.tui.cli import app

    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def manifest(path: Path, url: str) -> Path:
    body = {
        "scenarios": {"paths": [str(TEEN / s) for s in SCENARIOS]},
        "targets": [
            {"spec": "oai:target", "params": {"api_base": url}, "limits": {"rpm": RPM}},
        ],
        "simulators": ["oai:persona"],
        "simulator_params": {"api_base": url},
        "max_exchanges": 3,
        "replicates": 2,
        "fork": "independent",  # every arm from scratch: enough calls to show the rate
        # a hang is given up after 1 s; 2 attempts a call, so that some calls fail for good
        "execution": {"retries": 1, "timeout_s": 1.0},
        "store": "results.db",
    }
    path.write_text(json.dumps(body), encoding="utf-8")  # JSON is YAML
    return path


@pytest.mark.slow
def test_faults_end_every_conversation_with_a_reason_and_the_rpm_holds(tmp_path: Path) -> None:
    server = ServerThread(
        rpm=RPM,
        window_s=WINDOW_S,
        retry_after=0.2,
        hang_s=3.0,  # past the client's 1 s timeout; short, so that the server stops soon
        fault_seed=11,
        routes={"persona": "scripted:persona"},
        models={"scripted:persona": ScriptedModel(default=persona)},
        fault_429=0.10,
        fault_500=0.05,
        fault_hang=0.02,
        fault_malformed=0.01,
    )
    url = server.start()
    db = tmp_path / "results.db"
    try:
        assert server.server is not None
        stats = server.server
        study = manifest(tmp_path / "study.yaml", url)
        code, out = cli("sweep", str(study), "--yes")  # unpriced: no confirmation
        assert code in (0, 1), out

        convs = _rows(db, "select status, stop_reason, error from conversations")
        assert convs
        assert {s for s, *_ in convs} <= {"completed", "failed"}, convs  # none left running
        for status, reason, error in convs:
            if status == "failed":
                assert reason in ("target_error", "simulator_error") and error, (reason, error)
        # each kind of fault was met, and the malformed body and the hang were retried
        for kind in ("fault_429", "fault_500", "fault_hang", "fault_malformed"):
            assert stats.counts[kind] >= 1, stats.counts
        retried = _rows(db, "select count(*) from model_calls where attempts > 1")[0][0]
        assert retried >= stats.counts["fault_500"] // 2
        assert {s for s, *_ in convs} == {"completed", "failed"}  # some failed for good
        # the requests/min limit held at the server: in any 2 s the limit's share, plus the
        # bucket's one-request start, plus 5% for sends that arrive bunched (the client spaces
        # them; a loaded event loop and the socket shift when they arrive: seen on CI, 42 in 1 s
        # for 41) ...
        per_window = RPM * WINDOW_S / 60
        span = 2 * WINDOW_S
        assert max_in_window(stats.arrivals, span) <= RPM * span / 60 * 1.05 + 1
        # ... over a sweep long enough that going faster would have shown
        assert len(stats.arrivals) > 3 * per_window
        # failed calls are recorded with the reason of each attempt: a 429, a 500, a hang
        # (timed out) or a malformed body, each retried once
        errors = [e for (e,) in _rows(db, "select error from model_calls where error is not null")]
        assert errors and all("(after 2 attempts" in e for e in errors), errors
        reasons = re.compile(r"HTTP 429|HTTP 500|timed out after 1s|malformed response")
        assert all(reasons.search(e) for e in errors), errors

        # The faults gone, --retry-failed continues the failed ones to the end. It starts once the
        # rpm window has passed: a new sweep's limiter starts with a full bucket and knows nothing
        # of the first sweep's last requests, which the server still counts (on a loaded CI host
        # both together drew 13 429s, and with one retry a call some failed for good).
        stats.faults = dict.fromkeys(stats.faults, 0.0)
        time.sleep(WINDOW_S)
        code, out = cli("sweep", str(study), "--retry-failed", "--yes")
        assert code == 0, out
        final = _rows(db, "select status from conversations")
        assert len(final) == len(convs) and {s for (s,) in final} == {"completed"}
    finally:
        server.stop()


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()
