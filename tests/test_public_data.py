"""A clone of the repository alone (no ../shared/data) passes: the tests that need the public data
sets skip, each with one line naming the data and where it comes from, and nothing reads them at
collection. ``branchpoint import kora`` says where KORA's files come from."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.public_data import DATA_ENV
from typer.testing import CliRunner

from branchpoint.tui.cli import app

ROOT = Path(__file__).resolve().parents[1]
DATA_TESTS = [
    "tests/judges/test_judges.py",
    "tests/judges/test_kora_end_to_end.py",
    "tests/scenarios/test_scenario_kora.py",
]


@pytest.mark.slow
def test_without_the_data_its_tests_skip_naming_it(tmp_path: Path) -> None:
    # --setup-only: collection and every test's setup, where skip marks and fixtures decide
    env = {**os.environ, DATA_ENV: str(tmp_path / "absent")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         "--setup-only", "-rs", *DATA_TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "error" not in output.lower().split("short test summary")[-1], output
    skips = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    kora = [s for s in skips if "KORA data absent" in s]
    u18 = [s for s in skips if "Under-18 examples absent" in s]
    assert kora and all("https://github.com/korabench/benchmark (Apache-2.0" in s for s in kora)
    assert u18 and all("https://github.com/openai/model_spec" in s for s in u18)
    assert {re.sub(r":\d+:.*", "", s.split("] ", 1)[1]) for s in kora + u18} == set(DATA_TESTS)


def test_import_kora_says_where_the_files_come_from(tmp_path: Path) -> None:
    runner = CliRunner()
    shown = runner.invoke(app, ["import", "kora", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0
    assert "https://github.com/korabench/benchmark" in shown.output
    assert "packages/benchmark/data/risks.json" in shown.output
    missing = runner.invoke(
        app, ["import", "kora", str(tmp_path / "scenarios.jsonl"), "--out", str(tmp_path / "o")]
    )
    # the UserError that main() prints as one line, exit 2
    assert "file not found" in str(missing.exception)
    assert "https://github.com/korabench/benchmark" in str(missing.exception)
