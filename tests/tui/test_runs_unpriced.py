"""`branchpoint runs` says `unpriced` where a run has a call with no price known, as the live view
does, instead of a made-up `0.0000` (issue 45); a run whose calls are priced shows their cost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from branchpoint.core.records import ModelCall, Run
from branchpoint.core.store import open_store

REPO = Path(__file__).resolve().parents[2]


def test_runs_says_unpriced_where_a_call_has_no_price(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = open_store(db)
    with store.session() as s:
        s.add(Run(id="priced", kind="sweep", status="completed"))
        s.add(Run(id="free", kind="sweep", status="completed"))
        s.commit()
        calls = [
            ("p1", "priced", 0.25, None, False),
            ("p2", "priced", None, "HTTP 500", False),  # failed: no cost, not unpriced
            ("p3", "priced", None, None, True),  # served from the cache: costs nothing again
            ("f1", "free", 0.5, None, False),
            ("f2", "free", None, None, False),  # answered, no price known
        ]
        for cid, run, cost, error, cached in calls:
            s.add(
                ModelCall(
                    id=cid, run_id=run, purpose="target", model="oai:bot", request_hash="h",
                    cost=cost, error=error, cached=cached,
                )
            )  # fmt: skip
        s.commit()
    store.close()
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-m", "branchpoint.tui.cli", "runs", "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = {ln.split()[0]: ln.split() for ln in out.stdout.splitlines() if ln.strip()}
    # id kind status conversations completed failed running calls USD reserved ...
    assert lines["priced"][7:9] == ["3", "0.2500"]
    assert lines["free"][7:9] == ["2", "unpriced"]
