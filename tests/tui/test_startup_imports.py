"""The TUI's first screen imports no numeric package: opening a store and the app stay light.

numpy alone added about 0.2-0.4 s to the first screen on 2 cores; it came in with the judgment
summaries' triggers, written when a store is opened (``branchpoint.core.read.verdict_sql`` keeps their SQL
apart from the numpy fast path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAVY = ("numpy", "pandas", "scipy", "torch", "transformers", "litellm")
PROBE = """
import sys
from branchpoint.core.store import open_store
from branchpoint.tui.app.app import BranchpointApp
store = open_store(sys.argv[1])  # a new store: created, its summaries' triggers installed
store.close()
store = open_store(sys.argv[1], create=False)  # an existing one, as `branchpoint tui` opens it
BranchpointApp(store)
print(",".join(m for m in sys.argv[2].split(",") if m in sys.modules))
"""


def test_opening_a_store_and_the_app_imports_no_numeric_package(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "s.db"), ",".join(HEAVY)],
        capture_output=True,
        text=True,
        cwd=root,
        check=True,
    )
    assert out.stdout.strip() == "", f"imported at start-up: {out.stdout.strip()}"
