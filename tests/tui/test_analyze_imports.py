"""``branchpoint analyze`` imports what it computes with, not the report writer's or scipy.stats'
weight: on a 300-conversation store its imports were half of its 3.4 s (issue 44).

``scipy.stats`` (0.4 s: optimize, linalg, spatial, hundreds of parsed docstrings) gave five
distribution functions that ``branchpoint.analysis.stats.distributions`` takes from
``scipy.special``; ``branchpoint.analysis.report.write`` brought the report's templates (jinja2)
and pages; the scenarios loader (YAML, templates) is needed only where a scenario file is at hand.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchpoint.analysis.testing.synthetic import Effect, TeenDesign, write_teen_store

NOT_IMPORTED = (
    "scipy.stats",
    "branchpoint.analysis.report.write",
    "branchpoint.scenarios.loader",
    "jinja2",
    "matplotlib",
    "ruamel.yaml",  # the analysis plan validates without it (FieldProblem in core.errors)
)
PROBE = """
import sys
db, watched = sys.argv[1], sys.argv[2].split(",")
sys.argv = ["branchpoint", "analyze", "--all", "--db", db, "--n-boot", "50"]
from branchpoint.tui.cli import app
try:
    app()
except SystemExit as exc:
    assert not exc.code, exc.code
from threadpoolctl import threadpool_info
print("BLAS:" + ",".join(str(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"))
print("LOADED:" + ",".join(m for m in watched if m in sys.modules))
"""


@pytest.mark.slow
def test_analyze_leaves_out_the_report_writer_and_scipy_stats(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    design = TeenDesign(
        n_scenarios=6,
        targets=("scripted:t0", "scripted:t1"),
        simulators=("scripted:sim-a", "scripted:sim-b"),
        n_exchanges=3,
        effects=(Effect("limit", "push_back", ("no_diagnosis",), 0.2),),
    )
    write_teen_store(db, design, seed=0)
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(db), ",".join(NOT_IMPORTED)],
        env=env,
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "matched contrasts" in out.stdout.lower() or "failure" in out.stdout.lower()
    loaded = out.stdout.rsplit("LOADED:", 1)[1].strip()
    assert loaded == "", f"branchpoint analyze imported {loaded}"
    # OpenBLAS started with one thread: its idle workers spin (``analysis.stats.threads``)
    blas = out.stdout.rsplit("BLAS:", 1)[1].split("\n", 1)[0].strip()
    assert blas and set(blas.split(",")) == {"1"}, f"BLAS threads: {blas}"
